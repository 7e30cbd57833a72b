/*
 * Activation math, AVX-512 version: the formulas and coefficients of
 * act_scalar.h (read its header for the accuracy bounds), 16 lanes at a time.
 * Include only from sources compiled with the AVX-512 flags (kernels/avx512/).
 * Min/max operand order is chosen so a NaN input comes out NaN: Intel's
 * min/max return the SECOND operand when either is NaN.
 */
#ifndef AIE_ACT_AVX512_H
#define AIE_ACT_AVX512_H

#include <immintrin.h>

#include "act_scalar.h"

static inline __m512 aie_exp_avx512(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(AIE_EXP_LO), _mm512_min_ps(_mm512_set1_ps(AIE_EXP_HI), x));
    __m512 n = _mm512_floor_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(AIE_LOG2E), _mm512_set1_ps(0.5f)));
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(AIE_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(AIE_LN2_LO), r);
    __m512 p = _mm512_set1_ps(AIE_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AIE_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AIE_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AIE_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AIE_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AIE_EXP_P5));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    __m512i ni = _mm512_cvttps_epi32(n);
    __m512i h = _mm512_srai_epi32(ni, 1);
    __m512i bias = _mm512_set1_epi32(127);
    __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(h, bias), 23));
    __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(ni, h), bias), 23));
    return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
}

static inline __m512 aie_abs_avx512(__m512 x) { return _mm512_abs_ps(x); }

/* Copy the sign of s onto magnitude m. */
static inline __m512 aie_copysign_avx512(__m512 m, __m512 s) {
    __m512i sign = _mm512_and_si512(_mm512_castps_si512(s), _mm512_set1_epi32((int)0x80000000u));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(m), sign));
}

static inline __m512 aie_tanh_avx512(__m512 x) {
    __m512 a = aie_abs_avx512(x);
    __m512 z = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(AIE_TANH_T0);
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(AIE_TANH_T1));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(AIE_TANH_T2));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(AIE_TANH_T3));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(AIE_TANH_T4));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
    __m512 e = aie_exp_avx512(_mm512_add_ps(a, a));
    __m512 big = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                               _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
    big = aie_copysign_avx512(big, x);
    __mmask16 is_small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(AIE_TANH_SMALL), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(is_small, big, small);
}

static inline __m512 aie_erf_small_avx512(__m512 t) {
    __m512 z = _mm512_mul_ps(t, t);
    __m512 p = _mm512_set1_ps(AIE_ERF_P5);
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(AIE_ERF_P4));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(AIE_ERF_P3));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(AIE_ERF_P2));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(AIE_ERF_P1));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(AIE_ERF_P0));
    return _mm512_mul_ps(t, p);
}

/* erfc(t) for t >= 0; only meaningful for t >= AIE_ERF_SMALL. */
static inline __m512 aie_erfc_tail_avx512(__m512 t, __m512 t_lo) {
    __m512 tc = _mm512_min_ps(_mm512_set1_ps(AIE_ERFC_TMAX), _mm512_max_ps(_mm512_set1_ps(AIE_ERF_SMALL), t));
    __m512 s = _mm512_div_ps(_mm512_set1_ps(1.0f), tc);
    __m512 u = _mm512_sub_ps(s, _mm512_set1_ps(AIE_ERFC_C));
    __m512 r = _mm512_set1_ps(AIE_ERFC_R11);
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(AIE_ERFC_R10));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(AIE_ERFC_R9));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(AIE_ERFC_R8));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(AIE_ERFC_R7));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(AIE_ERFC_R6));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(AIE_ERFC_R5));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(AIE_ERFC_R4));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(AIE_ERFC_R3));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(AIE_ERFC_R2));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(AIE_ERFC_R1));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(AIE_ERFC_R0));
    __m512 hi = _mm512_mul_ps(tc, tc);
    __m512 lo = _mm512_fmadd_ps(_mm512_add_ps(tc, tc), t_lo, _mm512_fmsub_ps(tc, tc, hi));
    __m512 e = _mm512_mul_ps(aie_exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), hi)),
                             _mm512_sub_ps(_mm512_set1_ps(1.0f), lo));
    return _mm512_mul_ps(e, _mm512_mul_ps(s, r));
}

static inline __m512 aie_erf_avx512(__m512 x) {
    __m512 a = aie_abs_avx512(x);
    __m512 big = aie_copysign_avx512(_mm512_sub_ps(_mm512_set1_ps(1.0f), aie_erfc_tail_avx512(a, _mm512_setzero_ps())), x);
    __mmask16 is_small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(AIE_ERF_SMALL), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(is_small, big, aie_erf_small_avx512(x));
}

