/*
 * Elementwise kernels: every ISA path against double-precision libm (ulp
 * error of the unary math over stated ranges, with the special values), every
 * ISA's unary ops bitwise against the scalar path (one math, core/vmath_fn.h,
 * rounding the same way everywhere), and broadcasting/compare/where/cast
 * against plain loops.
 */
#include <float.h>
#include <string.h>

#include "aie_kernels.h"
#include "kernel_test.h"

#define NPTS 100000

static double ref_unary(int op, double x, double p0, double p1) {
    switch (op) {
    case AIE_U_EXP: return exp(x);
    case AIE_U_LOG: return log(x);
    case AIE_U_TANH: return tanh(x);
    case AIE_U_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case AIE_U_ERF: return erf(x);
    case AIE_U_GELU: return 0.5 * x * erfc(-x / sqrt(2.0));
    case AIE_U_GELU_TANH: return x / (1.0 + exp(-2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case AIE_U_SILU: return x / (1.0 + exp(-x));
    case AIE_U_SOFTPLUS: return log1p(exp(x));
    case AIE_U_ELU: return x > 0 ? x : p0 * expm1(x);
    case AIE_U_SELU: return p1 * (x > 0 ? x : p0 * expm1(x));
    default: return NAN;
    }
}

/* Error in units of the last place of the float nearest the exact value. */
static double ulp_err(float got, double want) {
    if (isnan(want)) return isnan(got) ? 0.0 : 1e30;
    float w = (float)want;
    if (isinf(w)) return got == w ? 0.0 : 1e30;
    double aw = fabs((double)w);
    double ulp = aw < FLT_MIN ? ldexp(1.0, -149) : (double)nextafterf((float)aw, INFINITY) - aw;
    return fabs((double)got - want) / ulp;
}

typedef struct {
    int op;
    const char *name;
    double lo, hi;
    double bound; /* max ulp, every path */
    float p0, p1;
} accuracy_case;

static const accuracy_case cases[] = {
    {AIE_U_EXP, "exp", -104, 89, 1.5, 0, 0},
    {AIE_U_LOG, "log", 1e-30, 1e30, 1.5, 0, 0},
    {AIE_U_TANH, "tanh", -10, 10, 2.5, 0, 0},
    {AIE_U_SIGMOID, "sigmoid", -88, 88, 2.5, 0, 0},
    {AIE_U_ERF, "erf", -4.5, 4.5, 2.5, 0, 0},
    {AIE_U_GELU, "gelu", -14, 10, 5.0, 0, 0},
    {AIE_U_GELU_TANH, "gelu_tanh", -1, 10, 4.0, 0, 0},
    /* below -1 the float32 rounding of the tanh argument z (|z| up to 80)
     * is amplified by exp: ~2|z| ulp, inherent to the float32 formula */
    {AIE_U_GELU_TANH, "gelu_tanh", -10, -1, 200.0, 0, 0},
    {AIE_U_SILU, "silu", -80, 80, 3.0, 0, 0},
    {AIE_U_SOFTPLUS, "softplus", -20, 80, 3.0, 0, 0},
    {AIE_U_ELU, "elu", -20, 20, 3.0, 1.0f, 0},
    {AIE_U_SELU, "selu", -20, 20, 3.0, 1.67326319217681884765625f, 1.05070102214813232421875f},
};

static void fill_range(float *x, int n, double lo, double hi, uint64_t seed, int log_scale) {
    kt_fill(x, (size_t)n, seed);
    for (int i = 0; i < n; i++) {
        double u = (x[i] + 1.0) / 2.0;
        x[i] = log_scale ? (float)exp(log(lo) + u * (log(hi) - log(lo))) : (float)(lo + u * (hi - lo));
    }
}

static const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, INFINITY, -INFINITY, NAN,
                                 1e-30f, -1e-30f, 1e-45f, 88.7f, -87.3f, 0.625f, -0.625f, 0.921875f, 1.3037f,
                                 -1.3037f, 5.66f, -5.66f, 20.0f, -20.0f, 3.9f};
#define NSPEC ((int)(sizeof specials / sizeof specials[0]))

static void test_accuracy(aie_isa isa) {
    aie_set_isa(isa);
    float *x = malloc(sizeof(float) * (NPTS + NSPEC)), *y = malloc(sizeof(float) * (NPTS + NSPEC));
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const accuracy_case *c = &cases[k];
        fill_range(x, NPTS, c->lo, c->hi, 11 + k, c->op == AIE_U_LOG);
        memcpy(x + NPTS, specials, sizeof specials);
        int n = NPTS + NSPEC;
        KT_CHECK(aie_unary(c->op, x, y, n, c->p0, c->p1, 1) == AIE_OK, "%s", aie_last_error());
        double worst = 0;
        float at = 0;
        for (int i = 0; i < n; i++) {
            double want = ref_unary(c->op, x[i], c->p0, c->p1);
            /* the kernels define f(-inf) of x*gate(x) as the limit 0 */
            if (isinf(x[i]) && x[i] < 0 && isnan(want)) want = 0.0;
            if (i >= NPTS && (x[i] < c->lo || x[i] > c->hi) && !isinf(x[i]) && !isnan(x[i])) continue;
            double e = ulp_err(y[i], want);
            if (e > worst) { worst = e; at = x[i]; }
        }
        double bound = c->bound;
        printf("  %-7s %-10s [%g, %g]: max %.2f ulp (at %.9g)\n", aie_isa_name(isa), c->name, c->lo, c->hi, worst, at);
        KT_CHECK(worst <= bound, "%s %s: %.2f ulp > %.1f at x=%.9g", aie_isa_name(isa), c->name, worst, bound, at);
    }
    free(x);
    free(y);
}

