/*
 * The SGEMM compute kernels written once over a per-ISA vector type, and
 * instantiated by scalar/gemm_scalar.c, avx2/gemm_avx2.c and
 * avx512/gemm_avx512.c (each compiled with its own ISA flags). The including
 * file defines, before including this:
 *
 *   vf, VL                       vector type and its lanes (float/1 for scalar)
 *   vf_zero/vf_set1/vf_load/vf_loadn/vf_store/vf_storen/vf_fma/vf_mul/
 *   vf_add/vf_hsum               static inline wrappers (loadn/storen touch
 *                                only the first n lanes, 0 <= n <= VL)
 *   act_row(x, n, act, p0, p1)   the activation row of vmath_fn.h (via the vf header)
 *   GEMM_MR, GEMM_NV             micro-tile: MR rows x NV vectors (NR = NV*VL)
 *   GEMM_UKERNEL                 its name, e.g. ukernel_avx512_14x32
 *   GEMM_SMALL_NV_1..8           vectors per row block in the small-M kernel
 *                                for m = 1..8 rows (m * NV accumulators)
 *   GEMM_BT_RB                   rows per tile of the dot-product kernel
 *   GEMM_ISA_ID, GEMM_TABLE      the aie_isa and the table's symbol name
 *   GEMM_PACK_A (optional)       A packing with aie_gemm_pack_a's contract
 *   GEMM_STREAM_MAX_M (optional) most rows for which the streaming kernel
 *                                replaces the register-tile one when B is
 *                                larger than the caches (default 2)
 *
 * The loops below have compile-time trip counts and are fully unrolled, so
 * the accumulator arrays live in registers (checked in the generated code:
 * no stack traffic in the k loops).
 */
#include "gemm_internal.h"

#define GEMM_NR (GEMM_NV * VL)
#ifndef GEMM_STREAM_MAX_M
#define GEMM_STREAM_MAX_M 2
#endif
#ifndef GEMM_PACK_A /* the ISA's own A packing, else the generic one */
#define GEMM_PACK_A aie_gemm_pack_a
#endif
#define GEMM_STR2(x) #x
#define GEMM_STR(x) GEMM_STR2(x)

#define GEMM_INLINE static inline __attribute__((always_inline))
#define GEMM_SMALL_PREFETCH 8 /* rows: ~8 x 100 ns of DRAM latency at one row per ~100 ns */

/* r = alpha * acc (+ beta * c unless beta == 0), stored to the first n lanes. */
GEMM_INLINE void store_vec(float *c, vf acc, int n, vf valpha, float beta, vf vbeta) {
    vf r = vf_mul(acc, valpha);
    if (n >= VL) {
        if (beta != 0.0f) r = vf_fma(vf_load(c), vbeta, r);
        vf_store(c, r);
    } else if (n > 0) {
        if (beta != 0.0f) r = vf_fma(vf_loadn(c, n), vbeta, r);
        vf_storen(c, r, n);
    }
}

/* The tile's epilogue lanes: bias (col/row) and ReLU/clip are applied on the
 * accumulators before the single store; other activations run on the tile's
 * rows right after it, while they are still in L1. */
GEMM_INLINE vf tile_ep_vec(vf r, const gemm_tile_ep *ep, int i, int v, int nv, vf lo, vf hi) {
    if (ep->bias_col) r = vf_add(r, nv >= VL ? vf_load(ep->bias_col + v * VL) : vf_loadn(ep->bias_col + v * VL, nv));
    if (ep->bias_row) r = vf_add(r, vf_set1(ep->bias_row[i]));
    if (ep->act == AIE_U_RELU || ep->act == AIE_U_CLIP) r = vf_max(lo, vf_min(hi, r));
    return r;
}

