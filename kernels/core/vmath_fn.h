/*
 * The float32 math of every activation and transcendental op, written ONCE
 * over the per-ISA vector vocabulary (vf_scalar.h, vf_avx2.h, vf_avx512.h
 * include this file after defining vf, vm and the vf_* operations). The
 * standalone unary ops (vmath_unary_body.h) and every GEMM / conv /
 * Winograd / depthwise epilogue (act_row, vmf_act) call these functions, so
 * a fused activation and the standalone op give the same bits. Every step
 * is one IEEE operation or a single-rounding FMA (vf_fma_rn), and lanes
 * never mix, so the scalar build, the vector lanes and a masked tail agree
 * bit for bit on every ISA. kernels/cuda/vmath_cuda.cuh instantiates the
 * same file for the GPU.
 *
 * Methods (accuracy: include/aie_eltwise.h, asserted by
 * kernels/tests/test_eltwise.c and tests/kernels/test_eltwise.py):
 *   exp    Cephes expf: n = round(x log2 e), r = x - n ln2 (ln2 split in two
 *          so n*LN2_HI is exact), exp(r) = 1 + r + r^2 P(r); 2^n applied as
 *          two factors so results down to the smallest denormal are right.
 *   log    Cephes logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by
 *          a degree-9 polynomial in m - 1.
 *   tanh   Cephes tanhf: x + x^3 T(x^2) below 0.625, 1 - 2/(exp(2|x|) + 1) above.
 *   erf    |x| <= 0.921875: x + x P(x^2); above: 1 - exp(Q(|x|)), Q ~ log erfc.
 *          P, Q: least-squares fits on 6000 Chebyshev nodes in double,
 *          coefficients rounded to float one at a time (highest degree
 *          first) with the rest refitted, so the rounding is absorbed.
 *   gelu   |x| <= 1.3037 (= 0.921875 sqrt 2): x/2 (1 + erf(x/sqrt 2)); above,
 *          through erfc(|x|/sqrt 2) = exp(-x^2/2) exp(G(|x| - 3)) (G fitted
 *          as P and Q on [1.3037, 5.66]; x^2 split exactly with an FMA so the
 *          large exponent loses nothing), and for |x| > 5.66 through
 *          erfc(|x|/sqrt 2) exp(x^2/2) |x| = H(1/x^2) (fitted on [5.66, 20]):
 *          no 1 + erf cancellation in the negative tail.
 *   gelu_tanh  x sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3): no cancellation.
 *   sigmoid through exp(-|x|): no overflow, tiny values reach the denormals.
 *   expm1  Taylor to x^11 for |x| < 0.69 (truncation < 2^-27), exp(x) - 1 above.
 *   softplus  log1p(exp(x)) as log(u) y / (u - 1), u = 1 + y (cancels u's rounding).
 * Products x * gate(x) (silu, gelu, gelu_tanh, hardswish) return a signed
 * zero when the gate is exactly 0, so f(-inf) is the limit 0, not inf * 0 =
 * NaN. NaN in gives NaN out; comparisons with NaN are false, so a select
 * keyed on one passes NaN to the branch that propagates it.
 */
#ifndef AIE_VMATH_FN_H
#define AIE_VMATH_FN_H

#include <math.h>
#include <stdint.h>

#include "aie_gemm.h"

#ifndef VMF_FN
#define VMF_FN static inline
#endif

#ifndef VF_HAVE_SCALE2N_NEG
/* e * 2^n for integral n in [-150, 0]: the general scaling gives the bits. */
#define vf_scale2n_neg vf_scale2n
#endif

VMF_FN vf vmf_c(float x) { return vf_set1(x); }
/* Horner step p * x + c, one rounding. */
VMF_FN vf vmf_h(vf p, vf x, float c) { return vf_fma_rn(p, x, vf_set1(c)); }

/* x * g, but a signed zero when g == 0 (the limit of x * gate(x) at -inf). */
VMF_FN vf vmf_gated(vf x, vf g) {
    return vf_sel(vf_eq(g, vf_zero()), vf_copysign(vf_zero(), x), vf_mul(x, g));
}

/* exp(xc) for xc in [-104, 89] or NaN, before the scaling by 2^n (*n). */
VMF_FN vf vmf_exp_unscaled(vf xc, vf *n) {
    *n = vf_round(vf_mul(xc, vmf_c(1.44269504088896341f)));
    vf r = vf_fma_rn(*n, vmf_c(-0.693359375f), xc);
    r = vf_fma_rn(*n, vmf_c(2.12194440e-4f), r);
    vf p = vmf_c(1.9875691500e-4f);
    p = vmf_h(p, r, 1.3981999507e-3f);
    p = vmf_h(p, r, 8.3334519073e-3f);
    p = vmf_h(p, r, 4.1665795894e-2f);
    p = vmf_h(p, r, 1.6666665459e-1f);
    p = vmf_h(p, r, 5.0000001201e-1f);
    return vf_add(vf_fma_rn(p, vf_mul(r, r), r), vmf_c(1.0f));
}

