/*
 * The unary ops of the vmath table (vmath.h), written once over the per-ISA
 * vector vocabulary: include after vf_scalar.h, vf_avx2.h or vf_avx512.h.
 * Defines vm_unary and u_sqrt / u_reciprocal (the exact pow cases reuse
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

DEFINE_UNARY(u_relu, vmf_relu(u))
DEFINE_UNARY(u_leaky_relu, vmf_leaky_relu(u, p0))
DEFINE_UNARY(u_sigmoid, vmf_sigmoid(u))
DEFINE_UNARY(u_tanh, vmf_tanh(u))
DEFINE_UNARY(u_erf, vmf_erf(u))
DEFINE_UNARY(u_gelu, vmf_gelu(u))
DEFINE_UNARY(u_gelu_tanh, vmf_gelu_tanh(u))
DEFINE_UNARY(u_hardsigmoid, vmf_hardsigmoid(u, p0, p1))
DEFINE_UNARY(u_hardswish, vmf_hardswish(u))
DEFINE_UNARY(u_silu, vmf_silu(u))
DEFINE_UNARY(u_exp, vmf_exp(u))
DEFINE_UNARY(u_log, vmf_log(u))
DEFINE_UNARY(u_sqrt, vf_sqrt(u))
DEFINE_UNARY(u_reciprocal, vf_div(vf_set1(1.0f), u))
DEFINE_UNARY(u_abs, vf_abs(u))
DEFINE_UNARY(u_neg, vf_neg(u))
DEFINE_UNARY(u_clip, vmf_clip(u, p0, p1))
DEFINE_UNARY(u_floor, vf_floor(u))
DEFINE_UNARY(u_ceil, vf_ceil(u))
DEFINE_UNARY(u_round, vf_round(u))
DEFINE_UNARY(u_sign, vmf_sign(u))
DEFINE_UNARY(u_softplus, vmf_softplus(u))
DEFINE_UNARY(u_elu, vmf_elu(u, p0))
DEFINE_UNARY(u_selu, vmf_selu(u, p0, p1))

typedef void (*unary_fn)(const float *, float *, int64_t, float, float);
static const unary_fn unary_table[AIE_U_COUNT] = {
    [AIE_U_RELU] = u_relu, [AIE_U_LEAKY_RELU] = u_leaky_relu,
    [AIE_U_SIGMOID] = u_sigmoid, [AIE_U_TANH] = u_tanh, [AIE_U_ERF] = u_erf,
    [AIE_U_GELU] = u_gelu, [AIE_U_GELU_TANH] = u_gelu_tanh,
    [AIE_U_HARDSIGMOID] = u_hardsigmoid, [AIE_U_HARDSWISH] = u_hardswish,
    [AIE_U_SILU] = u_silu, [AIE_U_EXP] = u_exp, [AIE_U_LOG] = u_log,
    [AIE_U_SQRT] = u_sqrt, [AIE_U_RECIPROCAL] = u_reciprocal, [AIE_U_ABS] = u_abs,
    [AIE_U_NEG] = u_neg, [AIE_U_CLIP] = u_clip, [AIE_U_FLOOR] = u_floor,
    [AIE_U_CEIL] = u_ceil, [AIE_U_ROUND] = u_round, [AIE_U_SIGN] = u_sign,
    [AIE_U_SOFTPLUS] = u_softplus, [AIE_U_ELU] = u_elu, [AIE_U_SELU] = u_selu,
};

static void vm_unary(int op, const float *x, float *y, int64_t n, float p0, float p1) {
    unary_table[op](x, y, n, p0, p1);
}

#endif /* AIE_VMATH_UNARY_BODY_H */
