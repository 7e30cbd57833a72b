/*
 * Packing for the blocked SGEMM (layouts in gemm_internal.h). Generic C: the
 * copies are memory-bound and a small share of the time (A is packed once
 * per KC x MC block and reused over NC columns; B once per KC x NC block and
 * reused over every row of C).
 */
#include <string.h>

#include "gemm_internal.h"

/* A full panel of a row-major A with MR a constant: the MR rows are read
 * side by side (MR sequential streams) so that the panel is written
 * sequentially, MR values per k, instead of scattered with stride MR row by
 * row: on Zen 3 the scatter cost ~1.8 cycles per value, a fifth of the
 * 128-row GEMMs of bert_mini. */
static inline __attribute__((always_inline)) void pack_a_rows(const int MR, const float *src, int64_t lda,
                                                              int64_t kc, float *restrict panel) {
    const float *s[16];
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++) s[r] = src + r * lda;
    for (int64_t k = 0; k < kc; k++)
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++) panel[k * MR + r] = s[r][k];
}

void aie_gemm_pack_a(int trans_a, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc,
                     int mr, float *dst) {
    for (int64_t p = 0; p < mc; p += mr) {
        int rows = (int)(mc - p < mr ? mc - p : mr);
        float *panel = dst + p * kc;
        if (trans_a) { /* A stored K x M: row k holds the mr values contiguously */
            for (int64_t k = 0; k < kc; k++) {
                const float *src = A + (k0 + k) * lda + i0 + p;
                float *d = panel + k * mr;
                memcpy(d, src, (size_t)rows * sizeof(float));
                for (int r = rows; r < mr; r++) d[r] = 0.0f;
            }
        } else if (rows == mr && (mr == 4 || mr == 6 || mr == 14)) {
            const float *src = A + (i0 + p) * lda + k0;
            if (mr == 4) pack_a_rows(4, src, lda, kc, panel);
            else if (mr == 6) pack_a_rows(6, src, lda, kc, panel);
            else pack_a_rows(14, src, lda, kc, panel);
        } else { /* read each row of A contiguously, scatter with stride mr */
            for (int r = 0; r < rows; r++) {
                const float *src = A + (i0 + p + r) * lda + k0;
                for (int64_t k = 0; k < kc; k++) panel[k * mr + r] = src[k];
            }
            for (int r = rows; r < mr; r++)
                for (int64_t k = 0; k < kc; k++) panel[k * mr + r] = 0.0f;
        }
    }
}

/* Row k of a B stored K x N (columns [0, nc)) into every panel: NR a
 * constant, so each panel's row is a fixed-size copy the compiler inlines. */
static inline __attribute__((always_inline)) void pack_b_row(const int NR, const float *restrict src, int64_t nc,
                                                             float *restrict d, int64_t panel_stride) {
    int64_t p = 0;
    for (; p + NR <= nc; p += NR, d += panel_stride) memcpy(d, src + p, (size_t)NR * sizeof(float));
    if (p < nc) {
        memcpy(d, src + p, (size_t)(nc - p) * sizeof(float));
        memset(d + (nc - p), 0, (size_t)(NR - (nc - p)) * sizeof(float));
    }
}

