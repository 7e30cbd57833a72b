/*
 * SIMD inner loops of the elementwise / reduction / normalisation kernels,
 * written once with GCC vector extensions and instantiated per ISA:
 * avx2/vmath_avx2.c (8 lanes) and avx512/vmath_avx512.c (16 lanes) define
 *   VW            lanes per vector
 *   VM_TABLE      the aie_vm_table to define
 *   V_FMA(a,b,c)  a*b + c, one rounding
 *   V_ROUND(x)    round half to even;  V_FLOOR(x), V_CEIL(x), V_SQRT(x)
 * and then include this file. The compiler lowers the vector arithmetic to
 * the ISA of the including object (the Makefile's per-object flags).
 *
 * Math functions (accuracy measured by kernels/tests/test_eltwise.c, stated
 * in include/aie_eltwise.h):
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
 *   expm1  Taylor to x^11 for |x| < 0.69 (truncation < 2^-27), exp(x) - 1 above.
 * Products x * gate(x) (silu, gelu, hardswish) return a signed zero when the
 * gate is exactly 0, so f(-inf) is the limit 0, not inf * 0 = NaN.
 */
#include <math.h>
#include <string.h>

#include "aie_eltwise.h"
#include "vmath.h"

typedef float vf __attribute__((vector_size(VW * 4)));
typedef int32_t vi __attribute__((vector_size(VW * 4)));
typedef uint32_t vu __attribute__((vector_size(VW * 4)));
typedef int8_t vs8 __attribute__((vector_size(VW)));

