/*
 * Scalar vmath primitives (core/vmath.h): one element at a time, double
 * accumulators for sums. The unary ops are vmath_unary_body.h at one lane,
 * so their bits equal the SIMD paths' (and the epilogues'). This is the path
 * non-AVX2 hosts run. Semantics at the edges (NaN, +-inf, signed zeros) are
 * the contract every path keeps.
 */
#include <math.h>
#include <string.h>

#include "aie_eltwise.h"
#include "vf_scalar.h"
#include "vmath.h"

#include "vmath_unary_body.h"

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
    for (int64_t i = 0; i < n; i++) y[i] = vmf_exp(x[i] - m[i * sm]);
}

static void vm_softmax_scaled(float *s, int64_t n, float scale, const float *mask) {
    float m = -INFINITY, sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        s[i] = s[i] * scale + (mask ? mask[i] : 0.0f);
        m = binary1(AIE_BINARY_MAX, m, s[i]);
    }
    for (int64_t i = 0; i < n; i++) {
        s[i] = vmf_exp(s[i] - m);
        sum += s[i];
    }
    const float r = 1.0f / sum;
    for (int64_t i = 0; i < n; i++) s[i] *= r;
}

static void vm_norm_apply(const float *x, float *y, int64_t n, float mean, float invstd,
                          const float *scale, const float *bias) {
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - mean) * invstd * scale[i] + (bias ? bias[i] : 0.0f);
}

const aie_vm_table aie_vm_scalar = AIE_VM_TABLE_OF_VM_FUNCTIONS;