/* Every unary op, exact or not, gives the scalar path's bits on every ISA
 * (odd length: the masked tail too). */
static void test_bitwise_vs_scalar(aie_isa isa) {
    int n = 1023 + NSPEC;
    float *x = malloc(sizeof(float) * n), *y0 = malloc(sizeof(float) * n), *y1 = malloc(sizeof(float) * n);
    kt_fill(x, 1023, 5);
    for (int i = 0; i < 1023; i++) x[i] *= (i & 1) ? 7.0f : 40.0f; /* the polynomial ranges and the tails */
    x[1] = 2.5f; x[2] = -2.5f; x[3] = 0.5f; x[4] = 1.5f; /* round half to even */
    memcpy(x + 1023, specials, sizeof specials);
    for (int op = 0; op < AIE_U_COUNT; op++) {
        if (!(aie_unary_flags(op) & AIE_UF_VEC)) continue; /* epilogue-only codes (identity) have no unary op */
        aie_set_isa(AIE_ISA_SCALAR);
        aie_unary(op, x, y0, n, -0.3f, 0.7f, 1);
        aie_set_isa(isa);
        aie_unary(op, x, y1, n, -0.3f, 0.7f, 1);
        int bad = -1;
        for (int i = 0; i < n && bad < 0; i++)
            if (memcmp(&y0[i], &y1[i], 4) != 0 && !(isnan(y0[i]) && isnan(y1[i]))) bad = i;
        KT_CHECK(bad < 0, "%s unary op %d differs from scalar at x=%g: %g vs %g", aie_isa_name(isa), op,
                 bad < 0 ? 0.0 : x[bad], bad < 0 ? 0.0 : y0[bad], bad < 0 ? 0.0 : y1[bad]);
    }
    aie_set_isa(AIE_ISA_SCALAR);
    aie_unary(AIE_U_ROUND, x, y0, 5, 0, 0, 1);
    KT_CHECK(y0[1] == 2.0f && y0[2] == -2.0f && y0[3] == 0.0f && y0[4] == 2.0f, "round is not half-to-even");
    free(x);
    free(y0);
    free(y1);
}

/* GELU computes its erf half and its erfc half (and the erfc's |x| > 5.66
 * part) only for vectors with a lane that takes it: groups of 16 (the widest
 * vector) that all take one branch, or all NaN / inf, give the scalar path's
 * bits and the float64 reference within the bound. */
static void test_gelu_branches(aie_isa isa) {
    enum { G = 16, NG = 7, N = G * NG + 5 };
    float x[N], y0[N], y1[N];
    kt_fill(x, N, 23);
    for (int i = 0; i < N; i++) {
        float u = x[i], mag = (float)fabs(u); /* u in [-1, 1] */
        switch (i / G) {
        case 0: x[i] = 1.3f * u; break;                                   /* erf half only */
        case 1: x[i] = copysignf(1.31f + 4.3f * mag, u); break;           /* erfc, no |x| > 5.66 */
        case 2: x[i] = u < 0 ? -5.7f - 8.0f * mag : 5.7f + 4.0f * mag; break; /* erfc's far part only */
        case 3: x[i] = NAN; break;
        case 4: x[i] = i == 4 * G + 5 ? -9.0f : 1.3f * u; break;          /* one far lane among erf lanes */
        case 5: x[i] = (i & 1) ? INFINITY : -INFINITY; break;
        default: x[i] = 12.0f * u; break;                                 /* mixed, and the masked tail */
        }
    }
    aie_set_isa(AIE_ISA_SCALAR);
    KT_CHECK(aie_unary(AIE_U_GELU, x, y0, N, 0, 0, 1) == AIE_OK, "%s", aie_last_error());
    aie_set_isa(isa);
    KT_CHECK(aie_unary(AIE_U_GELU, x, y1, N, 0, 0, 1) == AIE_OK, "%s", aie_last_error());
    for (int i = 0; i < N; i++) {
        KT_CHECK(memcmp(&y0[i], &y1[i], 4) == 0 || (isnan(y0[i]) && isnan(y1[i])),
                 "%s gelu differs from scalar at x=%.9g: %.9g vs %.9g", aie_isa_name(isa), x[i], y0[i], y1[i]);
        double want = isinf(x[i]) && x[i] < 0 ? 0.0 : ref_unary(AIE_U_GELU, x[i], 0, 0);
        if (isnan(x[i])) KT_CHECK(isnan(y1[i]), "%s gelu(NaN) = %g", aie_isa_name(isa), y1[i]);
        else if (isinf(x[i]) || (x[i] >= -14 && x[i] <= 10))
            KT_CHECK(ulp_err(y1[i], want) <= 5.0, "%s gelu(%.9g) = %.9g, want %.9g", aie_isa_name(isa), x[i],
                     y1[i], want);
    }
}