/* 1/(1+exp(-z)) through exp(-|z|): no overflow, tiny values kept (see act_scalar.h). */
static inline __m512 aie_sigmoid_avx512(__m512 z) {
    __m512 e = aie_exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), aie_abs_avx512(z)));
    __m512 s = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    __mmask16 neg = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_mul_ps(s, neg, s, e);
}

static inline __m512 aie_silu_avx512(__m512 x) { return _mm512_mul_ps(x, aie_sigmoid_avx512(x)); }

static inline __m512 aie_gelu_avx512(__m512 x) {
    __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(AIE_SQRT1_2));
    __m512 t_lo = _mm512_fmadd_ps(x, _mm512_set1_ps(AIE_SQRT1_2_LO), _mm512_fmsub_ps(x, _mm512_set1_ps(AIE_SQRT1_2), t));
    __m512 a = aie_abs_avx512(t);
    /* lo part of |t|, zeroed at +-inf where inf - inf would poison the tail */
    __m512 a_lo = _mm512_xor_ps(t_lo, _mm512_and_ps(t, _mm512_set1_ps(-0.0f)));
    a_lo = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(AIE_ERFC_TMAX), _CMP_LT_OQ), a_lo);
    __m512 erfc = aie_erfc_tail_avx512(a, a_lo);
    __mmask16 neg = _mm512_cmp_ps_mask(t, _mm512_setzero_ps(), _CMP_LT_OQ);
    __m512 big = _mm512_mask_blend_ps(neg, _mm512_sub_ps(_mm512_set1_ps(2.0f), erfc), erfc);
    __m512 small = _mm512_add_ps(_mm512_set1_ps(1.0f), aie_erf_small_avx512(t));
    __mmask16 is_small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(AIE_ERF_SMALL), _CMP_LT_OQ);
    __m512 one_plus_erf = _mm512_mask_blend_ps(is_small, big, small);
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), one_plus_erf);
}

static inline __m512 aie_gelu_tanh_avx512(__m512 x) {
    __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    __m512 u = _mm512_mul_ps(_mm512_set1_ps(AIE_SQRT_2_PI), _mm512_fmadd_ps(_mm512_set1_ps(AIE_GELU_C), x3, x));
    return _mm512_mul_ps(x, aie_sigmoid_avx512(_mm512_add_ps(u, u)));
}

/* NaN-preserving clamp (x is the second operand of both min and max). */
static inline __m512 aie_clamp_avx512(__m512 x, float lo, float hi) {
    return _mm512_max_ps(_mm512_set1_ps(lo), _mm512_min_ps(_mm512_set1_ps(hi), x));
}

static inline __m512 aie_act_avx512(int act, __m512 x, float p0, float p1) {
    switch (act) {
    case AIE_U_RELU: return _mm512_max_ps(_mm512_setzero_ps(), x);
    case AIE_U_CLIP: return aie_clamp_avx512(x, p0, p1);
    case AIE_U_GELU: return aie_gelu_avx512(x);
    case AIE_U_GELU_TANH: return aie_gelu_tanh_avx512(x);
    case AIE_U_SIGMOID: return aie_sigmoid_avx512(x);
    case AIE_U_SILU: return aie_silu_avx512(x);
    case AIE_U_HARDSWISH:
        return _mm512_mul_ps(x, aie_clamp_avx512(_mm512_fmadd_ps(x, _mm512_set1_ps(1.0f / 6.0f),
                                                                 _mm512_set1_ps(0.5f)), 0.0f, 1.0f));
    case AIE_U_HARDSIGMOID:
        return aie_clamp_avx512(_mm512_fmadd_ps(x, _mm512_set1_ps(p0), _mm512_set1_ps(p1)), 0.0f, 1.0f);
    case AIE_U_LEAKY_RELU: {
        __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
        return _mm512_mask_mul_ps(x, neg, x, _mm512_set1_ps(p0));
    }
    case AIE_U_TANH: return aie_tanh_avx512(x);
    default: return x;
    }
}

/* Apply an activation in place to n floats; the tail uses a masked load. */
static inline void aie_act_row_avx512(float *x, int64_t n, int act, float p0, float p1) {
    if (act == AIE_U_IDENTITY) return;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, aie_act_avx512(act, _mm512_loadu_ps(x + i), p0, p1));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, m, aie_act_avx512(act, _mm512_maskz_loadu_ps(m, x + i), p0, p1));
    }
}

#endif /* AIE_ACT_AVX512_H */
