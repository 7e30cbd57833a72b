/*
 * Activation math, AVX2 version: the formulas and coefficients of
 * act_scalar.h (read its header for the accuracy bounds), 8 lanes at a time.
 * Include only from sources compiled with the AVX2 flags (kernels/avx2/).
 * Min/max operand order is chosen so a NaN input comes out NaN: Intel's
 * min/max return the SECOND operand when either is NaN.
 */
#ifndef AIE_ACT_AVX2_H
#define AIE_ACT_AVX2_H

#include <immintrin.h>

#include "act_scalar.h"

static inline __m256 aie_exp_avx2(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(AIE_EXP_LO), _mm256_min_ps(_mm256_set1_ps(AIE_EXP_HI), x));
    __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(AIE_LOG2E), _mm256_set1_ps(0.5f)));
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(AIE_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(AIE_LN2_LO), r);
    __m256 p = _mm256_set1_ps(AIE_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AIE_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AIE_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AIE_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AIE_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AIE_EXP_P5));
    p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i ni = _mm256_cvttps_epi32(n);
    __m256i h = _mm256_srai_epi32(ni, 1);
    __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

static inline __m256 aie_abs_avx2(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

/* Copy the sign of s onto magnitude m. */
static inline __m256 aie_copysign_avx2(__m256 m, __m256 s) {
    __m256i sign = _mm256_and_si256(_mm256_castps_si256(s), _mm256_set1_epi32((int)0x80000000u));
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(m), sign));
}

static inline __m256 aie_tanh_avx2(__m256 x) {
    __m256 a = aie_abs_avx2(x);
    __m256 z = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(AIE_TANH_T0);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(AIE_TANH_T1));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(AIE_TANH_T2));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(AIE_TANH_T3));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(AIE_TANH_T4));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
    __m256 e = aie_exp_avx2(_mm256_add_ps(a, a));
    __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                               _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    big = aie_copysign_avx2(big, x);
    __m256 is_small = _mm256_cmp_ps(a, _mm256_set1_ps(AIE_TANH_SMALL), _CMP_LT_OQ);
    return _mm256_blendv_ps(big, small, is_small);
}

static inline __m256 aie_erf_small_avx2(__m256 t) {
    __m256 z = _mm256_mul_ps(t, t);
    __m256 p = _mm256_set1_ps(AIE_ERF_P5);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(AIE_ERF_P4));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(AIE_ERF_P3));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(AIE_ERF_P2));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(AIE_ERF_P1));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(AIE_ERF_P0));
    return _mm256_mul_ps(t, p);
}

/* erfc(t) for t >= 0; only meaningful for t >= AIE_ERF_SMALL. */
static inline __m256 aie_erfc_tail_avx2(__m256 t, __m256 t_lo) {
    __m256 tc = _mm256_min_ps(_mm256_set1_ps(AIE_ERFC_TMAX), _mm256_max_ps(_mm256_set1_ps(AIE_ERF_SMALL), t));
    __m256 s = _mm256_div_ps(_mm256_set1_ps(1.0f), tc);
    __m256 u = _mm256_sub_ps(s, _mm256_set1_ps(AIE_ERFC_C));
    __m256 r = _mm256_set1_ps(AIE_ERFC_R11);
    r = _mm256_fmadd_ps(r, u, _mm256_set1_ps(AIE_ERFC_R10));
    r = _mm256_fmadd_ps(r, u, _mm256_set1_ps(AIE_ERFC_R9));
    r = _mm256_fmadd_ps(r, u, _mm256_set1_ps(AIE_ERFC_R8));
    r = _mm256_fmadd_ps(r, u, _mm256_set1_ps(AIE_ERFC_R7));
    r = _mm256_fmadd_ps(r, u, _mm256_set1_ps(AIE_ERFC_R6));
    r = _mm256_fmadd_ps(r, u, _mm256_set1_ps(AIE_ERFC_R5));
    r = _mm256_fmadd_ps(r, u, _mm256_set1_ps(AIE_ERFC_R4));
    r = _mm256_fmadd_ps(r, u, _mm256_set1_ps(AIE_ERFC_R3));
    r = _mm256_fmadd_ps(r, u, _mm256_set1_ps(AIE_ERFC_R2));
    r = _mm256_fmadd_ps(r, u, _mm256_set1_ps(AIE_ERFC_R1));
    r = _mm256_fmadd_ps(r, u, _mm256_set1_ps(AIE_ERFC_R0));
    __m256 hi = _mm256_mul_ps(tc, tc);
    __m256 lo = _mm256_fmadd_ps(_mm256_add_ps(tc, tc), t_lo, _mm256_fmsub_ps(tc, tc, hi));
    __m256 e = _mm256_mul_ps(aie_exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), hi)),
                             _mm256_sub_ps(_mm256_set1_ps(1.0f), lo));
    return _mm256_mul_ps(e, _mm256_mul_ps(s, r));
}