VMF_FN vf vmf_exp(vf x) {
    vf xc = vf_sel(vf_lt(x, vmf_c(-104.0f)), vmf_c(-104.0f), x);
    xc = vf_sel(vf_gt(xc, vmf_c(89.0f)), vmf_c(89.0f), xc);
    vf n;
    vf e = vmf_exp_unscaled(xc, &n);
    return vf_sel(vf_isnan(x), x, vf_scale2n(e, n));
}

VMF_FN vf vmf_log(vf x) {
    vm sub = vm_and(vf_lt(x, vmf_c(1.17549435e-38f)), vf_gt(x, vf_zero()));
    vf xs = vf_sel(sub, vf_mul(x, vmf_c(8388608.0f)), x); /* 2^23: denormals become normal */
    vf e;
    vf m = vf_frexp(xs, &e); /* [0.5, 1) */
    e = vf_sub(e, vf_sel(sub, vmf_c(23.0f), vf_zero()));
    vm lo = vf_lt(m, vmf_c(0.707106781186547524f));
    e = vf_sel(lo, vf_sub(e, vmf_c(1.0f)), e);
    vf f = vf_sel(lo, vf_sub(vf_add(m, m), vmf_c(1.0f)), vf_sub(m, vmf_c(1.0f)));
    vf z = vf_mul(f, f);
    vf p = vmf_c(7.0376836292e-2f);
    p = vmf_h(p, f, -1.1514610310e-1f);
    p = vmf_h(p, f, 1.1676998740e-1f);
    p = vmf_h(p, f, -1.2420140846e-1f);
    p = vmf_h(p, f, 1.4249322787e-1f);
    p = vmf_h(p, f, -1.6668057665e-1f);
    p = vmf_h(p, f, 2.0000714765e-1f);
    p = vmf_h(p, f, -2.4999993993e-1f);
    p = vmf_h(p, f, 3.3333331174e-1f);
    vf y = vf_mul(vf_mul(p, z), f);
    y = vf_fma_rn(e, vmf_c(-2.12194440e-4f), y);
    y = vf_fma_rn(z, vmf_c(-0.5f), y);
    vf r = vf_add(f, y);
    r = vf_fma_rn(e, vmf_c(0.693359375f), r);
    r = vf_sel(vf_eq(x, vf_zero()), vmf_c(-INFINITY), r);
    r = vf_sel(vf_lt(x, vf_zero()), vmf_c(NAN), r);
    r = vf_sel(vf_eq(x, vmf_c(INFINITY)), x, r);
    return vf_sel(vf_isnan(x), x, r);
}

/* exp(t) for t <= 0 or NaN: vmf_exp's bits without its overflow clamp and
 * NaN select (a NaN t makes n and the polynomial NaN, and any scaling of a
 * NaN is NaN), and 2^n for n in [-150, 0] through vf_scale2n_neg, cheaper
 * where an ISA has one (AVX2: half of sigmoid's instructions were exp's). */
VMF_FN vf vmf_exp_neg(vf t) {
    vf n;
    vf e = vmf_exp_unscaled(vf_max(vmf_c(-104.0f), t), &n); /* NaN t: t (see vmf_relu) */
    return vf_scale2n_neg(e, n);
}

/* exp(-|x|) never overflows, so sigmoid(x) for x << 0 reaches the denormals
 * (e / (1 + e)) instead of 1 / (1 + inf) = 0. */
VMF_FN vf vmf_sigmoid(vf x) {
    vf e = vmf_exp_neg(vf_neg(vf_abs(x)));
    return vf_div(vf_sel(vf_lt(x, vf_zero()), e, vmf_c(1.0f)), vf_add(vmf_c(1.0f), e));
}

VMF_FN vf vmf_tanh(vf x) {
    vf ax = vf_abs(x);
    vf z = vf_mul(x, x);
    vf p = vmf_c(-5.70498872745e-3f);
    p = vmf_h(p, z, 2.06390887954e-2f);
    p = vmf_h(p, z, -5.37397155531e-2f);
    p = vmf_h(p, z, 1.33314422036e-1f);
    p = vmf_h(p, z, -3.33332819422e-1f);
    vf small = vf_fma_rn(vf_mul(p, z), x, x);
    vf e = vmf_exp(vf_add(ax, ax));
    vf large = vf_copysign(vf_sub(vmf_c(1.0f), vf_div(vmf_c(2.0f), vf_add(e, vmf_c(1.0f)))), x);
    return vf_sel(vf_lt(ax, vmf_c(0.625f)), small, large);
}

