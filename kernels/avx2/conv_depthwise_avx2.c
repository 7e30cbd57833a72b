/* Depthwise convolution, AVX2 + FMA: 8 channels per vector, the channel tail
 * through maskload/maskstore; taps accumulated in the reference's (r, s)
 * order, the epilogue (residual, activation) in registers. Same structure as
 * the AVX-512 variant: a 3x3 fast path that keeps the nine weight vectors in
 * registers while an 8-channel block sweeps the output row, and a generic
 * per-pixel loop for padded columns and other kernel sizes. */
#include <immintrin.h>

#include "vf_avx2.h"
#include "conv_kernels.h"

/* Lane mask with the first `n` (0..8) lanes on, for maskload/maskstore. */
static inline __m256i lanes8(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n > 8 ? 8 : n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline __m256 load8(const float *p, int full, __m256i m) {
    return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m);
}

/* One output pixel, channels [c, c+8); taps r in [r0, r1). */
static inline __m256 dw_pixel(const aie_dwconv_args *a, int64_t n, int64_t h0, int64_t r0, int64_t r1, int64_t q,
                              int64_t c, int full, __m256i m, __m256 acc) {
    const aie_conv2d_params *p = a->p;
    const int64_t C = p->C, wbase = q * p->stride_w - p->pad_left;
    int64_t s0 = 0, s1 = p->S;
    while (s0 < s1 && wbase + s0 * p->dil_w < 0) s0++;
    while (s1 > s0 && wbase + (s1 - 1) * p->dil_w >= p->W) s1--;
    for (int64_t r = r0; r < r1; r++) {
        /* index arithmetic in int64 first: h0 or wbase may be negative */
        const int64_t xi = ((n * p->H + h0 + r * p->dil_h) * p->W + wbase + s0 * p->dil_w) * C + c;
        const float *xr = a->x + xi, *wr = a->w + (r * p->S + s0) * C + c;
        for (int64_t s = s0; s < s1; s++, xr += p->dil_w * C, wr += C)
            acc = _mm256_fmadd_ps(load8(xr, full, m), load8(wr, full, m), acc);
    }
    return acc;
}

static inline void dw_store(const aie_dwconv_args *a, int64_t o, int full, __m256i m, __m256 acc) {
    const aie_epilogue *ep = a->ep;
    if (a->residual) acc = _mm256_add_ps(acc, load8(a->residual + o, full, m));
    acc = vmf_act(ep->act, acc, ep->p0, ep->p1);
    if (full)
        _mm256_storeu_ps(a->y + o, acc);
    else
        _mm256_maskstore_ps(a->y + o, m, acc);
}

/* A 3x3 output row; kernel rows [r0, r1) fall inside the image. */
static void dw3x3_row(const aie_dwconv_args *a, int64_t row, int64_t n, int64_t h0, int64_t r0, int64_t r1) {
    const aie_conv2d_params *p = a->p;
    const int64_t C = p->C, sw = p->stride_w, dw = p->dil_w;
    /* output columns whose three taps are all inside [0, W) */
    int64_t q0 = (p->pad_left + sw - 1) / sw, q1 = a->Q;
    while (q1 > q0 && (q1 - 1) * sw - p->pad_left + 2 * dw >= p->W) q1--;
    if (q0 > q1) q0 = q1;
    for (int64_t c = 0; c < C; c += 8) {
        const int full = C - c >= 8;
        const __m256i m = lanes8(C - c);
        __m256 w[9];
        for (int t = 0; t < 9; t++) w[t] = load8(a->w + t * C + c, full, m);
        const __m256 b = a->bias ? load8(a->bias + c, full, m) : _mm256_setzero_ps();
        for (int64_t q = 0; q < q0; q++)
            dw_store(a, (row * a->Q + q) * C + c, full, m, dw_pixel(a, n, h0, r0, r1, q, c, full, m, b));
        const int64_t rs = p->dil_h * p->W * C, cs = dw * C;
        /* rows outside the image are skipped by r0/r1 (a border output row);
         * x pointers of skipped rows are never dereferenced */
        const float *x0 = a->x + ((n * p->H + h0) * p->W + q0 * sw - p->pad_left) * C + c;
        for (int64_t q = q0; q < q1; q++, x0 += sw * C) {
            const float *x1 = x0 + rs, *x2 = x1 + rs;
            __m256 acc = b;
            if (r0 == 0) {
                acc = _mm256_fmadd_ps(load8(x0, full, m), w[0], acc);
                acc = _mm256_fmadd_ps(load8(x0 + cs, full, m), w[1], acc);
                acc = _mm256_fmadd_ps(load8(x0 + 2 * cs, full, m), w[2], acc);
            }
            if (r0 <= 1 && r1 >= 2) {
                acc = _mm256_fmadd_ps(load8(x1, full, m), w[3], acc);
                acc = _mm256_fmadd_ps(load8(x1 + cs, full, m), w[4], acc);
                acc = _mm256_fmadd_ps(load8(x1 + 2 * cs, full, m), w[5], acc);
            }
            if (r1 == 3) {
                acc = _mm256_fmadd_ps(load8(x2, full, m), w[6], acc);
                acc = _mm256_fmadd_ps(load8(x2 + cs, full, m), w[7], acc);
                acc = _mm256_fmadd_ps(load8(x2 + 2 * cs, full, m), w[8], acc);
            }
            dw_store(a, (row * a->Q + q) * C + c, full, m, acc);
        }
        for (int64_t q = q1; q < a->Q; q++)
            dw_store(a, (row * a->Q + q) * C + c, full, m, dw_pixel(a, n, h0, r0, r1, q, c, full, m, b));
    }
}

void aie_dwconv_rows_avx2(const aie_dwconv_args *a, int64_t row0, int64_t row1) {
    const aie_conv2d_params *p = a->p;
    const int64_t C = p->C;
    for (int64_t row = row0; row < row1; row++) {
        const int64_t n = row / a->P, pp = row % a->P;
        const int64_t h0 = pp * p->stride_h - p->pad_top;
        int64_t r0 = 0, r1 = p->R; /* taps whose input row is inside [0, H) */
        while (r0 < r1 && h0 + r0 * p->dil_h < 0) r0++;
        while (r1 > r0 && h0 + (r1 - 1) * p->dil_h >= p->H) r1--;
        if (p->R == 3 && p->S == 3 && r0 < r1) {
            dw3x3_row(a, row, n, h0, r0, r1);
            continue;
        }
        for (int64_t q = 0; q < a->Q; q++)
            for (int64_t c = 0; c < C; c += 8) {
                const int full = C - c >= 8;
                const __m256i m = lanes8(C - c);
                const __m256 b = a->bias ? load8(a->bias + c, full, m) : _mm256_setzero_ps();
                dw_store(a, (row * a->Q + q) * C + c, full, m, dw_pixel(a, n, h0, r0, r1, q, c, full, m, b));
            }
    }
}
