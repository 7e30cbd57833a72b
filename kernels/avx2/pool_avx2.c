/* Pooling, AVX2: 8 channels per vector, the channel tail through
 * maskload/maskstore. Window rules and NaN behaviour as the scalar reference
 * (aie_pool.h). */
#include <immintrin.h>

#include "conv_kernels.h"

/* NaN-sticky max: max_ps returns its second operand (acc) when either is
 * NaN, which keeps a NaN acc; a NaN v is then OR-ed in (all-ones is a NaN). */
static inline __m256 max_nan8(__m256 acc, __m256 v) {
    return _mm256_or_ps(_mm256_max_ps(v, acc), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

static inline __m256i lanes8(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n > 8 ? 8 : n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline __m256 load8(const float *p, int full, __m256i m) {
    return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m);
}

static inline void store8(float *p, int full, __m256i m, __m256 v) {
    if (full)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, m, v);
}

void aie_pool_rows_avx2(const aie_pool_args *a, int64_t row0, int64_t row1) {
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
            for (int64_t c = 0; c < C; c += 8) {
                const int full = C - c >= 8;
                const __m256i m = lanes8(C - c);
                __m256 acc = is_max ? _mm256_set1_ps(-INFINITY) : _mm256_setzero_ps();
                for (int64_t i = wh.i0; i < wh.i1; i++) {
                    const float *xr = a->x + ((n * p->H + h0 + i * p->dil_h) * p->W + w0 + ww.i0 * p->dil_w) * C + c;
                    for (int64_t j = ww.i0; j < ww.i1; j++, xr += p->dil_w * C) {
                        const __m256 v = load8(xr, full, m);
                        acc = is_max ? max_nan8(acc, v) : _mm256_add_ps(acc, v);
                    }
                }
                if (!is_max) acc = _mm256_div_ps(acc, _mm256_set1_ps(count));
                store8(out + c, full, m, acc);
            }
        }
    }
}

void aie_gpool_avx2(int kind, int64_t HW, int64_t C, const float *x, float *y, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; n++) {
        const float *xn = x + n * HW * C;
        for (int64_t c = 0; c < C; c += 8) {
            const int full = C - c >= 8;
            const __m256i m = lanes8(C - c);
            __m256 acc = load8(xn + c, full, m);
            for (int64_t i = 1; i < HW; i++) {
                const __m256 v = load8(xn + i * C + c, full, m);
                acc = kind == AIE_POOL_MAX ? max_nan8(acc, v) : _mm256_add_ps(acc, v);
            }
            if (kind == AIE_POOL_AVG) acc = _mm256_div_ps(acc, _mm256_set1_ps((float)HW));
            store8(y + n * C + c, full, m, acc);
        }
    }
}