/* erf(x) for |x| <= 0.921875 as x + x P(x^2). */
VMF_FN vf vmf_erf_small(vf x) {
    vf s = vf_mul(x, x);
    vf p = vmf_c(-0.0006024183821864426f);
    p = vmf_h(p, s, 0.005000815726816654f);
    p = vmf_h(p, s, -0.02677290514111519f);
    p = vmf_h(p, s, 0.11282037943601608f);
    p = vmf_h(p, s, -0.3761252462863922f);
    p = vmf_h(p, s, 0.12837916612625122f);
    return vf_fma_rn(x, p, x);
}

VMF_FN vf vmf_erf(vf x) {
    vf t = vf_abs(x);
    vf tc = vf_sel(vf_gt(t, vmf_c(4.0f)), vmf_c(4.0f), t); /* erf(4) rounds to 1 in float */
    vf q = vmf_c(1.6131018583109835e-06f);
    q = vmf_h(q, tc, -4.557118518278003e-05f);
    q = vmf_h(q, tc, 0.0005926017183810472f);
    q = vmf_h(q, tc, -0.004739417694509029f);
    q = vmf_h(q, tc, 0.026362380012869835f);
    q = vmf_h(q, tc, -0.10997404158115387f);
    q = vmf_h(q, tc, -0.6319416761398315f);
    q = vmf_h(q, tc, -1.1301639080047607f);
    q = vmf_h(q, tc, 0.00030256659374572337f);
    vf big = vf_copysign(vf_sub(vmf_c(1.0f), vmf_exp(q)), x);
    return vf_sel(vf_le(t, vmf_c(0.921875f)), vmf_erf_small(x), big); /* NaN: big, NaN through exp */
}

/* erfc(|x| / sqrt 2) = k * e for |x| >= 1.3037 (see the top of the file),
 * returned as two factors: e = exp(-x^2/2) may be tiny, and multiplying the
 * O(1) factors in first keeps the final product out of the denormal range.
 * Both exponents are <= 0 where their result is used (G is log(erfcx) < 0 on
 * its interval), so vmf_exp_neg gives vmf_exp's bits there for less; H's
 * branch (a division) runs only for vectors with a lane past 5.66, rare in
 * a network's activations. Lanes below 1.3037 get values nobody selects. */
VMF_FN vf vmf_erfc_scaled(vf ax, vf *e) {
    vf v = vf_sel(vf_gt(ax, vmf_c(20.0f)), vmf_c(20.0f), ax); /* erfc(20/sqrt 2) underflows to 0 */
    vf w = vf_sub(v, vmf_c(3.0f));
    vf g = vmf_c(1.0077375378614306e-07f);
    g = vmf_h(g, w, -1.6081841067716596e-06f);
    g = vmf_h(g, w, 1.4894620107952505e-05f);
    g = vmf_h(g, w, -0.00011331205314490944f);
    g = vmf_h(g, w, 0.0007886888342909515f);
    g = vmf_h(g, w, -0.005244940984994173f);
    g = vmf_h(g, w, 0.03527963161468506f);
    g = vmf_h(g, w, -0.2830986976623535f);
    g = vmf_h(g, w, -1.4145790338516235f);
    vf k = vmf_exp_neg(g);
    vm far = vf_gt(v, vmf_c(5.66f));
    if (vm_any(far)) {
        vf iv = vf_div(vmf_c(1.0f), v), i2 = vf_mul(iv, iv);
        vf h = vmf_c(45.191959381103516f);
        h = vmf_h(h, i2, -11.010546684265137f);
        h = vmf_h(h, i2, 2.3823769092559814f);
        h = vmf_h(h, i2, -0.7978275418281555f);
        h = vmf_h(h, i2, 0.797884464263916f);
        k = vf_sel(far, vf_mul(h, iv), k);
    }
    vf hi = vf_mul(v, v), lo = vf_fma_rn(v, v, vf_neg(hi)); /* v^2 = hi + lo exactly */
    *e = vmf_exp_neg(vf_mul(hi, vmf_c(-0.5f)));
    return vf_mul(k, vf_sub(vmf_c(1.0f), vf_mul(vmf_c(0.5f), lo)));
}

/* Each half (erf below 1.3037, erfc above) runs only for vectors with a lane
 * that takes it: BERT's FFN spends most of a GELU GEMM's epilogue here. NaN
 * lanes take neither and keep x, as the select on isnan did. */
