/*
 * Activation math, scalar version: the reference for act_avx2.h and
 * act_avx512.h, which evaluate the SAME formulas and coefficients lane by
 * lane (so every ISA agrees to the last ulp or two). Used by the GEMM
 * epilogue and the elementwise ops. No libm: results do not depend on the
 * host's libm version.
 *
 * Methods: expf = Cephes polynomial with Cody-Waite reduction; tanhf =
 * Cephes polynomial below 0.625, 1 - 2/(exp(2|x|)+1) above; erff = x*P(x^2)
 * below 0.9, 1 - exp(-x^2)*Q(1/x) above (fits and their float32 errors noted
 * at the coefficients); sigmoid/silu/gelu_tanh through exp(-|z|), gelu
 * through erfc on the negative side, so no tail cancels or overflows.
 * Tested bounds (tests/kernels/test_gemm.py::test_activation_accuracy_in_ulps,
 * every ISA, x in [-105, 90] against float64): sigmoid, silu, tanh <= 4 ulp;
 * gelu <= 6 ulp; gelu_tanh <= 8 + 4|2u| ulp (u rounded in float, as in any
 * float implementation); results below 2^-100 to 2^-120 absolute.
 * expf and erff are not tested on their own here (only through the above).
 * NaN in gives NaN out; +-Inf give the mathematical limits.
 */
#ifndef AIE_U_SCALAR_H
#define AIE_U_SCALAR_H

#include <stdint.h>
#include <string.h>

#include "aie_gemm.h"

/* Shared constants (the SIMD headers use the same values). */
#define AIE_LOG2E 1.44269504088896341f
#define AIE_LN2_HI 0.693359375f      /* ln 2 split so n*LN2_HI is exact for |n| < 2^9 */
#define AIE_LN2_LO -2.12194440e-4f
#define AIE_EXP_HI 89.0f             /* above ln(FLT_MAX): result overflows to +inf */
#define AIE_EXP_LO -104.0f           /* below ln(smallest denormal): result is 0 */
/* Cephes expf: exp(r) ~ 1 + r + r^2 * P(r) on |r| <= ln2/2 */
#define AIE_EXP_P0 1.9875691500e-4f
#define AIE_EXP_P1 1.3981999507e-3f
#define AIE_EXP_P2 8.3334519073e-3f
#define AIE_EXP_P3 4.1665795894e-2f
#define AIE_EXP_P4 1.6666665459e-1f
#define AIE_EXP_P5 5.0000001201e-1f
/* Cephes tanhf: tanh(x) ~ x + x^3 * T(x^2) for |x| < 0.625 */
#define AIE_TANH_SMALL 0.625f
#define AIE_TANH_T0 -5.70498872745e-3f
#define AIE_TANH_T1 2.06390887954e-2f
#define AIE_TANH_T2 -5.37397155531e-2f
#define AIE_TANH_T3 1.33314422036e-1f
#define AIE_TANH_T4 -3.33332819422e-1f
/* erf(t) = t * P(t^2) for t < 0.9: weighted Chebyshev fit to erf(t)/t,
 * max rel. error 1.3e-7 in float32 Horner. */
#define AIE_ERF_SMALL 0.9f
#define AIE_ERF_P0 1.1283791065216064f
#define AIE_ERF_P1 -0.3761252164840698f
#define AIE_ERF_P2 0.11282122135162354f
#define AIE_ERF_P3 -0.02677827514708042f
#define AIE_ERF_P4 0.0050110830925405025f
#define AIE_ERF_P5 -0.0006086067296564579f
/* erfc(t) = exp(-t^2) * s * R(s - 0.6), s = 1/t, t >= 0.9: weighted
 * Chebyshev fit of erfc(t)*exp(t^2)*t over s in [0.1, 1/0.9], max rel. error
 * 9.7e-8. t is clamped to 10.1, where erfc already rounds to 0 in float
 * (the clamp also keeps t = inf away from inf - inf in the t^2 split). */
