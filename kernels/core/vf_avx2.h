/*
 * The vector vocabulary (vf_*) of the AVX2 + FMA micro-kernels, shared by the
 * GEMM and the direct convolution so both speak one set of primitives.
 * Include only from objects compiled with the matching ISA flags.
 */
#ifndef AIE_VF_AVX2_H
#define AIE_VF_AVX2_H

#include <immintrin.h>

#include "act_avx2.h"

typedef __m256 vf;
#define VL 8

/* lanes(n): the first n of 8 lanes set, read from a sliding window. */
static const int32_t k_lane_window[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
static inline __m256i lanes(int n) { return _mm256_loadu_si256((const __m256i *)(k_lane_window + 8 - n)); }
static inline vf vf_zero(void) { return _mm256_setzero_ps(); }
static inline vf vf_set1(float x) { return _mm256_set1_ps(x); }
static inline vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline vf vf_loadn(const float *p, int n) { return _mm256_maskload_ps(p, lanes(n)); }
static inline void vf_store(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline void vf_storen(float *p, vf v, int n) { _mm256_maskstore_ps(p, lanes(n), v); }
static inline vf vf_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline float vf_hsum(vf v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#define act_row aie_act_row_avx2

#endif