VMF_FN vf vmf_gelu(vf x) {
    vf ax = vf_abs(x), r = x;
    vm mid = vf_le(ax, vmf_c(1.3037f));
    if (vm_any(mid))
        r = vf_sel(mid, vf_mul(vf_mul(vmf_c(0.5f), x),
                               vf_add(vmf_c(1.0f), vmf_erf_small(vf_mul(x, vmf_c(0.70710678118654752f))))), r);
    vm tail = vf_gt(ax, vmf_c(1.3037f));
    if (vm_any(tail)) {
        vf e;
        vf k = vmf_erfc_scaled(ax, &e);
        vf neg = vf_sel(vf_eq(e, vf_zero()), vf_copysign(vf_zero(), x), vf_mul(vf_mul(vf_mul(x, vmf_c(0.5f)), k), e));
        vf pos = vf_mul(x, vf_sub(vmf_c(1.0f), vf_mul(vf_mul(vmf_c(0.5f), k), e)));
        r = vf_sel(tail, vf_sel(vf_lt(x, vf_zero()), neg, pos), r);
    }
    return r;
}

/* The bf16 GEMM's fused GELU (core/gemm_lowp.c), not the GELU op: its output
 * is rounded to bf16 (2^-9) by the next GEMM, so a fifth of vmf_gelu's work
 * suffices. erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2) (Numerical
 * Recipes' erfcc, fractional error < 1.2e-7 for every z >= 0), z = |x|/sqrt 2;
 * the gate is erfc/2 for x < 0 (no 1 + erf cancellation), 1 - erfc/2 above.
 * In float32: relative error <= 2^-18 + x^2 2^-23 (include/aie_gemm_lowp.h). */
VMF_FN vf vmf_gelu_bf16(vf x) {
    vf z = vf_mul(vf_abs(x), vmf_c(0.70710678118654752f));
    vf t = vf_div(vmf_c(1.0f), vf_fma_rn(z, vmf_c(0.5f), vmf_c(1.0f)));
    vf p = vmf_c(0.17087277f);
    p = vmf_h(p, t, -0.82215223f);
    p = vmf_h(p, t, 1.48851587f);
    p = vmf_h(p, t, -1.13520398f);
    p = vmf_h(p, t, 0.27886807f);
    p = vmf_h(p, t, -0.18628806f);
    p = vmf_h(p, t, 0.09678418f);
    p = vmf_h(p, t, 0.37409196f);
    p = vmf_h(p, t, 1.00002368f);
    p = vmf_h(p, t, -1.26551223f);
    vf half_erfc = vf_mul(vf_mul(vmf_c(0.5f), t), vmf_exp(vf_fma_rn(vf_neg(z), z, p)));
    return vmf_gated(x, vf_sel(vf_lt(x, vf_zero()), half_erfc, vf_sub(vmf_c(1.0f), half_erfc)));
}

VMF_FN vf vmf_gelu_tanh(vf x) {
    /* 1 + tanh(z) = 2 sigmoid(2z): no cancellation for x < 0 */
    vf xc = vf_sel(vf_lt(x, vmf_c(-20.0f)), vmf_c(-20.0f), x);
    xc = vf_sel(vf_gt(xc, vmf_c(20.0f)), vmf_c(20.0f), xc);
    vf z2 = vf_mul(xc, vf_fma_rn(vmf_c(0.0713548162726f), vf_mul(xc, xc), vmf_c(1.5957691216057308f)));
    return vf_sel(vf_isnan(x), x, vmf_gated(x, vmf_sigmoid(z2)));
}

/* vmf_gated's bits for less: the gate is 0 only for x << 0, so the zero is
 * -0. A NaN x makes x * g NaN too, but the select keeps its bits: with two
 * NaN operands the product's sign depends on the operand order the compiler
 * picks, which differs between the standalone op and a fused epilogue. */
VMF_FN vf vmf_silu(vf x) {
    vf g = vmf_sigmoid(x);
    return vf_sel(vf_isnan(x), x, vf_sel(vf_eq(g, vf_zero()), vmf_c(-0.0f), vf_mul(x, g)));
}