static void GEMM_UKERNEL(int64_t kc, const float *restrict pa, const float *restrict pb, float *restrict c,
                         int64_t ldc, int m, int n, float alpha, float beta, const gemm_tile_ep *ep) {
    vf acc[GEMM_MR][GEMM_NV];
#pragma GCC unroll 16
    for (int i = 0; i < GEMM_MR; i++)
#pragma GCC unroll 8
        for (int v = 0; v < GEMM_NV; v++) acc[i][v] = vf_zero();
    /* The C tile's rows are ldc apart (often a page or more): start fetching
     * them now so the stores at the end do not wait on ~MR misses. */
#pragma GCC unroll 16
    for (int i = 0; i < GEMM_MR; i++)
        if (i < m) __builtin_prefetch(c + i * ldc, 1), __builtin_prefetch(c + i * ldc + GEMM_NR - 1, 1);

#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        vf b[GEMM_NV];
#pragma GCC unroll 8
        for (int v = 0; v < GEMM_NV; v++) b[v] = vf_load(pb + v * VL);
#pragma GCC unroll 16
        for (int i = 0; i < GEMM_MR; i++) {
            vf a = vf_set1(pa[i]);
#pragma GCC unroll 8
            for (int v = 0; v < GEMM_NV; v++) acc[i][v] = vf_fma(a, b[v], acc[i][v]);
        }
        pa += GEMM_MR;
        pb += GEMM_NR;
    }

    vf valpha = vf_set1(alpha), vbeta = vf_set1(beta);
    if (!ep) {
#pragma GCC unroll 16
        for (int i = 0; i < GEMM_MR; i++) {
            if (i >= m) break;
#pragma GCC unroll 8
            for (int v = 0; v < GEMM_NV; v++)
                store_vec(c + i * ldc + v * VL, acc[i][v], n - v * VL, valpha, beta, vbeta);
        }
        return;
    }
    /* ReLU is clip(0, +inf); max/min keep NaN from the accumulator as the
     * separate pass did (x86 max/min return the second operand on NaN). */
    vf lo = vf_set1(ep->act == AIE_U_CLIP ? ep->p0 : 0.0f);
    vf hi = vf_set1(ep->act == AIE_U_CLIP ? ep->p1 : __builtin_inff());
#pragma GCC unroll 16
    for (int i = 0; i < GEMM_MR; i++) {
        if (i >= m) break;
#pragma GCC unroll 8
        for (int v = 0; v < GEMM_NV; v++) {
            int nv = n - v * VL;
            if (nv <= 0) break;
            float *cp = c + i * ldc + v * VL;
            vf r = vf_mul(acc[i][v], valpha);
            if (beta != 0.0f) r = vf_fma(nv >= VL ? vf_load(cp) : vf_loadn(cp, nv), vbeta, r);
            r = tile_ep_vec(r, ep, i, v, nv, lo, hi);
            if (nv >= VL) vf_store(cp, r);
            else vf_storen(cp, r, nv);
        }
    }
    if (ep->act != AIE_U_IDENTITY && ep->act != AIE_U_RELU && ep->act != AIE_U_CLIP)
        for (int i = 0; i < m; i++) act_row(c + i * ldc, n, ep->act, ep->p0, ep->p1);
}

/* One tile of the small-M kernel: MR_ rows x NV_ vectors of columns starting
 * at C column j (B and C already offset). ncols < NV_*VL only for the tail. */
