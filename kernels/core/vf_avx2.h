/*
 * The vector vocabulary (vf_*) of the AVX2 + FMA micro-kernels, shared by the
 * GEMM and the direct convolution so both speak one set of primitives.
 * Include only from objects compiled with the matching ISA flags.
 */
#ifndef AIE_VF_AVX2_H
#define AIE_VF_AVX2_H

#include <immintrin.h>

#include <stdint.h>

typedef __m256 vf;
typedef __m256 vm; /* lane mask: all-ones lanes where a comparison holds */
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

/* The rest serves vmath_fn.h (the operations of vf_scalar.h, lane-wise). */
static inline vf vf_div(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf vf_fma_rn(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vf_neg(vf a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
static inline vf vf_abs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline vf vf_copysign(vf mag, vf s) {
    __m256 sign = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(sign, mag), _mm256_and_ps(sign, s));
}
static inline vf vf_sqrt(vf a) { return _mm256_sqrt_ps(a); }
static inline vf vf_floor(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
static inline vf vf_ceil(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
static inline vf vf_round(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vm vf_lt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline vm vf_le(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
static inline vm vf_gt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
static inline vm vf_eq(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
static inline vm vf_isnan(vf a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
static inline vm vm_and(vm a, vm b) { return _mm256_and_ps(a, b); }
static inline vm vm_or(vm a, vm b) { return _mm256_or_ps(a, b); }
static inline int vm_any(vm m) { return _mm256_movemask_ps(m) != 0; }
static inline vf vf_sel(vm m, vf a, vf b) { return _mm256_blendv_ps(b, a, m); }
static inline vf vf_scale2n(vf e, vf n) {
    __m256i ni = _mm256_cvttps_epi32(_mm256_andnot_ps(vf_isnan(n), n)), bias = _mm256_set1_epi32(127);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(e, s1), s2);
}
/* vf_scale2n's bits for integral n in [-150, 0] (a NaN n with a NaN e: NaN)
 * in 5 instructions, not 11: e 2^(n+64) is exact (e in [0.7, 1.5), so it is
 * normal) and the multiply by 2^-64 rounds once, as the general two-factor
 * form does. */
#define VF_HAVE_SCALE2N_NEG 1
static inline vf vf_scale2n_neg(vf e, vf n) {
    __m256i b = _mm256_slli_epi32(_mm256_cvttps_epi32(_mm256_add_ps(n, _mm256_set1_ps(64.0f + 127.0f))), 23);
    return _mm256_mul_ps(_mm256_mul_ps(e, _mm256_castsi256_ps(b)), _mm256_set1_ps(0x1p-64f));
}
static inline vf vf_frexp(vf x, vf *e) {
    __m256i b = _mm256_castps_si256(x);
    *e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(b, 23), _mm256_set1_epi32(126)));
    b = _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f000000));
    return _mm256_castsi256_ps(b);
}

#include "vmath_fn.h"

#endif