VMF_FN vf vmf_expm1(vf x) {
    vf p = vmf_c(2.505210838544172e-08f); /* 1/11! */
    p = vmf_h(p, x, 2.755731922398589e-07f);
    p = vmf_h(p, x, 2.7557319223985893e-06f);
    p = vmf_h(p, x, 2.48015873015873e-05f);
    p = vmf_h(p, x, 0.0001984126984126984f);
    p = vmf_h(p, x, 0.001388888888888889f);
    p = vmf_h(p, x, 0.008333333333333333f);
    p = vmf_h(p, x, 0.041666666666666664f);
    p = vmf_h(p, x, 0.16666666666666666f);
    p = vmf_h(p, x, 0.5f);
    vf small = vf_fma_rn(p, vf_mul(x, x), x);
    return vf_sel(vf_lt(vf_abs(x), vmf_c(0.69f)), small, vf_sub(vmf_exp(x), vmf_c(1.0f)));
}

VMF_FN vf vmf_softplus(vf x) {
    vm big = vf_gt(x, vmf_c(20.0f));
    vf y = vmf_exp(vf_sel(big, vf_zero(), x));
    vf u = vf_add(vmf_c(1.0f), y);
    /* log1p(y) = log(u) * y / (u - 1): cancels the rounding of 1 + y */
    vf l = vf_sel(vf_eq(u, vmf_c(1.0f)), y, vf_mul(vmf_log(u), vf_div(y, vf_sub(u, vmf_c(1.0f)))));
    return vf_sel(big, x, l);
}

/* alpha x + beta in two roundings, as numpy and ONNX's float definition. */
VMF_FN vf vmf_hardsigmoid(vf x, float alpha, float beta) {
    return vf_min(vmf_c(1.0f), vf_max(vf_zero(), vf_add(vf_mul(x, vmf_c(alpha)), vmf_c(beta))));
}
VMF_FN vf vmf_hardswish(vf x) {
    return vf_sel(vf_isnan(x), x, vmf_gated(x, vmf_hardsigmoid(x, 1.0f / 6.0f, 0.5f)));
}
/* vf_min/vf_max return their second operand when either is NaN or both are
 * zeros (x86 semantics, kept by vf_scalar.h): NaN and -0 pass through. */
VMF_FN vf vmf_relu(vf x) { return vf_max(vf_zero(), x); }
VMF_FN vf vmf_leaky_relu(vf x, float slope) { return vf_sel(vf_lt(x, vf_zero()), vf_mul(x, vmf_c(slope)), x); }
/* ONNX Clip is min(max(x, lo), hi): with lo > hi every output is hi; NaN passes. */
VMF_FN vf vmf_clip(vf x, float lo, float hi) { return vf_min(vmf_c(hi), vf_max(vmf_c(lo), x)); }
VMF_FN vf vmf_elu(vf x, float alpha) { return vf_sel(vf_gt(x, vf_zero()), x, vf_mul(vmf_c(alpha), vmf_expm1(x))); }
VMF_FN vf vmf_selu(vf x, float alpha, float gamma) { return vf_mul(vmf_c(gamma), vmf_elu(x, alpha)); }
VMF_FN vf vmf_sign(vf x) {
    return vf_sel(vf_gt(x, vf_zero()), vmf_c(1.0f), vf_sel(vf_lt(x, vf_zero()), vmf_c(-1.0f), x));
}

/* One epilogue activation (an AIE_U_* code with AIE_UF_EPI) with its parameters p0/p1: the
 * same functions as the standalone unary ops of the same name. */
VMF_FN vf vmf_act(int act, vf x, float p0, float p1) {
    switch (act) {
    case AIE_U_RELU: return vmf_relu(x);
    case AIE_U_CLIP: return vmf_clip(x, p0, p1);
    case AIE_U_GELU: return vmf_gelu(x);
    case AIE_U_GELU_TANH: return vmf_gelu_tanh(x);
    case AIE_U_SIGMOID: return vmf_sigmoid(x);
    case AIE_U_SILU: return vmf_silu(x);
    case AIE_U_HARDSWISH: return vmf_hardswish(x);
    case AIE_U_HARDSIGMOID: return vmf_hardsigmoid(x, p0, p1);
    case AIE_U_LEAKY_RELU: return vmf_leaky_relu(x, p0);
    case AIE_U_TANH: return vmf_tanh(x);
    default: return x;
    }
}

#ifndef VMF_NO_ROWS
/* Apply an activation in place to n floats; the tail is a masked partial
 * vector, whose live lanes give the same bits as full ones. */
VMF_FN void act_row(float *x, int64_t n, int act, float p0, float p1) {
    if (act == AIE_U_IDENTITY) return;
    int64_t i = 0;
    for (; i + VL <= n; i += VL) vf_store(x + i, vmf_act(act, vf_load(x + i), p0, p1));
    if (i < n) vf_storen(x + i, vmf_act(act, vf_loadn(x + i, (int)(n - i)), p0, p1), (int)(n - i));
}
#endif

#endif /* AIE_VMATH_FN_H */