GEMM_INLINE void small_tile(const int MR_, const int NV_, const int full, int ncols, int64_t K, float alpha,
                            int trans_a, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                            float *C, int64_t ldc) {
    vf acc[GEMM_SMALL_M][8];
#pragma GCC unroll 8
    for (int i = 0; i < MR_; i++)
#pragma GCC unroll 8
        for (int v = 0; v < NV_; v++) acc[i][v] = vf_zero();
    /* A(i, k) walks k with stride sa, rows with stride si */
    const int64_t sa = trans_a ? lda : 1, si = trans_a ? 1 : lda;
    for (int64_t k = 0; k < K; k++) {
        const float *brow = B + k * ldb;
        /* B rows are ldb apart, one page or more for wide B: the hardware
         * prefetchers lose the stream, so fetch GEMM_SMALL_PREFETCH rows ahead
         * (a prefetch past the end of B is harmless: it cannot fault). */
        if (full)
#pragma GCC unroll 8
            for (int o = 0; o < NV_ * VL; o += 16) __builtin_prefetch(brow + GEMM_SMALL_PREFETCH * ldb + o);
        vf b[8];
#pragma GCC unroll 8
        for (int v = 0; v < NV_; v++) b[v] = full ? vf_load(brow + v * VL) : vf_loadn(brow + v * VL, ncols - v * VL);
#pragma GCC unroll 8
        for (int i = 0; i < MR_; i++) {
            vf a = vf_set1(A[k * sa + i * si]);
#pragma GCC unroll 8
            for (int v = 0; v < NV_; v++) acc[i][v] = vf_fma(a, b[v], acc[i][v]);
        }
    }
    vf valpha = vf_set1(alpha), vbeta = vf_set1(beta);
#pragma GCC unroll 8
    for (int i = 0; i < MR_; i++)
#pragma GCC unroll 8
        for (int v = 0; v < NV_; v++)
            store_vec(C + i * ldc + v * VL, acc[i][v], full ? VL : ncols - v * VL, valpha, beta, vbeta);
}

GEMM_INLINE void small_rows(const int MR_, const int NV_, int64_t n0, int64_t n1, int64_t K, float alpha,
                            int trans_a, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                            float *C, int64_t ldc) {
    int64_t j = n0;
    for (; j + NV_ * VL <= n1; j += NV_ * VL)
        small_tile(MR_, NV_, 1, NV_ * VL, K, alpha, trans_a, A, lda, B + j, ldb, beta, C + j, ldc);
    for (; j < n1; j += VL) { /* ragged tail, one vector at a time */
        int64_t left = n1 - j;
        small_tile(MR_, 1, 0, (int)(left < VL ? left : VL), K, alpha, trans_a, A, lda, B + j, ldb, beta, C + j,
                   ldc);
    }
}

static void gemm_small(int64_t m, int64_t n0, int64_t n1, int64_t K, float alpha, int trans_a, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    switch (m) {
    case 1: small_rows(1, GEMM_SMALL_NV_1, n0, n1, K, alpha, trans_a, A, lda, B, ldb, beta, C, ldc); break;
    case 2: small_rows(2, GEMM_SMALL_NV_2, n0, n1, K, alpha, trans_a, A, lda, B, ldb, beta, C, ldc); break;
    case 3: small_rows(3, GEMM_SMALL_NV_3, n0, n1, K, alpha, trans_a, A, lda, B, ldb, beta, C, ldc); break;
    case 4: small_rows(4, GEMM_SMALL_NV_4, n0, n1, K, alpha, trans_a, A, lda, B, ldb, beta, C, ldc); break;
    case 5: small_rows(5, GEMM_SMALL_NV_5, n0, n1, K, alpha, trans_a, A, lda, B, ldb, beta, C, ldc); break;
    case 6: small_rows(6, GEMM_SMALL_NV_6, n0, n1, K, alpha, trans_a, A, lda, B, ldb, beta, C, ldc); break;
    case 7: small_rows(7, GEMM_SMALL_NV_7, n0, n1, K, alpha, trans_a, A, lda, B, ldb, beta, C, ldc); break;
    case 8: small_rows(8, GEMM_SMALL_NV_8, n0, n1, K, alpha, trans_a, A, lda, B, ldb, beta, C, ldc); break;
    default: break; /* the driver never asks for more than GEMM_SMALL_M rows */
    }
}

/* ---- streaming small-M kernel -------------------------------------------
 * For a B too big for the caches (GEMV on a weight matrix), walking a
 * register tile of columns down all K rows reads B one short run per row,
 * a page or more apart, which the hardware prefetchers track poorly. This
 * kernel instead streams GEMM_STREAM_KB whole rows of B at a time (up to
 * GEMM_STREAM_FLOATS / m columns of them), accumulating into an L1-resident
 * buffer: B is read once, in long sequential runs. Each element still sums
 * k = 0, 1, ... K-1 with one FMA per term from zero, so the result is
 * bitwise that of the register kernel. */