static inline vf vload(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline void vstore(float *p, vf v) { memcpy(p, &v, sizeof v); }
static inline vf vset1(float x) { return (vf){0} + x; }
/* Partial load of m < VW elements, the other lanes set to `fill`. */
static inline vf vload_n(const float *p, int64_t m, float fill) {
    float t[VW];
    for (int k = 0; k < VW; k++) t[k] = fill;
    memcpy(t, p, (size_t)m * sizeof(float));
    return vload(t);
}
static inline void vstore_n(float *p, vf v, int64_t m) {
    float t[VW];
    vstore(t, v);
    memcpy(p, t, (size_t)m * sizeof(float));
}
static inline vf vsel(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }
static inline vf vabs(vf x) { return (vf)((vu)x & 0x7fffffffu); }
static inline vf vcopysign(vf mag, vf s) { return (vf)(((vu)mag & 0x7fffffffu) | ((vu)s & 0x80000000u)); }
static inline vf vmaxn(vf a, vf b) { return vsel((a > b) | (a != a), a, b); } /* NaN-propagating */
static inline vf vminn(vf a, vf b) { return vsel((a < b) | (a != a), a, b); }
/* x * g, but a signed zero when g == 0 (the limit of x * gate(x) at -inf). */
static inline vf vgated(vf x, vf g) { return vsel(g == 0.0f, vcopysign(vset1(0.0f), x), x * g); }

static inline vf v_exp(vf x) {
    vf xc = vsel(x < -104.0f, vset1(-104.0f), x);
    xc = vsel(xc > 89.0f, vset1(89.0f), xc);
    vf n = V_ROUND(xc * 1.44269504088896341f);
    vf r = V_FMA(n, vset1(-0.693359375f), xc);
    r = V_FMA(n, vset1(2.12194440e-4f), r);
    vf p = vset1(1.9875691500e-4f);
    p = V_FMA(p, r, vset1(1.3981999507e-3f));
    p = V_FMA(p, r, vset1(8.3334519073e-3f));
    p = V_FMA(p, r, vset1(4.1665795894e-2f));
    p = V_FMA(p, r, vset1(1.6666665459e-1f));
    p = V_FMA(p, r, vset1(5.0000001201e-1f));
    vf e = V_FMA(p, r * r, r) + 1.0f;
    vi ni = __builtin_convertvector(vsel(n != n, vset1(0.0f), n), vi);
    vi n1 = ni >> 1, n2 = ni - n1;
    vf s1 = (vf)((vu)(n1 + 127) << 23), s2 = (vf)((vu)(n2 + 127) << 23);
    e = e * s1 * s2;
    return vsel(x != x, x, e);
}

static inline vf v_log(vf x) {
    vi sub = (x < 1.17549435e-38f) & (x > 0.0f);
    vf xs = vsel(sub, x * 8388608.0f, x); /* 2^23: denormals become normal */
    vu bits = (vu)xs;
    vf e = __builtin_convertvector((vi)(bits >> 23) - 126, vf) - vsel(sub, vset1(23.0f), vset1(0.0f));
    vf m = (vf)((bits & 0x007fffffu) | 0x3f000000u); /* [0.5, 1) */
    vi lo = m < 0.707106781186547524f;
    e = vsel(lo, e - 1.0f, e);
    vf f = vsel(lo, m + m - 1.0f, m - 1.0f);
    vf z = f * f;
    vf p = vset1(7.0376836292e-2f);
    p = V_FMA(p, f, vset1(-1.1514610310e-1f));
    p = V_FMA(p, f, vset1(1.1676998740e-1f));
    p = V_FMA(p, f, vset1(-1.2420140846e-1f));
    p = V_FMA(p, f, vset1(1.4249322787e-1f));
    p = V_FMA(p, f, vset1(-1.6668057665e-1f));
    p = V_FMA(p, f, vset1(2.0000714765e-1f));
    p = V_FMA(p, f, vset1(-2.4999993993e-1f));
    p = V_FMA(p, f, vset1(3.3333331174e-1f));
    vf y = p * z * f;
    y = V_FMA(e, vset1(-2.12194440e-4f), y);
    y = V_FMA(z, vset1(-0.5f), y);
    vf r = f + y;
    r = V_FMA(e, vset1(0.693359375f), r);
    r = vsel(x == 0.0f, vset1(-INFINITY), r);
    r = vsel(x < 0.0f, vset1(NAN), r);
    r = vsel(x == INFINITY, x, r);
    return vsel(x != x, x, r);
}

/* exp(-|x|) never overflows, so sigmoid(x) for x << 0 reaches the denormals
 * (e / (1 + e)) instead of 1 / (1 + inf) = 0. */
static inline vf v_sigmoid(vf x) {
    vf e = v_exp(-vabs(x));
    return vsel(x < 0.0f, e, vset1(1.0f)) / (1.0f + e);
}

static inline vf v_tanh(vf x) {
    vf ax = vabs(x);
    vf z = x * x;
    vf p = vset1(-5.70498872745e-3f);
    p = V_FMA(p, z, vset1(2.06390887954e-2f));
    p = V_FMA(p, z, vset1(-5.37397155531e-2f));
    p = V_FMA(p, z, vset1(1.33314422036e-1f));
    p = V_FMA(p, z, vset1(-3.33332819422e-1f));
    vf small = V_FMA(p * z, x, x);
    vf large = vcopysign(1.0f - 2.0f / (v_exp(ax + ax) + 1.0f), x);
    return vsel(ax < 0.625f, small, large);
}

/* erf(x) for |x| <= 0.921875 as x + x P(x^2). */
static inline vf v_erf_small(vf x) {
    vf s = x * x;
    vf p = vset1(-0.0006024183821864426f);
    p = V_FMA(p, s, vset1(0.005000815726816654f));
    p = V_FMA(p, s, vset1(-0.02677290514111519f));
    p = V_FMA(p, s, vset1(0.11282037943601608f));
    p = V_FMA(p, s, vset1(-0.3761252462863922f));
    p = V_FMA(p, s, vset1(0.12837916612625122f));
    return V_FMA(x, p, x);
}

static inline vf v_erf(vf x) {
    vf t = vabs(x);
    vf tc = vsel(t > 4.0f, vset1(4.0f), t); /* erf(4) rounds to 1 in float */
    vf q = vset1(1.6131018583109835e-06f);
    q = V_FMA(q, tc, vset1(-4.557118518278003e-05f));
    q = V_FMA(q, tc, vset1(0.0005926017183810472f));
    q = V_FMA(q, tc, vset1(-0.004739417694509029f));
    q = V_FMA(q, tc, vset1(0.026362380012869835f));
    q = V_FMA(q, tc, vset1(-0.10997404158115387f));
    q = V_FMA(q, tc, vset1(-0.6319416761398315f));
    q = V_FMA(q, tc, vset1(-1.1301639080047607f));
    q = V_FMA(q, tc, vset1(0.00030256659374572337f));
    vf big = vcopysign(1.0f - v_exp(q), x);
    return vsel(t <= 0.921875f, v_erf_small(x), big); /* NaN: big, NaN through exp */
}

/* erfc(|x| / sqrt 2) = k * e for |x| >= 1.3037 (see the top of the file),
 * returned as two factors: e = exp(-x^2/2) may be tiny, and multiplying the
 * O(1) factors in first keeps the final product out of the denormal range. */
static inline vf v_erfc_scaled(vf ax, vf *e) {
    vf v = vsel(ax > 20.0f, vset1(20.0f), ax); /* erfc(20/sqrt 2) underflows to 0 */
    vf w = v - 3.0f;
    vf g = vset1(1.0077375378614306e-07f);
    g = V_FMA(g, w, vset1(-1.6081841067716596e-06f));
    g = V_FMA(g, w, vset1(1.4894620107952505e-05f));
    g = V_FMA(g, w, vset1(-0.00011331205314490944f));
    g = V_FMA(g, w, vset1(0.0007886888342909515f));
    g = V_FMA(g, w, vset1(-0.005244940984994173f));
    g = V_FMA(g, w, vset1(0.03527963161468506f));
    g = V_FMA(g, w, vset1(-0.2830986976623535f));
    g = V_FMA(g, w, vset1(-1.4145790338516235f));
    vf iv = 1.0f / v, i2 = iv * iv;
    vf h = vset1(45.191959381103516f);
    h = V_FMA(h, i2, vset1(-11.010546684265137f));
    h = V_FMA(h, i2, vset1(2.3823769092559814f));
    h = V_FMA(h, i2, vset1(-0.7978275418281555f));
    h = V_FMA(h, i2, vset1(0.797884464263916f));
    vf k = vsel(v > 5.66f, h * iv, v_exp(g));
    vf hi = v * v, lo = V_FMA(v, v, -hi); /* v^2 = hi + lo exactly */
    *e = v_exp(hi * -0.5f);
    return k * (1.0f - 0.5f * lo);
}

static inline vf v_gelu(vf x) {
    vf ax = vabs(x), e;
    vf mid = 0.5f * x * (1.0f + v_erf_small(x * 0.70710678118654752f));
    vf k = v_erfc_scaled(ax, &e);
    vf neg = vsel(e == 0.0f, vcopysign(vset1(0.0f), x), (x * 0.5f * k) * e);
    vf tail = vsel(x < 0.0f, neg, x * (1.0f - 0.5f * k * e));
    vf r = vsel(ax <= 1.3037f, mid, tail);
    return vsel(x != x, x, r);
}

static inline vf v_gelu_tanh(vf x) {
    /* 1 + tanh(z) = 2 sigmoid(2z): no cancellation for x < 0 */
    vf xc = vsel(x < -20.0f, vset1(-20.0f), x);
    xc = vsel(xc > 20.0f, vset1(20.0f), xc);
    vf z2 = xc * V_FMA(vset1(0.0713548162726f), xc * xc, vset1(1.5957691216057308f));
    return vsel(x != x, x, vgated(x, v_sigmoid(z2)));
}

static inline vf v_expm1(vf x) {
    vf p = vset1(2.505210838544172e-08f); /* 1/11! */
    p = V_FMA(p, x, vset1(2.755731922398589e-07f));
    p = V_FMA(p, x, vset1(2.7557319223985893e-06f));
    p = V_FMA(p, x, vset1(2.48015873015873e-05f));
    p = V_FMA(p, x, vset1(0.0001984126984126984f));
    p = V_FMA(p, x, vset1(0.001388888888888889f));
    p = V_FMA(p, x, vset1(0.008333333333333333f));
    p = V_FMA(p, x, vset1(0.041666666666666664f));
    p = V_FMA(p, x, vset1(0.16666666666666666f));
    p = V_FMA(p, x, vset1(0.5f));
    vf small = V_FMA(p, x * x, x);
    return vsel(vabs(x) < 0.69f, small, v_exp(x) - 1.0f);
}

static inline vf v_softplus(vf x) {
    vf y = v_exp(vsel(x > 20.0f, vset1(0.0f), x));
    vf u = 1.0f + y;
    /* log1p(y) = log(u) * y / (u - 1): cancels the rounding of 1 + y */
    vf l = vsel(u == 1.0f, y, v_log(u) * (y / (u - 1.0f)));
    return vsel(x > 20.0f, x, l);
}

static inline vf v_hardsigmoid(vf x, float alpha, float beta) {
    vf h = x * alpha + beta;
    h = vsel(h < 0.0f, vset1(0.0f), h);
    return vsel(h > 1.0f, vset1(1.0f), h);
}

/* ---- unary ---------------------------------------------------------- */

#define DEFINE_UNARY(NAME, EXPR)                                                        \
    static void NAME(const float *x, float *y, int64_t n, float p0, float p1) {         \
        int64_t i = 0;                                                                  \
        for (; i + VW <= n; i += VW) {                                                  \
            vf u = vload(x + i);                                                        \
            vstore(y + i, (EXPR));                                                      \
        }                                                                               \
        if (i < n) {                                                                    \
            vf u = vload_n(x + i, n - i, 1.0f);                                         \
            vstore_n(y + i, (EXPR), n - i);                                             \
        }                                                                               \
    }

DEFINE_UNARY(u_relu, vsel(u < 0.0f, vset1(0.0f), u))
DEFINE_UNARY(u_leaky_relu, vsel(u < 0.0f, u * p0, u))
DEFINE_UNARY(u_sigmoid, v_sigmoid(u))
DEFINE_UNARY(u_tanh, v_tanh(u))
DEFINE_UNARY(u_erf, v_erf(u))
DEFINE_UNARY(u_gelu, v_gelu(u))
DEFINE_UNARY(u_gelu_tanh, v_gelu_tanh(u))
DEFINE_UNARY(u_hardsigmoid, v_hardsigmoid(u, p0, p1))
DEFINE_UNARY(u_hardswish, vsel(u != u, u, vgated(u, v_hardsigmoid(u, 1.0f / 6.0f, 0.5f))))
DEFINE_UNARY(u_silu, vsel(u != u, u, vgated(u, v_sigmoid(u))))
DEFINE_UNARY(u_exp, v_exp(u))
DEFINE_UNARY(u_log, v_log(u))
DEFINE_UNARY(u_sqrt, V_SQRT(u))
DEFINE_UNARY(u_reciprocal, 1.0f / u)
DEFINE_UNARY(u_abs, vabs(u))
DEFINE_UNARY(u_neg, -u)
/* ONNX Clip is min(max(x, lo), hi): with lo > hi every output is hi. */
static inline vf v_clip(vf u, float lo, float hi) {
    vf t = vsel(u < lo, vset1(lo), u);
    return vsel(t > hi, vset1(hi), t);
}
DEFINE_UNARY(u_clip, v_clip(u, p0, p1))
DEFINE_UNARY(u_floor, V_FLOOR(u))
DEFINE_UNARY(u_ceil, V_CEIL(u))
DEFINE_UNARY(u_round, V_ROUND(u))
DEFINE_UNARY(u_sign, vsel(u > 0.0f, vset1(1.0f), vsel(u < 0.0f, vset1(-1.0f), u)))
DEFINE_UNARY(u_softplus, v_softplus(u))
DEFINE_UNARY(u_elu, vsel(u > 0.0f, u, p0 * v_expm1(u)))
DEFINE_UNARY(u_selu, p1 * vsel(u > 0.0f, u, p0 * v_expm1(u)))

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

/* ---- binary and compare --------------------------------------------- */

/* sa/sb are loop-invariant: -O3 unswitches the loop into the three cases. */
#define DEFINE_BINARY(NAME, EXPR)                                                                    \
    static void NAME(const float *a, int64_t sa, const float *b, int64_t sb, float *y, int64_t n) { \
        if (n <= 0) return;                                                                          \
        vf ka = vset1(a[0]), kb = vset1(b[0]);                                                       \
        int64_t i = 0;                                                                               \
        for (; i + VW <= n; i += VW) {                                                               \
            vf u = sa ? vload(a + i) : ka, w = sb ? vload(b + i) : kb;                               \
            vstore(y + i, (EXPR));                                                                   \
        }                                                                                            \
        if (i < n) {                                                                                 \
            vf u = sa ? vload_n(a + i, n - i, 1.0f) : ka, w = sb ? vload_n(b + i, n - i, 1.0f) : kb; \
            vstore_n(y + i, (EXPR), n - i);                                                          \
        }                                                                                            \
    }

DEFINE_BINARY(b_add, u + w)
DEFINE_BINARY(b_sub, u - w)
DEFINE_BINARY(b_mul, u * w)
DEFINE_BINARY(b_div, u / w)
DEFINE_BINARY(b_max, vmaxn(u, w))
DEFINE_BINARY(b_min, vminn(u, w))

/* pow with a scalar exponent the driver checked is one of these. */
static void b_pow(const float *a, int64_t sa, const float *b, int64_t sb, float *y, int64_t n) {
    float e = b[0];
    if (e == 2.0f) b_mul(a, 1, a, 1, y, n);
    else if (e == 1.0f) memmove(y, a, (size_t)n * sizeof(float));
    else if (e == 0.5f) u_sqrt(a, y, n, 0, 0);
    else if (e == -1.0f) u_reciprocal(a, y, n, 0, 0);
    else if (e == 3.0f) { b_mul(a, 1, a, 1, y, n); b_mul(y, 1, a, 1, y, n); }
    else for (int64_t i = 0; i < n; i++) y[i] = 1.0f; /* e == 0: pow(x, 0) = 1, even NaN */
}

typedef void (*binary_fn)(const float *, int64_t, const float *, int64_t, float *, int64_t);
static const binary_fn binary_table[] = {
    [AIE_BINARY_ADD] = b_add, [AIE_BINARY_SUB] = b_sub, [AIE_BINARY_MUL] = b_mul,
    [AIE_BINARY_DIV] = b_div, [AIE_BINARY_POW] = b_pow, [AIE_BINARY_MAX] = b_max,
    [AIE_BINARY_MIN] = b_min,
};

static void vm_binary(int op, const float *a, int64_t sa, const float *b, int64_t sb, float *y, int64_t n) {
    binary_table[op](a, sa, b, sb, y, n);
}

static inline void store_mask(uint8_t *y, vi m, int64_t cnt) {
    vs8 bytes = __builtin_convertvector(m, vs8) & 1;
    memcpy(y, &bytes, (size_t)cnt);
}

#define DEFINE_COMPARE(NAME, EXPR)                                                                     \
    static void NAME(const float *a, int64_t sa, const float *b, int64_t sb, uint8_t *y, int64_t n) { \
        if (n <= 0) return;                                                                            \
        vf ka = vset1(a[0]), kb = vset1(b[0]);                                                         \
        int64_t i = 0;                                                                                 \
        for (; i + VW <= n; i += VW) {                                                                 \
            vf u = sa ? vload(a + i) : ka, w = sb ? vload(b + i) : kb;                                 \
            store_mask(y + i, (EXPR), VW);                                                             \
        }                                                                                              \
        if (i < n) {                                                                                   \
            vf u = sa ? vload_n(a + i, n - i, 0.0f) : ka, w = sb ? vload_n(b + i, n - i, 0.0f) : kb;   \
            store_mask(y + i, (EXPR), n - i);                                                          \
        }                                                                                              \
    }

DEFINE_COMPARE(c_eq, u == w)
DEFINE_COMPARE(c_ne, u != w)
DEFINE_COMPARE(c_lt, u < w)
DEFINE_COMPARE(c_le, u <= w)
DEFINE_COMPARE(c_gt, u > w)
DEFINE_COMPARE(c_ge, u >= w)

typedef void (*compare_fn)(const float *, int64_t, const float *, int64_t, uint8_t *, int64_t);
static const compare_fn compare_table[AIE_CMP_COUNT] = {
    [AIE_CMP_EQ] = c_eq, [AIE_CMP_NE] = c_ne, [AIE_CMP_LT] = c_lt,
    [AIE_CMP_LE] = c_le, [AIE_CMP_GT] = c_gt, [AIE_CMP_GE] = c_ge,
};

static void vm_compare(int op, const float *a, int64_t sa, const float *b, int64_t sb, uint8_t *y, int64_t n) {
    compare_table[op](a, sa, b, sb, y, n);
}

/* ---- reductions ------------------------------------------------------ */

/* Four independent accumulators (latency hiding), folded in a fixed order;
 * the tail is a partial vector filled with the op's identity. */
#define DEFINE_ROW_REDUCE(NAME, IDENT, MAP, COMB)                                  \
    static float NAME(const float *x, int64_t n, float c) {                        \
        vf a0 = vset1(IDENT), a1 = a0, a2 = a0, a3 = a0, vc = vset1(c);            \
        (void)vc;                                                                  \
        int64_t i = 0;                                                             \
        for (; i + 4 * VW <= n; i += 4 * VW) {                                     \
            vf u;                                                                  \
            u = vload(x + i); a0 = COMB(a0, MAP);                                  \
            u = vload(x + i + VW); a1 = COMB(a1, MAP);                             \
            u = vload(x + i + 2 * VW); a2 = COMB(a2, MAP);                         \
            u = vload(x + i + 3 * VW); a3 = COMB(a3, MAP);                         \
        }                                                                          \
        for (; i + VW <= n; i += VW) { vf u = vload(x + i); a0 = COMB(a0, MAP); }  \
        if (i < n) {                                                               \
            vf u = vload_n(x + i, n - i, 0.0f);                                    \
            vf m = MAP;                                                            \
            vi live = __builtin_convertvector(lane_ids(), vi) < (int32_t)(n - i);  \
            a1 = COMB(a1, vsel(live, m, vset1(IDENT)));                            \
        }                                                                          \
        a0 = COMB(COMB(a0, a1), COMB(a2, a3));                                     \
        float t[VW];                                                               \
        vstore(t, a0);                                                             \
        float r = t[0];                                                            \
        for (int k = 1; k < VW; k++) {                                             \
            vf rv = vset1(r), tv = vset1(t[k]);                                    \
            r = COMB(rv, tv)[0];                                                   \
        }                                                                          \
        return r;                                                                  \
    }

static inline vf lane_ids(void) {
    float t[VW];
    for (int k = 0; k < VW; k++) t[k] = (float)k;
    return vload(t);
}
#define ADDV(a, b) ((a) + (b))
DEFINE_ROW_REDUCE(r_sum, 0.0f, u, ADDV)
DEFINE_ROW_REDUCE(r_sumsq, 0.0f, (u - vc) * (u - vc), ADDV)
DEFINE_ROW_REDUCE(r_abssum, 0.0f, vabs(u), ADDV)
DEFINE_ROW_REDUCE(r_max, -INFINITY, u, vmaxn)
DEFINE_ROW_REDUCE(r_min, INFINITY, u, vminn)

static float vm_row_reduce(int op, const float *x, int64_t n, float c) {
    switch (op) {
    case AIE_VR_SUM: return r_sum(x, n, c);
    case AIE_VR_SUMSQ: return r_sumsq(x, n, c);
    case AIE_VR_ABSSUM: return r_abssum(x, n, c);
    case AIE_VR_MAX: return r_max(x, n, c);
    default: return r_min(x, n, c);
    }
}

#define DEFINE_COL_ACC(NAME, MAP, COMB)                                              \
    static void NAME(float *acc, const float *x, int64_t n) {                        \
        int64_t i = 0;                                                               \
        for (; i + VW <= n; i += VW) {                                               \
            vf u = vload(x + i);                                                     \
            vstore(acc + i, COMB(vload(acc + i), MAP));                              \
        }                                                                            \
        if (i < n) {                                                                 \
            vf u = vload_n(x + i, n - i, 0.0f);                                      \
            vstore_n(acc + i, COMB(vload_n(acc + i, n - i, 0.0f), MAP), n - i);      \
        }                                                                            \
    }

DEFINE_COL_ACC(a_sum, u, ADDV)
DEFINE_COL_ACC(a_sumsq, u * u, ADDV)
DEFINE_COL_ACC(a_abssum, vabs(u), ADDV)
DEFINE_COL_ACC(a_max, u, vmaxn)
DEFINE_COL_ACC(a_min, u, vminn)

static void vm_col_accumulate(int op, float *acc, const float *x, int64_t n) {
    switch (op) {
    case AIE_VR_SUM: a_sum(acc, x, n); break;
    case AIE_VR_SUMSQ: a_sumsq(acc, x, n); break;
    case AIE_VR_ABSSUM: a_abssum(acc, x, n); break;
    case AIE_VR_MAX: a_max(acc, x, n); break;
    default: a_min(acc, x, n); break;
    }
}

static void vm_exp_shift(const float *x, const float *m, int64_t sm, float *y, int64_t n) {
    vf km = vset1(m[0]);
    int64_t i = 0;
    for (; i + VW <= n; i += VW) vstore(y + i, v_exp(vload(x + i) - (sm ? vload(m + i) : km)));
    if (i < n) vstore_n(y + i, v_exp(vload_n(x + i, n - i, 0.0f) - (sm ? vload_n(m + i, n - i, 0.0f) : km)), n - i);
}

static void vm_norm_apply(const float *x, float *y, int64_t n, float mean, float invstd,
                          const float *scale, const float *bias) {
    vf vm = vset1(mean), vs = vset1(invstd), zero = vset1(0.0f);
    int64_t i = 0;
    for (; i + VW <= n; i += VW) {
        vf t = (vload(x + i) - vm) * vs * vload(scale + i);
        vstore(y + i, t + (bias ? vload(bias + i) : zero));
    }
    if (i < n) {
        int64_t m = n - i;
        vf t = (vload_n(x + i, m, 0.0f) - vm) * vs * vload_n(scale + i, m, 0.0f);
        vstore_n(y + i, t + (bias ? vload_n(bias + i, m, 0.0f) : zero), m);
    }
}

const aie_vm_table VM_TABLE = {
    .unary = vm_unary,
    .binary = vm_binary,
    .compare = vm_compare,
    .row_reduce = vm_row_reduce,
    .col_accumulate = vm_col_accumulate,
    .exp_shift = vm_exp_shift,
    .norm_apply = vm_norm_apply,
};