void aie_gemm_pack_b(int trans_b, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
                     int nr, float *dst, int64_t panel_stride) {
    if (!trans_b) {
        /* B stored K x N: walk it row by row (one sequential read stream) and
         * write each row's nr-wide pieces into the panels. Panel by panel
         * instead, each k read one 64-byte piece of a row ldb apart (a page
         * or more): on Zen 3 the prefetchers lost that stream and packing a
         * 256 x 1024 B cost ~400 us, a third of a 128 x 1024 x 256 GEMM. */
        for (int64_t k = 0; k < kc; k++) {
            const float *src = B + (k0 + k) * ldb + j0;
            float *d = dst + k * nr;
            if (nr == 16) pack_b_row(16, src, nc, d, panel_stride);
            else if (nr == 32) pack_b_row(32, src, nc, d, panel_stride);
            else pack_b_row(nr, src, nc, d, panel_stride);
        }
        return;
    }
    for (int64_t p = 0; p < nc; p += nr) {
        int cols = (int)(nc - p < nr ? nc - p : nr);
        float *panel = dst + (p / nr) * panel_stride;
        /* B stored N x K: read each row (a column of op(B)) contiguously */
        for (int c = 0; c < cols; c++) {
            const float *src = B + (j0 + p + c) * ldb + k0;
            for (int64_t k = 0; k < kc; k++) panel[k * nr + c] = src[k];
        }
        for (int c = cols; c < nr; c++)
            for (int64_t k = 0; k < kc; k++) panel[k * nr + c] = 0.0f;
    }
}

/* Each pixel's k range is walked in segments that are contiguous in the
 * NHWC input: one kernel row (S taps x C channels, when the group is all the
 * channels and columns are not dilated: the stem's 7 x 3 = 21 floats) or one
 * tap (C/g channels). Out-of-image taps read as zeros. The values are
 * scattered with stride mr into the panel, as aie_gemm_pack_a does for a
 * row-major A, so the micro-kernel sees the same bytes the im2col tile +
 * pack_a pair produced, without the tile's write and re-read. */
void aie_gemm_pack_a_im2col(const void *src, int64_t i0, int64_t mc, int64_t k0, int64_t kc, int mr, float *dst) {
    const gemm_im2col_src *s = src;
    const aie_conv2d_params *p = s->p;
    const int64_t Cg = p->C / p->groups;
    const int runs = p->groups == 1 && p->dil_w == 1;
    const int64_t seg_len = runs ? p->S * Cg : Cg;
    for (int64_t pp = 0; pp < mc; pp += mr) {
        int rows = (int)(mc - pp < mr ? mc - pp : mr);
        float *panel = dst + pp * kc;
        for (int r = 0; r < rows; r++) {
            int64_t m = i0 + pp + r, q = m % s->Q, np = m / s->Q, ph = np % s->P, n = np / s->P;
            const int64_t h0 = ph * p->stride_h - p->pad_top, w0 = q * p->stride_w - p->pad_left;
            const float *ximg = s->x + n * p->H * p->W * p->C + s->g * Cg;
            float *d = panel + r;
            int64_t k = k0;
            const int64_t k1 = k0 + kc;
            while (k < k1) {
                int64_t seg = k / seg_len, o = k % seg_len;
                int64_t take = seg_len - o < k1 - k ? seg_len - o : k1 - k;
                int64_t tr = runs ? seg : seg / p->S, ts = runs ? 0 : seg % p->S;
                int64_t h = h0 + tr * p->dil_h;
                                int64_t lo = 0, hi = 0, base = 0; /* offset e reads ximg[base + e] */
                if (h >= 0 && h < p->H) {
                    if (runs) {
                        int64_t s0 = w0 < 0 ? -w0 : 0, s1 = p->W - w0 < p->S ? p->W - w0 : p->S;
                        lo = s0 * Cg, hi = s1 > s0 ? s1 * Cg : lo;
                        base = (h * p->W + w0) * p->C; /* channels are all of C here */
                    } else {
                        int64_t w = w0 + ts * p->dil_w;
                        if (w >= 0 && w < p->W) hi = Cg, base = (h * p->W + w) * p->C;
                    }
                }
                int64_t e = o, end = o + take, v0 = lo > e ? lo : e, v1 = hi < end ? hi : end;
                for (; e < v0 && e < end; e++, d += mr) *d = 0.0f;
                for (; e < v1; e++, d += mr) *d = ximg[base + e];
                for (; e < end; e++, d += mr) *d = 0.0f;
                k += take;
            }
        }
        for (int r = rows; r < mr; r++)
            for (int64_t k = 0; k < kc; k++) panel[k * mr + r] = 0.0f;
    }
}
