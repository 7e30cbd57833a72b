/* Pooling, AVX-512: 16 channels per vector, masked channel tail. Window
 * rules and NaN behaviour as the scalar reference (aie_pool.h). */
#include <immintrin.h>

#include "conv_kernels.h"

/* NaN-sticky max: max_ps returns its second operand (acc) when either is
 * NaN, which keeps a NaN acc; a NaN v is then forced in through the mask. */
static inline __m512 max_nan16(__m512 acc, __m512 v) {
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(_mm512_max_ps(v, acc), nan, v);
}

static inline __mmask16 lanes16(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }

void aie_pool_rows_avx512(const aie_pool_args *a, int64_t row0, int64_t row1) {
    const aie_pool2d_params *p = a->p;
    const int64_t C = p->C;
    const int is_max = a->kind == AIE_POOL_MAX;
    for (int64_t row = row0; row < row1; row++) {
        const int64_t n = row / a->P, pp = row % a->P;
        const aie_window wh = aie_pool_window(pp, p->stride_h, p->pad_top, p->pad_bottom, p->kh, p->dil_h, p->H);
        const int64_t h0 = pp * p->stride_h - p->pad_top;
        for (int64_t q = 0; q < a->Q; q++) {
            const aie_window ww = aie_pool_window(q, p->stride_w, p->pad_left, p->pad_right, p->kw, p->dil_w, p->W);
            const int64_t w0 = q * p->stride_w - p->pad_left;
            float *out = a->y + (row * a->Q + q) * C;
            const float count = p->count_include_pad ? (float)(wh.count_all * ww.count_all)
                                                     : (float)((wh.i1 - wh.i0) * (ww.i1 - ww.i0));
            for (int64_t c = 0; c < C; c += 16) {
                const __mmask16 m = lanes16(C - c);
                __m512 acc = is_max ? _mm512_set1_ps(-INFINITY) : _mm512_setzero_ps();
                for (int64_t i = wh.i0; i < wh.i1; i++) {
                    const float *xr = a->x + ((n * p->H + h0 + i * p->dil_h) * p->W + w0 + ww.i0 * p->dil_w) * C + c;
                    for (int64_t j = ww.i0; j < ww.i1; j++, xr += p->dil_w * C) {
                        const __m512 v = _mm512_maskz_loadu_ps(m, xr);
                        acc = is_max ? max_nan16(acc, v) : _mm512_add_ps(acc, v);
                    }
                }
                if (!is_max) acc = _mm512_div_ps(acc, _mm512_set1_ps(count));
                _mm512_mask_storeu_ps(out + c, m, acc);
            }
        }
    }
}

void aie_gpool_avx512(int kind, int64_t HW, int64_t C, const float *x, float *y, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; n++) {
        const float *xn = x + n * HW * C;
        for (int64_t c = 0; c < C; c += 16) {
            const __mmask16 m = lanes16(C - c);
            __m512 acc = _mm512_maskz_loadu_ps(m, xn + c);
            for (int64_t i = 1; i < HW; i++) {
                const __m512 v = _mm512_maskz_loadu_ps(m, xn + i * C + c);
                acc = kind == AIE_POOL_MAX ? max_nan16(acc, v) : _mm512_add_ps(acc, v);
            }
            if (kind == AIE_POOL_AVG) acc = _mm512_div_ps(acc, _mm512_set1_ps((float)HW));
            _mm512_mask_storeu_ps(y + n * C + c, m, acc);
        }
    }
}