/* Broadcast add/max/compare/where on [7, 1, 31] x [1, 17, 31] vs loops. */
static void test_broadcast(aie_isa isa) {
    aie_set_isa(isa);
    enum { A0 = 7, B1 = 17, C2 = 31 };
    float a[A0 * C2], b[B1 * C2], y[A0 * B1 * C2];
    uint8_t m[A0 * B1 * C2];
    kt_fill(a, A0 * C2, 1);
    kt_fill(b, B1 * C2, 2);
    a[3] = NAN;
    int64_t shape[3] = {A0, B1, C2}, sa[3] = {C2, 0, 1}, sb[3] = {0, C2, 1};
    for (int op = AIE_BINARY_ADD; op <= AIE_BINARY_MIN; op++) {
        if (op == AIE_BINARY_POW) continue;
        KT_CHECK(aie_binary(op, AIE_DT_F32, 3, shape, a, sa, b, sb, y, 2) == AIE_OK, "%s", aie_last_error());
        int bad = 0;
        for (int i = 0; i < A0; i++)
            for (int j = 0; j < B1; j++)
                for (int k = 0; k < C2; k++) {
                    float u = a[i * C2 + k], w = b[j * C2 + k], r = y[(i * B1 + j) * C2 + k], e;
                    switch (op) {
                    case AIE_BINARY_ADD: e = u + w; break;
                    case AIE_BINARY_SUB: e = u - w; break;
                    case AIE_BINARY_MUL: e = u * w; break;
                    case AIE_BINARY_DIV: e = u / w; break;
                    case AIE_BINARY_MAX: e = isnan(u) ? u : (u > w ? u : w); break;
                    default: e = isnan(u) ? u : (u < w ? u : w); break;
                    }
                    bad += !(r == e || (isnan(r) && isnan(e)));
                }
        KT_CHECK(bad == 0, "%s broadcast binary op %d: %d wrong elements", aie_isa_name(isa), op, bad);
    }
    KT_CHECK(aie_compare(AIE_CMP_LT, AIE_DT_F32, 3, shape, a, sa, b, sb, m, 1) == AIE_OK, "%s", aie_last_error());
    int bad = 0;
    for (int i = 0; i < A0; i++)
        for (int j = 0; j < B1; j++)
            for (int k = 0; k < C2; k++) bad += m[(i * B1 + j) * C2 + k] != (a[i * C2 + k] < b[j * C2 + k]);
    KT_CHECK(bad == 0, "%s compare less: %d wrong", aie_isa_name(isa), bad);
    int64_t sm[3] = {B1 * C2, C2, 1};
    KT_CHECK(aie_where(4, 3, shape, m, sm, a, sa, b, sb, y, 1) == AIE_OK, "%s", aie_last_error());
    bad = 0;
    for (int i = 0; i < A0; i++)
        for (int j = 0; j < B1; j++)
            for (int k = 0; k < C2; k++) {
                float e = m[(i * B1 + j) * C2 + k] ? a[i * C2 + k] : b[j * C2 + k], r = y[(i * B1 + j) * C2 + k];
                bad += memcmp(&e, &r, 4) != 0;
            }
    KT_CHECK(bad == 0, "%s where: %d wrong", aie_isa_name(isa), bad);
}

static void test_errors(void) {
    int64_t shape[1] = {3}, s1[1] = {1};
    int64_t a[3] = {1, 2, 3}, b[3] = {1, 0, 1}, y[3];
    KT_CHECK(aie_binary(AIE_BINARY_DIV, AIE_DT_I64, 1, shape, a, s1, b, s1, y, 1) == AIE_EINVAL, "int /0 accepted");
    KT_CHECK(strstr(aie_last_error(), "element 1") != NULL, "message: %s", aie_last_error());
    float f[2] = {1.5f, NAN};
    int64_t out[2];
    KT_CHECK(aie_cast(AIE_DT_F32, AIE_DT_I64, f, out, 2, 1) == AIE_EINVAL, "cast of NaN accepted");
    KT_CHECK(aie_unary(99, f, f, 2, 0, 0, 1) == AIE_EINVAL, "unknown op accepted");
}

int main(void) {
    aie_isa best = aie_best_isa();
    for (int isa = AIE_ISA_SCALAR; isa <= (int)best; isa++) {
        test_accuracy((aie_isa)isa);
        test_bitwise_vs_scalar((aie_isa)isa);
        test_gelu_branches((aie_isa)isa);
        test_broadcast((aie_isa)isa);
    }
    test_errors();
    return kt_report("test_eltwise");
}