static inline __m256 aie_erf_avx2(__m256 x) {
    __m256 a = aie_abs_avx2(x);
    __m256 big = aie_copysign_avx2(_mm256_sub_ps(_mm256_set1_ps(1.0f), aie_erfc_tail_avx2(a, _mm256_setzero_ps())), x);
    __m256 is_small = _mm256_cmp_ps(a, _mm256_set1_ps(AIE_ERF_SMALL), _CMP_LT_OQ);
    return _mm256_blendv_ps(big, aie_erf_small_avx2(x), is_small);
}

/* 1/(1+exp(-z)) through exp(-|z|): no overflow, tiny values kept (see act_scalar.h). */
static inline __m256 aie_sigmoid_avx2(__m256 z) {
    __m256 e = aie_exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), aie_abs_avx2(z)));
    __m256 s = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    __m256 neg = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ);
    return _mm256_blendv_ps(s, _mm256_mul_ps(s, e), neg);
}

static inline __m256 aie_silu_avx2(__m256 x) { return _mm256_mul_ps(x, aie_sigmoid_avx2(x)); }

static inline __m256 aie_gelu_avx2(__m256 x) {
    __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(AIE_SQRT1_2));
    __m256 t_lo = _mm256_fmadd_ps(x, _mm256_set1_ps(AIE_SQRT1_2_LO), _mm256_fmsub_ps(x, _mm256_set1_ps(AIE_SQRT1_2), t));
    __m256 a = aie_abs_avx2(t);
    /* lo part of |t|, zeroed at +-inf where inf - inf would poison the tail */
    __m256 a_lo = _mm256_xor_ps(t_lo, _mm256_and_ps(t, _mm256_set1_ps(-0.0f)));
    a_lo = _mm256_and_ps(_mm256_cmp_ps(a, _mm256_set1_ps(AIE_ERFC_TMAX), _CMP_LT_OQ), a_lo);
    __m256 erfc = aie_erfc_tail_avx2(a, a_lo);
    __m256 neg = _mm256_cmp_ps(t, _mm256_setzero_ps(), _CMP_LT_OQ);
    __m256 big = _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(2.0f), erfc), erfc, neg);
    __m256 small = _mm256_add_ps(_mm256_set1_ps(1.0f), aie_erf_small_avx2(t));
    __m256 is_small = _mm256_cmp_ps(a, _mm256_set1_ps(AIE_ERF_SMALL), _CMP_LT_OQ);
    __m256 one_plus_erf = _mm256_blendv_ps(big, small, is_small);
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), one_plus_erf);
}

static inline __m256 aie_gelu_tanh_avx2(__m256 x) {
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    __m256 u = _mm256_mul_ps(_mm256_set1_ps(AIE_SQRT_2_PI), _mm256_fmadd_ps(_mm256_set1_ps(AIE_GELU_C), x3, x));
    return _mm256_mul_ps(x, aie_sigmoid_avx2(_mm256_add_ps(u, u)));
}

/* NaN-preserving clamp (x is the second operand of both min and max). */
static inline __m256 aie_clamp_avx2(__m256 x, float lo, float hi) {
    return _mm256_max_ps(_mm256_set1_ps(lo), _mm256_min_ps(_mm256_set1_ps(hi), x));
}

static inline __m256 aie_act_avx2(int act, __m256 x, float p0, float p1) {
    switch (act) {
    case AIE_U_RELU: return _mm256_max_ps(_mm256_setzero_ps(), x);
    case AIE_U_CLIP: return aie_clamp_avx2(x, p0, p1);
    case AIE_U_GELU: return aie_gelu_avx2(x);
    case AIE_U_GELU_TANH: return aie_gelu_tanh_avx2(x);
    case AIE_U_SIGMOID: return aie_sigmoid_avx2(x);
    case AIE_U_SILU: return aie_silu_avx2(x);
    case AIE_U_HARDSWISH:
        return _mm256_mul_ps(x, aie_clamp_avx2(_mm256_fmadd_ps(x, _mm256_set1_ps(1.0f / 6.0f),
                                                                 _mm256_set1_ps(0.5f)), 0.0f, 1.0f));
    case AIE_U_HARDSIGMOID:
        return aie_clamp_avx2(_mm256_fmadd_ps(x, _mm256_set1_ps(p0), _mm256_set1_ps(p1)), 0.0f, 1.0f);
    case AIE_U_LEAKY_RELU: {
        __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
        return _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(p0)), neg);
    }
    case AIE_U_TANH: return aie_tanh_avx2(x);
    default: return x;
    }
}

/* Apply an activation in place to n floats; the tail goes through a
 * zero-padded stack buffer (AVX2 has no cheap masked float load/store). */
static inline void aie_act_row_avx2(float *x, int64_t n, int act, float p0, float p1) {
    if (act == AIE_U_IDENTITY) return;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, aie_act_avx2(act, _mm256_loadu_ps(x + i), p0, p1));
    if (i < n) {
        float buf[8] = {0};
        memcpy(buf, x + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(buf, aie_act_avx2(act, _mm256_loadu_ps(buf), p0, p1));
        memcpy(x + i, buf, (size_t)(n - i) * sizeof(float));
    }
}

#endif /* AIE_ACT_AVX2_H */