#define AIE_ERFC_TMAX 10.1f
#define AIE_ERFC_C 0.6f
#define AIE_ERFC_R0 4.938124716e-01f
#define AIE_ERFC_R1 -1.713807583e-01f
#define AIE_ERFC_R2 -7.005859166e-03f
#define AIE_ERFC_R3 8.022045344e-02f
#define AIE_ERFC_R4 -8.417335153e-02f
#define AIE_ERFC_R5 5.064615235e-02f
#define AIE_ERFC_R6 -7.326376624e-03f
#define AIE_ERFC_R7 -3.252552450e-02f
#define AIE_ERFC_R8 7.349481434e-02f
#define AIE_ERFC_R9 -7.335583866e-02f
#define AIE_ERFC_R10 -1.404585503e-02f
#define AIE_ERFC_R11 5.455149710e-02f
#define AIE_SQRT1_2 0.70710678118654752f
#define AIE_SQRT1_2_LO 1.2101617e-08f /* 1/sqrt2 - (float)(1/sqrt2): t = x/sqrt2 as hi + lo */
#define AIE_SQRT_2_PI 0.79788456080286536f /* sqrt(2/pi), tanh-GELU */
#define AIE_GELU_C 0.044715f

/* NaN-preserving clamp: comparisons with NaN are false, so x passes through. */
static inline float aie_clampf_s(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

static inline float aie_floorf_s(float x) {
    /* |x| < 2^23 here (exp argument already clamped); truncate then fix. */
    float t = (float)(int32_t)x;
    return t > x ? t - 1.0f : t;
}

static inline float aie_pow2i_s(int32_t n) { /* 2^n for n in [-126, 127] */
    uint32_t bits = (uint32_t)(n + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline float aie_expf_s(float x) {
    if (x != x) return x;
    x = aie_clampf_s(x, AIE_EXP_LO, AIE_EXP_HI);
    float n = aie_floorf_s(x * AIE_LOG2E + 0.5f);
    float r = x - n * AIE_LN2_HI;
    r = r - n * AIE_LN2_LO;
    float p = AIE_EXP_P0;
    p = p * r + AIE_EXP_P1;
    p = p * r + AIE_EXP_P2;
    p = p * r + AIE_EXP_P3;
    p = p * r + AIE_EXP_P4;
    p = p * r + AIE_EXP_P5;
    p = p * (r * r) + r + 1.0f;
    /* 2^n in two halves: n reaches 128 and -150, outside one float exponent */
    int32_t ni = (int32_t)n, h = ni >> 1; /* arithmetic shift, as the SIMD versions */
    return p * aie_pow2i_s(h) * aie_pow2i_s(ni - h);
}

static inline float aie_tanhf_s(float x) {
    float a = x < 0 ? -x : x;
    if (a < AIE_TANH_SMALL) {
        float z = x * x;
        float p = AIE_TANH_T0;
        p = p * z + AIE_TANH_T1;
        p = p * z + AIE_TANH_T2;
        p = p * z + AIE_TANH_T3;
        p = p * z + AIE_TANH_T4;
        return p * z * x + x;
    }
    float r = 1.0f - 2.0f / (aie_expf_s(2.0f * a) + 1.0f);
    return x < 0 ? -r : r; /* NaN: comparison false, r is NaN */
}

/* erfc(t + t_lo) for t >= AIE_ERF_SMALL (t may be +inf or NaN); t_lo is the
 * low part of an argument carried as hi + lo (0 when t is exact): in the
 * tail, erfc's relative error is ~2 t^2 times t's, so the rounding of
 * t = x/sqrt2 alone would cost ~100 ulp at t = 9. */
static inline float aie_erfc_tail_s(float t, float t_lo) {
    float tc = t > AIE_ERFC_TMAX ? AIE_ERFC_TMAX : t;
    float s = 1.0f / tc, u = s - AIE_ERFC_C;
    float r = AIE_ERFC_R11;
    r = r * u + AIE_ERFC_R10;
    r = r * u + AIE_ERFC_R9;
    r = r * u + AIE_ERFC_R8;
    r = r * u + AIE_ERFC_R7;
    r = r * u + AIE_ERFC_R6;
    r = r * u + AIE_ERFC_R5;
    r = r * u + AIE_ERFC_R4;
    r = r * u + AIE_ERFC_R3;
    r = r * u + AIE_ERFC_R2;
    r = r * u + AIE_ERFC_R1;
    r = r * u + AIE_ERFC_R0;
    /* exp(-t^2) with t^2 = hi + lo exactly: exp(-hi) * (1 - lo) */
    float hi = tc * tc, lo = __builtin_fmaf(tc, tc, -hi) + 2.0f * tc * t_lo;
    return aie_expf_s(-hi) * (1.0f - lo) * (s * r);
}

static inline float aie_erf_small_s(float t) { /* |t| < AIE_ERF_SMALL */
    float z = t * t;
    float p = AIE_ERF_P5;
    p = p * z + AIE_ERF_P4;
    p = p * z + AIE_ERF_P3;
    p = p * z + AIE_ERF_P2;
    p = p * z + AIE_ERF_P1;
    p = p * z + AIE_ERF_P0;
    return t * p;
}

static inline float aie_erff_s(float x) {
    float a = x < 0 ? -x : x;
    if (a < AIE_ERF_SMALL) return aie_erf_small_s(x);
    float r = 1.0f - aie_erfc_tail_s(a, 0.0f);
    return x < 0 ? -r : r;
}

/* 1/(1+exp(-z)) evaluated through exp(-|z|) so nothing overflows: for z < 0
 * it is e/(1+e), which keeps the tiny (down to subnormal) values. */
static inline float aie_sigmoidf_s(float z) {
    float e = aie_expf_s(z < 0 ? z : -z);
    float s = 1.0f / (1.0f + e);
    return z >= 0 ? s : e * s; /* NaN: comparison false, e * s is NaN */
}
static inline float aie_siluf_s(float x) { return x * aie_sigmoidf_s(x); }

static inline float aie_geluf_s(float x) {
    /* 0.5 x (1 + erf(x/sqrt2)) = 0.5 x erfc(-x/sqrt2): erfc on the negative
     * side keeps the tail's relative accuracy. */
    float t = x * AIE_SQRT1_2, a = t < 0 ? -t : t;
    float t_lo = __builtin_fmaf(x, AIE_SQRT1_2, -t) + x * AIE_SQRT1_2_LO, a_lo = t < 0 ? -t_lo : t_lo;
    if (!(a < AIE_ERFC_TMAX)) a_lo = 0.0f; /* x = +-inf: inf - inf would poison the tail */
    float one_plus_erf;
    if (a < AIE_ERF_SMALL) one_plus_erf = 1.0f + aie_erf_small_s(t);
    else if (t < 0) one_plus_erf = aie_erfc_tail_s(a, a_lo);
    else one_plus_erf = 2.0f - aie_erfc_tail_s(a, a_lo);
    return 0.5f * x * one_plus_erf;
}

static inline float aie_gelu_tanhf_s(float x) {
    /* 0.5 x (1 + tanh(u)) = x * sigmoid(2u) */
    float u = AIE_SQRT_2_PI * (x + AIE_GELU_C * x * x * x);
    return x * aie_sigmoidf_s(2.0f * u);
}

static inline float aie_hardsigmoidf_s(float x, float alpha, float beta) {
    return aie_clampf_s(alpha * x + beta, 0.0f, 1.0f);
}
static inline float aie_hardswishf_s(float x) { return x * aie_clampf_s(x * (1.0f / 6.0f) + 0.5f, 0.0f, 1.0f); }
static inline float aie_reluf_s(float x) { return x < 0 ? 0.0f : x; } /* NaN passes */
static inline float aie_leaky_reluf_s(float x, float slope) { return x < 0 ? x * slope : x; }

/* One epilogue activation (AIE_U_*, AIE_UF_EPI) with its parameters p0/p1. */
static inline float aie_act_s(int act, float x, float p0, float p1) {
    switch (act) {
    case AIE_U_RELU: return aie_reluf_s(x);
    case AIE_U_CLIP: return aie_clampf_s(x, p0, p1);
    case AIE_U_GELU: return aie_geluf_s(x);
    case AIE_U_GELU_TANH: return aie_gelu_tanhf_s(x);
    case AIE_U_SIGMOID: return aie_sigmoidf_s(x);
    case AIE_U_SILU: return aie_siluf_s(x);
    case AIE_U_HARDSWISH: return aie_hardswishf_s(x);
    case AIE_U_HARDSIGMOID: return aie_hardsigmoidf_s(x, p0, p1);
    case AIE_U_LEAKY_RELU: return aie_leaky_reluf_s(x, p0);
    case AIE_U_TANH: return aie_tanhf_s(x);
    default: return x;
    }
}

/* Apply an activation in place to n floats (switch hoisted out of the loop). */
static inline void aie_act_row_s(float *x, int64_t n, int act, float p0, float p1) {
    if (act == AIE_U_IDENTITY) return;
    for (int64_t i = 0; i < n; i++) x[i] = aie_act_s(act, x[i], p0, p1);
}

#endif /* AIE_U_SCALAR_H */