#define GEMM_STREAM_FLOATS 4096 /* 16 KiB of accumulators: a third of a 48 KiB L1d */
#define GEMM_STREAM_LINE 16     /* floats per 64-byte cache line */
/* Software prefetch of B this many rows ahead (the next pass) into L2; 0 =
 * none. Tuned on Sapphire Rapids (2026-11-29): 0, 1, 4 and 16 rows measured;
 * the long sequential runs are tracked by the hardware streamer, and the
 * prefetches only cost load slots (0 was fastest at every shape). */
#ifndef GEMM_STREAM_PF
#define GEMM_STREAM_PF 0
#endif

/* acc[i][0:nb] (row stride nbp) += sum over the KB_ rows b[q] of a[i][q] * b[q][0:nb]. */
GEMM_INLINE void stream_pass(const int MR_, const int KB_, int64_t nb, int64_t nbp, const float *const *b,
                             const vf (*a)[4], float *restrict acc, int64_t pf) {
    int64_t j = 0;
    const int64_t nfull = nb / VL * VL;
    for (; j + GEMM_STREAM_LINE <= nfull; j += GEMM_STREAM_LINE) {
#if GEMM_STREAM_PF > 0
#pragma GCC unroll 4
        for (int q = 0; q < KB_; q++) __builtin_prefetch(b[q] + j + pf, 0, 2);
#endif
#pragma GCC unroll 16
        for (int u = 0; u < GEMM_STREAM_LINE; u += VL) {
            vf x[4];
#pragma GCC unroll 4
            for (int q = 0; q < KB_; q++) x[q] = vf_load(b[q] + j + u);
#pragma GCC unroll 8
            for (int i = 0; i < MR_; i++) {
                float *ap = acc + i * nbp + j + u;
                vf c = vf_load(ap);
#pragma GCC unroll 4
                for (int q = 0; q < KB_; q++) c = vf_fma(a[i][q], x[q], c);
                vf_store(ap, c);
            }
        }
    }
    for (; j < nb; j += VL) { /* the last vectors, the final one maybe partial */
        int left = (int)(nb - j < VL ? nb - j : VL);
        vf x[4];
#pragma GCC unroll 4
        for (int q = 0; q < KB_; q++) x[q] = left == VL ? vf_load(b[q] + j) : vf_loadn(b[q] + j, left);
#pragma GCC unroll 8
        for (int i = 0; i < MR_; i++) {
            float *ap = acc + i * nbp + j;
            vf c = vf_load(ap);
#pragma GCC unroll 4
            for (int q = 0; q < KB_; q++) c = vf_fma(a[i][q], x[q], c);
            vf_store(ap, c);
        }
    }
}

GEMM_INLINE void stream_rows(const int MR_, int64_t n0, int64_t n1, int64_t K, float alpha, int trans_a,
                             const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                             int64_t ldc) {
    _Alignas(64) float acc[GEMM_STREAM_FLOATS];
    const int64_t sa = trans_a ? lda : 1, si = trans_a ? 1 : lda;
    const int64_t width = GEMM_STREAM_FLOATS / MR_ / GEMM_STREAM_LINE * GEMM_STREAM_LINE;
    const int64_t pf = GEMM_STREAM_PF * ldb;
    vf valpha = vf_set1(alpha), vbeta = vf_set1(beta);
    for (int64_t j0 = n0; j0 < n1; j0 += width) {
        int64_t nb = n1 - j0 < width ? n1 - j0 : width, nbp = AIE_ROUND_UP(nb, VL);
        for (int64_t x = 0; x < MR_ * nbp; x += VL) vf_store(acc + x, vf_zero());
        const float *b[4];
        vf a[GEMM_SMALL_M][4];
        int64_t k = 0;
        for (; k + 4 <= K; k += 4) {
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) b[q] = B + (k + q) * ldb + j0;
#pragma GCC unroll 8
            for (int i = 0; i < MR_; i++)
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++) a[i][q] = vf_set1(A[(k + q) * sa + i * si]);
            stream_pass(MR_, 4, nb, nbp, b, (const vf(*)[4])a, acc, pf);
        }
        for (; k < K; k++) {
            b[0] = B + k * ldb + j0;
#pragma GCC unroll 8
            for (int i = 0; i < MR_; i++) a[i][0] = vf_set1(A[k * sa + i * si]);
            stream_pass(MR_, 1, nb, nbp, b, (const vf(*)[4])a, acc, pf);
        }
