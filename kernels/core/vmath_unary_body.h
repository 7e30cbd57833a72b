/*
 * The unary ops of the vmath table (vmath.h), written once over the per-ISA
 * vector vocabulary: include after vf_scalar.h, vf_avx2.h or vf_avx512.h.
 * Defines vm_unary and u_SQRT / u_RECIPROCAL (the exact pow cases reuse
 * them). The math itself is vmath_fn.h, shared with the GEMM/conv epilogues.
 */
#ifndef AIE_VMATH_UNARY_BODY_H
#define AIE_VMATH_UNARY_BODY_H

#include "aie_eltwise.h"

/* The tail is one masked partial vector: its live lanes give the bits of a
 * full vector's lanes. */
#define DEFINE_UNARY(NAME, EXPR)                                                \
    static void NAME(const float *x, float *y, int64_t n, float p0, float p1) { \
        (void)p0;                                                               \
        (void)p1;                                                               \
        int64_t i = 0;                                                          \
        for (; i + VL <= n; i += VL) {                                          \
            vf u = vf_load(x + i);                                              \
            vf_store(y + i, (EXPR));                                            \
        }                                                                       \
        if (i < n) {                                                            \
            vf u = vf_loadn(x + i, (int)(n - i));                               \
            vf_storen(y + i, (EXPR), (int)(n - i));                             \
        }                                                                       \
    }

/* Every unary op once: its AIE_U_* code and its value at u (p0, p1: the
 * op's parameters); the functions u_<code> and the table both expand it. */
#define UNARY_OPS(X)                                                                                          \
    X(RELU, vmf_relu(u)) X(LEAKY_RELU, vmf_leaky_relu(u, p0)) X(SIGMOID, vmf_sigmoid(u)) X(TANH, vmf_tanh(u)) \
    X(ERF, vmf_erf(u)) X(GELU, vmf_gelu(u)) X(GELU_TANH, vmf_gelu_tanh(u))                                    \
    X(HARDSIGMOID, vmf_hardsigmoid(u, p0, p1)) X(HARDSWISH, vmf_hardswish(u)) X(SILU, vmf_silu(u))            \
    X(EXP, vmf_exp(u)) X(LOG, vmf_log(u)) X(SQRT, vf_sqrt(u)) X(RECIPROCAL, vf_div(vf_set1(1.0f), u))         \
    X(ABS, vf_abs(u)) X(NEG, vf_neg(u)) X(CLIP, vmf_clip(u, p0, p1)) X(FLOOR, vf_floor(u))                    \
    X(CEIL, vf_ceil(u)) X(ROUND, vf_round(u)) X(SIGN, vmf_sign(u)) X(SOFTPLUS, vmf_softplus(u))               \
    X(ELU, vmf_elu(u, p0)) X(SELU, vmf_selu(u, p0, p1))

#define UNARY_FN(CODE, EXPR) DEFINE_UNARY(u_##CODE, EXPR)
UNARY_OPS(UNARY_FN)
#undef UNARY_FN

typedef void (*unary_fn)(const float *, float *, int64_t, float, float);
#define UNARY_ENTRY(CODE, EXPR) [AIE_U_##CODE] = u_##CODE,
static const unary_fn unary_table[AIE_U_COUNT] = {UNARY_OPS(UNARY_ENTRY)};
#undef UNARY_ENTRY

static void vm_unary(int op, const float *x, float *y, int64_t n, float p0, float p1) {
    unary_table[op](x, y, n, p0, p1);
}

#endif /* AIE_VMATH_UNARY_BODY_H */
