/*
 * Scalar reference of the vmath primitives (core/vmath.h): one element at a
 * time, libm for the transcendental functions (double precision where a
 * float formula would cancel: gelu, silu, softplus, sigmoid), double
 * accumulators for sums. This is the path non-AVX2 hosts run and the oracle
 * the C tests compare the SIMD paths with. Semantics at the edges (NaN,
 * +-inf, signed zeros) are the contract the SIMD paths must match.
 */
#include <math.h>
#include <string.h>

#include "aie_eltwise.h"
#include "vmath.h"

/* x * g, with a signed zero when g == 0 (the limit at -inf, not NaN). */
static float gated(float x, double g) {
    if (g == 0.0 || x == -INFINITY) return copysignf(0.0f, x); /* double gates never underflow to 0 */
    return (float)(x * g);
}

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

static float hardsigmoid(float x, float alpha, float beta) {
    float h = x * alpha + beta;
    return h < 0.0f ? 0.0f : (h > 1.0f ? 1.0f : h);
}

static float unary1(int op, float x, float p0, float p1) {
    double d = x;
    switch (op) {
    case AIE_U_RELU: return x < 0.0f ? 0.0f : x;
    case AIE_U_LEAKY_RELU: return x < 0.0f ? x * p0 : x;
    case AIE_U_SIGMOID: return (float)sigmoid_d(d);
    case AIE_U_TANH: return (float)tanh(d); /* glibc tanhf is off by up to 2 ulp */
    case AIE_U_ERF: return erff(x);
    case AIE_U_GELU: return isnan(x) ? x : gated(x, 0.5 * erfc(-d * M_SQRT1_2));
    case AIE_U_GELU_TANH: {
        if (isnan(x)) return x;
        double c = d < -20.0 ? -20.0 : (d > 20.0 ? 20.0 : d);
        /* 0.5 (1 + tanh z) = sigmoid(2z): no cancellation for x < 0 */
        return gated(x, sigmoid_d(2.0 * 0.7978845608028654 * (c + 0.044715 * c * c * c)));
    }
    case AIE_U_HARDSIGMOID: return hardsigmoid(x, p0, p1);
    case AIE_U_HARDSWISH: return isnan(x) ? x : gated(x, hardsigmoid(x, 1.0f / 6.0f, 0.5f));
    case AIE_U_SILU: return isnan(x) ? x : gated(x, sigmoid_d(d));
    case AIE_U_EXP: return expf(x);
    case AIE_U_LOG: return logf(x);
    case AIE_U_SQRT: return sqrtf(x);
    case AIE_U_RECIPROCAL: return 1.0f / x;
    case AIE_U_ABS: return fabsf(x);
    case AIE_U_NEG: return -x;
    case AIE_U_CLIP: { float t = x < p0 ? p0 : x; return t > p1 ? p1 : t; } /* min(max(x, lo), hi) */
    case AIE_U_FLOOR: return floorf(x);
    case AIE_U_CEIL: return ceilf(x);
    case AIE_U_ROUND: return nearbyintf(x); /* default rounding: half to even */
    case AIE_U_SIGN: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x);
    case AIE_U_SOFTPLUS: return x > 20.0f ? x : (float)log1p(exp(d));
    case AIE_U_ELU: return x > 0.0f ? x : (float)(p0 * expm1(d));
    case AIE_U_SELU: return (float)(p1 * (x > 0.0f ? d : p0 * expm1(d)));
    default: return NAN;
    }
}

static void vm_unary(int op, const float *x, float *y, int64_t n, float p0, float p1) {
    for (int64_t i = 0; i < n; i++) y[i] = unary1(op, x[i], p0, p1);
}

static float binary1(int op, float a, float b) {
    switch (op) {
    case AIE_BINARY_ADD: return a + b;
    case AIE_BINARY_SUB: return a - b;
    case AIE_BINARY_MUL: return a * b;
    case AIE_BINARY_DIV: return a / b;
    case AIE_BINARY_POW:
        /* the same exact special cases as the SIMD paths, so every ISA agrees */
        if (b == 2.0f) return a * a;
        if (b == 3.0f) return a * a * a;
        if (b == 0.5f) return sqrtf(a);
        if (b == -1.0f) return 1.0f / a;
        return powf(a, b);
    case AIE_BINARY_MAX: return (a > b || a != a) ? a : b;
    default: return (a < b || a != a) ? a : b;
    }
}

static void vm_binary(int op, const float *a, int64_t sa, const float *b, int64_t sb, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = binary1(op, a[i * sa], b[i * sb]);
}

static void vm_compare(int op, const float *a, int64_t sa, const float *b, int64_t sb, uint8_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float u = a[i * sa], w = b[i * sb];
        int r;
        switch (op) {
        case AIE_CMP_EQ: r = u == w; break;
        case AIE_CMP_NE: r = u != w; break;
        case AIE_CMP_LT: r = u < w; break;
        case AIE_CMP_LE: r = u <= w; break;
        case AIE_CMP_GT: r = u > w; break;
        default: r = u >= w; break;
        }
        y[i] = (uint8_t)r;
    }
}

static float vm_row_reduce(int op, const float *x, int64_t n, float c) {
    if (op == AIE_VR_MAX || op == AIE_VR_MIN) {
        float r = op == AIE_VR_MAX ? -INFINITY : INFINITY;
        for (int64_t i = 0; i < n; i++) r = binary1(op == AIE_VR_MAX ? AIE_BINARY_MAX : AIE_BINARY_MIN, r, x[i]);
        return r;
    }
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        s += op == AIE_VR_SUM ? v : (op == AIE_VR_ABSSUM ? fabs(v) : (v - c) * (v - c));
    }
    return (float)s;
}

static void vm_col_accumulate(int op, float *acc, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        switch (op) {
        case AIE_VR_SUM: acc[i] += v; break;
        case AIE_VR_SUMSQ: acc[i] += v * v; break;
        case AIE_VR_ABSSUM: acc[i] += fabsf(v); break;
        case AIE_VR_MAX: acc[i] = binary1(AIE_BINARY_MAX, acc[i], v); break;
        default: acc[i] = binary1(AIE_BINARY_MIN, acc[i], v); break;
        }
    }
}

static void vm_exp_shift(const float *x, const float *m, int64_t sm, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i] - m[i * sm]);
}

static void vm_norm_apply(const float *x, float *y, int64_t n, float mean, float invstd,
                          const float *scale, const float *bias) {
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - mean) * invstd * scale[i] + (bias ? bias[i] : 0.0f);
}

const aie_vm_table aie_vm_scalar = {
    .unary = vm_unary,
    .binary = vm_binary,
    .compare = vm_compare,
    .row_reduce = vm_row_reduce,
    .col_accumulate = vm_col_accumulate,
    .exp_shift = vm_exp_shift,
    .norm_apply = vm_norm_apply,
};