#pragma GCC unroll 8
        for (int i = 0; i < MR_; i++)
            for (int64_t j = 0; j < nb; j += VL)
                store_vec(C + i * ldc + j0 + j, vf_load(acc + i * nbp + j), (int)(nb - j < VL ? nb - j : VL), valpha,
                          beta, vbeta);
    }
}

static void gemm_small_stream(int64_t m, int64_t n0, int64_t n1, int64_t K, float alpha, int trans_a,
                              const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                              int64_t ldc) {
    switch (m) {
    case 1: stream_rows(1, n0, n1, K, alpha, trans_a, A, lda, B, ldb, beta, C, ldc); break;
    case 2: stream_rows(2, n0, n1, K, alpha, trans_a, A, lda, B, ldb, beta, C, ldc); break;
    case 3: stream_rows(3, n0, n1, K, alpha, trans_a, A, lda, B, ldb, beta, C, ldc); break;
    case 4: stream_rows(4, n0, n1, K, alpha, trans_a, A, lda, B, ldb, beta, C, ldc); break;
    case 5: stream_rows(5, n0, n1, K, alpha, trans_a, A, lda, B, ldb, beta, C, ldc); break;
    case 6: stream_rows(6, n0, n1, K, alpha, trans_a, A, lda, B, ldb, beta, C, ldc); break;
    case 7: stream_rows(7, n0, n1, K, alpha, trans_a, A, lda, B, ldb, beta, C, ldc); break;
    case 8: stream_rows(8, n0, n1, K, alpha, trans_a, A, lda, B, ldb, beta, C, ldc); break;
    default: break; /* the driver never asks for more than GEMM_SMALL_M rows */
    }
}

/* ---- small-M kernel on pre-packed B -------------------------------------
 * A packed B is K x NR micro-panels, each one contiguous block: PG_ panels
 * are streamed side by side (PG_ sequential read streams, MR_ x PG_ x NV
 * accumulators, enough independent FMA chains for m = 1), every panel read
 * exactly once and whole-line. Panels are zero-padded, so loads are never
 * masked; only the stores of the last panel are. Columns [0, n) of the
 * packed B starting at panel pointer bp (panels K * NR floats apart). */
#ifndef GEMM_ACC_BUDGET
#define GEMM_ACC_BUDGET 24
#endif
GEMM_INLINE void packed_rows(const int MR_, int64_t n, int64_t K, float alpha, int trans_a, const float *A,
                             int64_t lda, const float *bp, float beta, float *C, int64_t ldc) {
    const int pgw = GEMM_ACC_BUDGET / (MR_ * GEMM_NV); /* a constant once inlined */
    const int PG_ = pgw < 1 ? 1 : pgw > 4 ? 4 : pgw;
    const int64_t sa = trans_a ? lda : 1, si = trans_a ? 1 : lda, pstride = K * GEMM_NR;
    vf valpha = vf_set1(alpha), vbeta = vf_set1(beta);
    for (int64_t j0 = 0; j0 < n; j0 += (int64_t)PG_ * GEMM_NR) {
        int64_t cols = n - j0 < (int64_t)PG_ * GEMM_NR ? n - j0 : (int64_t)PG_ * GEMM_NR;
        int pg = (int)((cols + GEMM_NR - 1) / GEMM_NR);
        const float *b[4];
        for (int g = 0; g < 4; g++) b[g] = bp + (j0 / GEMM_NR + (g < pg ? g : 0)) * pstride;
        vf acc[GEMM_SMALL_M][4 * GEMM_NV];
#pragma GCC unroll 8
        for (int i = 0; i < MR_; i++)
#pragma GCC unroll 16
            for (int v = 0; v < PG_ * GEMM_NV; v++) acc[i][v] = vf_zero();
        for (int64_t k = 0; k < K; k++) {
            vf x[4 * GEMM_NV];
#pragma GCC unroll 4
            for (int g = 0; g < PG_; g++)
#pragma GCC unroll 16
                for (int v = 0; v < GEMM_NV; v++) x[g * GEMM_NV + v] = vf_load(b[g] + k * GEMM_NR + v * VL);
#pragma GCC unroll 8
            for (int i = 0; i < MR_; i++) {
                vf a = vf_set1(A[k * sa + i * si]);
#pragma GCC unroll 16
                for (int v = 0; v < PG_ * GEMM_NV; v++) acc[i][v] = vf_fma(a, x[v], acc[i][v]);
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < MR_; i++)
#pragma GCC unroll 16
            for (int v = 0; v < PG_ * GEMM_NV; v++) {
                int64_t left = cols - (int64_t)v * VL;
                if (left <= 0) break;
                store_vec(C + i * ldc + j0 + v * VL, acc[i][v], (int)(left < VL ? left : VL), valpha, beta, vbeta);
            }
    }
}

static void gemm_small_packed(int64_t m, int64_t n, int64_t K, float alpha, int trans_a, const float *A,
                              int64_t lda, const float *bp, float beta, float *C, int64_t ldc) {
    switch (m) {
    case 1: packed_rows(1, n, K, alpha, trans_a, A, lda, bp, beta, C, ldc); break;
    case 2: packed_rows(2, n, K, alpha, trans_a, A, lda, bp, beta, C, ldc); break;
    case 3: packed_rows(3, n, K, alpha, trans_a, A, lda, bp, beta, C, ldc); break;
    case 4: packed_rows(4, n, K, alpha, trans_a, A, lda, bp, beta, C, ldc); break;
    case 5: packed_rows(5, n, K, alpha, trans_a, A, lda, bp, beta, C, ldc); break;
    case 6: packed_rows(6, n, K, alpha, trans_a, A, lda, bp, beta, C, ldc); break;
    case 7: packed_rows(7, n, K, alpha, trans_a, A, lda, bp, beta, C, ldc); break;
    case 8: packed_rows(8, n, K, alpha, trans_a, A, lda, bp, beta, C, ldc); break;
    default: break; /* the driver never asks for more than GEMM_SMALL_M rows */
    }
}

/* Dot-product kernel for B stored N x K: a tile of RB rows x 4 columns keeps
 * RB*4 vector accumulators along k, reduced horizontally at the end. Rows or
 * columns past the edge reuse a valid pointer and are not stored. */
#define BT_QB 4
static void gemm_small_bt(int64_t m, int64_t n0, int64_t n1, int64_t K, float alpha, const float *A, int64_t lda,
                          const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    for (int64_t i0 = 0; i0 < m; i0 += GEMM_BT_RB) {
        int rows = (int)(m - i0 < GEMM_BT_RB ? m - i0 : GEMM_BT_RB);
        const float *a[GEMM_BT_RB];
        for (int r = 0; r < GEMM_BT_RB; r++) a[r] = A + (i0 + (r < rows ? r : 0)) * lda;
        for (int64_t j0 = n0; j0 < n1; j0 += BT_QB) {
            int cols = (int)(n1 - j0 < BT_QB ? n1 - j0 : BT_QB);
            const float *b[BT_QB];
            for (int q = 0; q < BT_QB; q++) b[q] = B + (j0 + (q < cols ? q : 0)) * ldb;
            vf acc[GEMM_BT_RB][BT_QB];
#pragma GCC unroll 8
            for (int r = 0; r < GEMM_BT_RB; r++)
#pragma GCC unroll 4
                for (int q = 0; q < BT_QB; q++) acc[r][q] = vf_zero();
            int64_t k = 0;
            for (; k + VL <= K; k += VL) {
                vf bv[BT_QB];
#pragma GCC unroll 4
                for (int q = 0; q < BT_QB; q++) bv[q] = vf_load(b[q] + k);
#pragma GCC unroll 8
                for (int r = 0; r < GEMM_BT_RB; r++) {
                    vf av = vf_load(a[r] + k);
#pragma GCC unroll 4
                    for (int q = 0; q < BT_QB; q++) acc[r][q] = vf_fma(av, bv[q], acc[r][q]);
                }
            }
            if (k < K) {
                int left = (int)(K - k);
                vf bv[BT_QB];
#pragma GCC unroll 4
                for (int q = 0; q < BT_QB; q++) bv[q] = vf_loadn(b[q] + k, left);
#pragma GCC unroll 8
                for (int r = 0; r < GEMM_BT_RB; r++) {
                    vf av = vf_loadn(a[r] + k, left);
#pragma GCC unroll 4
                    for (int q = 0; q < BT_QB; q++) acc[r][q] = vf_fma(av, bv[q], acc[r][q]);
                }
            }
            for (int r = 0; r < rows; r++)
                for (int q = 0; q < cols; q++) {
                    float *c = C + (i0 + r) * ldc + j0 + q;
                    float s = alpha * vf_hsum(acc[r][q]);
                    *c = beta != 0.0f ? beta * *c + s : s;
                }
        }
    }
}

GEMM_INLINE void epilogue_rows(float *c, int64_t ldc, int64_t m, int64_t n, const float *bias_col,
                               const float *bias_row, int act, float p0, float p1, int bf16_gelu) {
    for (int64_t i = 0; i < m; i++) {
        float *row = c + i * ldc;
        if (bias_col || bias_row) {
            vf vrow = vf_set1(bias_row ? bias_row[i] : 0.0f);
            int64_t j = 0;
            for (; j + VL <= n; j += VL) {
                vf x = vf_load(row + j);
                if (bias_col) x = vf_add(x, vf_load(bias_col + j));
                if (bias_row) x = vf_add(x, vrow);
                vf_store(row + j, x);
            }
            if (j < n) {
                int left = (int)(n - j);
                vf x = vf_loadn(row + j, left);
                if (bias_col) x = vf_add(x, vf_loadn(bias_col + j, left));
                if (bias_row) x = vf_add(x, vrow);
                vf_storen(row + j, x, left);
            }
        }
        if (bf16_gelu) {
            int64_t j = 0;
            for (; j + VL <= n; j += VL) vf_store(row + j, vmf_gelu_bf16(vf_load(row + j)));
            if (j < n) vf_storen(row + j, vmf_gelu_bf16(vf_loadn(row + j, (int)(n - j))), (int)(n - j));
        } else {
            act_row(row, n, act, p0, p1);
        }
    }
}

static void gemm_epilogue(float *c, int64_t ldc, int64_t m, int64_t n, const float *bias_col,
                          const float *bias_row, int act, float p0, float p1) {
    epilogue_rows(c, ldc, m, n, bias_col, bias_row, act, p0, p1, 0);
}

/* The bf16 GEMM's: GELU to bf16 accuracy (vmf_gelu_bf16), the rest as above. */
static void gemm_epilogue_bf16(float *c, int64_t ldc, int64_t m, int64_t n, const float *bias_col,
                               const float *bias_row, int act, float p0, float p1) {
    epilogue_rows(c, ldc, m, n, bias_col, bias_row, act, p0, p1, act == AIE_U_GELU);
}

const gemm_kernels GEMM_TABLE = {
    .isa = GEMM_ISA_ID,
    .mr = GEMM_MR,
    .nr = GEMM_NR,
    .ukernel_name = GEMM_STR(GEMM_UKERNEL),
    .ukernel = GEMM_UKERNEL,
    .small = gemm_small,
    .small_stream = gemm_small_stream,
    .stream_max_m = GEMM_STREAM_MAX_M,
    .small_packed = gemm_small_packed,
    .small_bt = gemm_small_bt,
    .epilogue = gemm_epilogue,
    .epilogue_bf16 = gemm_epilogue_bf16,
    .pack_a = GEMM_PACK_A,
};
