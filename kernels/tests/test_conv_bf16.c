/*
 * bf16 convolution tests (aie_conv_lowp.h): every level this CPU runs
 * (aie_set_level) against the naive double reference (ref/conv_bf16_ref.c).
 *  - vs the convolution of the bf16-ROUNDED inputs: only the fp32 sums err,
 *    |y - ref~| <= (D + 2) * 2^-24 * mag~ (D = R*S*C, mag the sum of |x w|
 *    plus |residual| and |bias|): a layout or im2col bug cannot hide in an
 *    input-rounding term;
 *  - vs the fp32 inputs, the header's bound (2^-8 + (D + 2) * 2^-24) * mag.
 * Relu is exact, so it keeps both bounds. Shapes: 1x1 (a plain GEMM on x),
 * 3x3 with padding, strides, dilation, asymmetric pads, 7x7 on 3 channels
 * (the ResNet stem), depths over several K slices, output channels with
 * tails and over one column block, one-pixel images; bias, residual (also
 * in place) and activations. The weights are packed once, at the first
 * level, and run at every level (one layout everywhere); 1 and 3 threads
 * give the same bits. aie_conv2d_bf16_io (bf16 x, residual, y) on the same
 * cases: test_io. Bad arguments: one error each.
 */
#include <math.h>
#include <string.h>

#include "aie_kernels.h"
#include "conv_bf16_ref.h"
#include "kernel_test.h"

typedef struct {
    int64_t N, H, W, C, K, R, S, sh, sw, dh, dw, pt, pl, pb, pr;
    int bias, residual, act; /* residual: 0 none, 1 separate, 2 in place (residual == y) */
} conv_case;

static const conv_case CASES[] = {
    /* N  H   W   C    K    R  S  sh sw dh dw pt pl pb pr  bias res act */
    {2, 5, 7, 33, 17, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0, AIE_U_IDENTITY}, /* 1x1: GEMM on x */
    {1, 9, 11, 16, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, AIE_U_RELU},
    {1, 12, 10, 64, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 2, AIE_U_RELU}, /* C whole k-chunks; in place */
    {1, 20, 19, 3, 64, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1, 0, AIE_U_RELU}, /* the stem: runs of S*C = 21 */
    {1, 13, 14, 5, 33, 2, 3, 1, 2, 2, 2, 0, 2, 1, 0, 0, 0, AIE_U_IDENTITY}, /* dilation, asymmetric pads */
    {1, 6, 5, 130, 31, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, AIE_U_CLIP}, /* D = 1170: three K slices */
    {1, 4, 4, 32, 300, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1, 1, AIE_U_RELU}, /* K over one column block */
    {3, 1, 1, 7, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0, AIE_U_IDENTITY}, /* one pixel, one channel */
    {1, 3, 3, 9, 5, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2, 0, 1, AIE_U_SILU}, /* taps mostly in the padding */
    {2, 17, 16, 24, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, AIE_U_RELU}, /* M = 544: several row tiles */
};
#define NCASES (sizeof CASES / sizeof CASES[0])

static int run_levels(aie_level *out) {
    int n = 0;
    for (int l = 0; l < AIE_LEVEL_COUNT; l++)
        if (aie_level_supported((aie_level)l, NULL)) out[n++] = (aie_level)l;
    return n;
}

static aie_conv2d_params params_of(const conv_case *c) {
    aie_conv2d_params p;
    memset(&p, 0, sizeof p);
    p.N = c->N, p.H = c->H, p.W = c->W, p.C = c->C, p.K = c->K, p.R = c->R, p.S = c->S;
    p.stride_h = c->sh, p.stride_w = c->sw, p.dil_h = c->dh, p.dil_w = c->dw;
    p.pad_top = c->pt, p.pad_left = c->pl, p.pad_bottom = c->pb, p.pad_right = c->pr, p.groups = 1;
    return p;
}

/* A case's params, sizes and seeded operands (x, weights, bias, residual). */
typedef struct {
    aie_conv2d_params p;
    int64_t nx, ny, D;
    float *x, *w, *bias, *res;
} conv_data;

static conv_data data_of(const conv_case *c, int ci, uint64_t seed) {
    conv_data d = {.p = params_of(c)};
    int64_t P = 0, Q = 0;
    KT_CHECK(aie_conv2d_output_shape(&d.p, &P, &Q) == AIE_OK, "case %d: bad shape", ci);
    const int64_t nw = d.p.K * d.p.C * d.p.R * d.p.S;
    d.nx = d.p.N * d.p.H * d.p.W * d.p.C, d.ny = d.p.N * P * Q * d.p.K, d.D = d.p.R * d.p.S * d.p.C;
    d.x = kt_xmalloc((size_t)d.nx * sizeof(float)), d.w = kt_xmalloc((size_t)nw * sizeof(float));
    d.bias = kt_xmalloc((size_t)d.p.K * sizeof(float)), d.res = kt_xmalloc((size_t)d.ny * sizeof(float));
    kt_fill(d.x, (size_t)d.nx, seed + 1);
    kt_fill(d.w, (size_t)nw, seed + 2);
    kt_fill(d.bias, (size_t)d.p.K, seed + 3);
    kt_fill(d.res, (size_t)d.ny, seed + 4);
    return d;
}

static void free_data(conv_data *d) { free(d->x), free(d->w), free(d->bias), free(d->res); }

static void test_case(const aie_level *levels, int nlevels, const conv_case *c, int ci) {
    conv_data d = data_of(c, ci, (uint64_t)ci * 3);
    const aie_conv2d_params p = d.p;
    const int64_t ny = d.ny, D = d.D;
    float *x = d.x, *w = d.w, *bias = d.bias, *res = d.res;
    float *y = kt_xmalloc((size_t)ny * sizeof(float)), *first = kt_xmalloc((size_t)ny * sizeof(float));
    double *ref_r = kt_xmalloc((size_t)ny * sizeof(double)), *ref_e = kt_xmalloc((size_t)ny * sizeof(double));
    double *mag = kt_xmalloc((size_t)ny * sizeof(double));
    const float p0 = c->act == AIE_U_CLIP ? -0.25f : 0.f, p1 = c->act == AIE_U_CLIP ? 0.5f : 0.f;
    aie_conv2d_bf16_naive(&p, x, w, c->bias ? bias : NULL, c->residual ? res : NULL, c->act, p0, p1, ref_r, ref_e,
                          mag);
    /* silu's own rounding (a few ulp of fp32, vmath) on top of the sum's */
    const double act_tol = c->act == AIE_U_SILU ? 0x1p-20 : 0.0;
    size_t psz = aie_conv2d_bf16_packed_size(&p);
    KT_CHECK(psz > 0, "case %d: packed size: %s", ci, aie_last_error());
    void *packed = kt_xmalloc(psz);
    KT_CHECK(aie_conv2d_bf16_pack_weights(&p, w, packed, psz) == AIE_OK, "case %d: pack: %s", ci, aie_last_error());
    aie_epilogue ep = {NULL, AIE_BIAS_NONE, c->act, p0, p1};
    for (int li = 0; li < nlevels; li++) {
        aie_set_level(levels[li]);
        for (int threads = 1; threads <= 3; threads += 2) {
            size_t wss = aie_conv2d_bf16_workspace_size(&p, threads);
            void *ws = kt_xmalloc(wss);
            const float *r = NULL;
            if (c->residual == 2) {
                memcpy(y, res, (size_t)ny * sizeof(float));
                r = y;
            } else {
                for (int64_t i = 0; i < ny; i++) y[i] = NAN; /* every element must be written */
                if (c->residual) r = res;
            }
            int rc = aie_conv2d_bf16(&p, x, packed, c->bias ? bias : NULL, r, &ep, y, ws, wss, threads);
            KT_CHECK(rc == AIE_OK, "case %d %s: %s", ci, aie_level_name(levels[li]), aie_last_error());
            free(ws);
            double worst_r = 0, worst_e = 0;
            for (int64_t i = 0; i < ny; i++) {
                /* |x|, |w| < 1: the rounded magnitudes exceed mag by < 2^-7 */
                double tol_r = (double)(D + 2) * 0x1p-24 * mag[i] * (1 + 0x1p-7) + act_tol * fabs(ref_r[i]) + 1e-30;
                double tol_e = (0x1p-8 + (double)(D + 2) * 0x1p-24) * mag[i] + act_tol * fabs(ref_e[i]) + 1e-30;
                double er = fabs(y[i] - ref_r[i]) / tol_r, ee = fabs(y[i] - ref_e[i]) / tol_e;
                if (!(er <= worst_r)) worst_r = er;
                if (!(ee <= worst_e)) worst_e = ee;
            }
            KT_CHECK(worst_r <= 1.0 && worst_e <= 1.0,
                     "case %d %s threads=%d: error %.3g of the summation bound, %.3g of the input bound", ci,
                     aie_level_name(levels[li]), threads, worst_r, worst_e);
            if (threads == 1) memcpy(first, y, (size_t)ny * sizeof(float));
            else
                KT_CHECK(memcmp(first, y, (size_t)ny * sizeof(float)) == 0, "case %d %s: 1 and 3 threads differ",
                         ci, aie_level_name(levels[li]));
        }
    }
    aie_set_level(aie_best_level());
    free_data(&d);
    free(y), free(first), free(ref_r), free(ref_e), free(mag), free(packed);
}

/* fp32 -> bf16 bits, nearest even (finite values; the reference for the
 * AIE_CONV_BF16_Y store). */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* aie_conv2d_bf16_io: x, residual and y in bf16 in the combinations a plan
 * uses. With x and the residual holding bf16 values, reading them as bf16
 * gives the fp32 call's sums bit for bit, and a bf16 y is that call's fp32
 * y rounded to nearest even (fp32 denormals may read as zero on the
 * AVX-512 BF16 / AMX levels), at every level and thread count. Against the
 * float64 reference of those inputs: the summation bound above plus the
 * output rounding, half a bf16 ulp: <= 2^-8 |y|. */
static void test_io(const aie_level *levels, int nlevels, const conv_case *c, int ci) {
    conv_data d = data_of(c, ci, (uint64_t)ci * 7 + 10);
    aie_conv2d_params p = d.p;
    const int64_t nx = d.nx, ny = d.ny, D = d.D;
    float *x = d.x, *w = d.w, *bias = d.bias, *res = d.res;
    float *y32 = kt_xmalloc((size_t)ny * sizeof(float));
    uint16_t *xh = kt_xmalloc((size_t)nx * sizeof(uint16_t)), *rh = kt_xmalloc((size_t)ny * sizeof(uint16_t));
    uint16_t *yh = kt_xmalloc((size_t)ny * sizeof(uint16_t));
    float *yx = kt_xmalloc((size_t)ny * sizeof(float));
    double *ref_r = kt_xmalloc((size_t)ny * sizeof(double)), *ref_e = kt_xmalloc((size_t)ny * sizeof(double));
    double *mag = kt_xmalloc((size_t)ny * sizeof(double));
    for (int64_t i = 0; i < nx; i++) x[i] = from_bf16(xh[i] = to_bf16(x[i]));
    for (int64_t i = 0; i < ny; i++) res[i] = from_bf16(rh[i] = to_bf16(res[i]));
    const int has_res = c->residual != 0;
    const float p0 = c->act == AIE_U_CLIP ? -0.25f : 0.f, p1 = c->act == AIE_U_CLIP ? 0.5f : 0.f;
    aie_conv2d_bf16_naive(&p, x, w, c->bias ? bias : NULL, has_res ? res : NULL, c->act, p0, p1, ref_r, ref_e, mag);
    const double act_tol = c->act == AIE_U_SILU ? 0x1p-20 : 0.0;
    size_t psz = aie_conv2d_bf16_packed_size(&p);
    void *packed = kt_xmalloc(psz);
    KT_CHECK(aie_conv2d_bf16_pack_weights(&p, w, packed, psz) == AIE_OK, "io case %d: pack: %s", ci, aie_last_error());
    aie_epilogue ep = {NULL, AIE_BIAS_NONE, c->act, p0, p1};
    const float *b = c->bias ? bias : NULL;
    for (int li = 0; li < nlevels; li++) {
        aie_set_level(levels[li]);
        const char *lv = aie_level_name(levels[li]);
        for (int threads = 1; threads <= 3; threads += 2) {
            size_t wss = aie_conv2d_bf16_workspace_size(&p, threads);
            void *ws = kt_xmalloc(wss);
            int rc = aie_conv2d_bf16(&p, x, packed, b, has_res ? res : NULL, &ep, y32, ws, wss, threads);
            KT_CHECK(rc == AIE_OK, "io case %d %s: fp32 call: %s", ci, lv, aie_last_error());
            /* bf16 x, fp32 y: the same bits */
            for (int64_t i = 0; i < ny; i++) yx[i] = NAN;
            rc = aie_conv2d_bf16_io(&p, xh, packed, b, has_res ? res : NULL, &ep, yx, ws, wss, threads,
                                    AIE_CONV_BF16_X);
            KT_CHECK(rc == AIE_OK && memcmp(yx, y32, (size_t)ny * sizeof(float)) == 0,
                     "io case %d %s threads=%d: bf16 x differs from fp32 x holding its values (%s)", ci, lv, threads,
                     rc ? aie_last_error() : "");
            /* everything bf16; the residual in place (y itself) when the case says so */
            const void *r = NULL;
            int io = AIE_CONV_BF16_X | AIE_CONV_BF16_Y;
            if (c->residual == 2) {
                memcpy(yh, rh, (size_t)ny * sizeof(uint16_t));
                r = yh;
            } else {
                for (int64_t i = 0; i < ny; i++) yh[i] = 0x7fc1; /* a NaN: every element must be written */
                r = has_res ? (const void *)rh : NULL;
            }
            if (r) io |= AIE_CONV_BF16_RES;
            rc = aie_conv2d_bf16_io(&p, xh, packed, b, r, &ep, yh, ws, wss, threads, io);
            KT_CHECK(rc == AIE_OK, "io case %d %s: %s", ci, lv, aie_last_error());
            double worst = 0;
            int64_t bad = -1;
            for (int64_t i = 0; i < ny && bad < 0; i++) {
                const int denormal = fabsf(y32[i]) < 0x1p-126f;
                if (yh[i] != to_bf16(y32[i]) && !(denormal && (yh[i] & 0x7fffu) == 0)) bad = i;
                double tol = (double)(D + 2) * 0x1p-24 * mag[i] * (1 + 0x1p-7) + act_tol * fabs(ref_r[i]);
                tol += 0x1p-8 * (fabs(ref_r[i]) + tol) + 1e-30;
                double e = fabs(from_bf16(yh[i]) - ref_r[i]) / tol;
                if (!(e <= worst)) worst = e;
            }
            KT_CHECK(bad < 0, "io case %d %s threads=%d: y[%lld] = bf16 %#06x, the fp32 y %.9g rounds to %#06x", ci,
                     lv, threads, (long long)bad, bad < 0 ? 0 : yh[bad], bad < 0 ? 0.0 : (double)y32[bad],
                     bad < 0 ? 0 : to_bf16(y32[bad]));
            KT_CHECK(worst <= 1.0, "io case %d %s threads=%d: error %.3g of the bound", ci, lv, threads, worst);
            free(ws);
        }
    }
    aie_set_level(aie_best_level());
    uint16_t dummy[1] = {0};
    KT_CHECK(aie_conv2d_bf16_io(&p, xh, packed, NULL, NULL, NULL, dummy, NULL, 0, 1, 8) == AIE_EINVAL &&
                 strstr(aie_last_error(), "io flags"),
             "unknown io flag refused: %s", aie_last_error());
    free_data(&d);
    free(y32), free(xh), free(rh), free(yh), free(yx), free(ref_r), free(ref_e), free(mag), free(packed);
}

static void test_errors(void) {
    conv_case c = CASES[1];
    aie_conv2d_params p = params_of(&c);
    size_t psz = aie_conv2d_bf16_packed_size(&p), wss = aie_conv2d_bf16_workspace_size(&p, 1);
    void *packed = kt_xmalloc(psz), *ws = kt_xmalloc(wss);
    float *w = kt_xmalloc((size_t)(p.K * p.C * 9) * sizeof(float)), *x = kt_xmalloc((size_t)(9 * 11 * 16) * 4);
    float *y = kt_xmalloc((size_t)(9 * 11 * 40) * 4);
    kt_fill(w, (size_t)(p.K * p.C * 9), 5);
    kt_fill(x, (size_t)(9 * 11 * 16), 6);
    KT_CHECK(aie_conv2d_bf16_pack_weights(&p, w, packed, psz) == AIE_OK, "pack: %s", aie_last_error());

    aie_conv2d_params g = p;
    g.groups = 2;
    KT_CHECK(aie_conv2d_bf16_packed_size(&g) == 0 && strstr(aie_last_error(), "groups == 1"),
             "groups=2 refused by the size query: %s", aie_last_error());
    KT_CHECK(aie_conv2d_bf16(&g, x, packed, NULL, NULL, NULL, y, ws, wss, 1) == AIE_EINVAL &&
                 strstr(aie_last_error(), "groups == 1"),
             "groups=2 refused: %s", aie_last_error());
    KT_CHECK(aie_conv2d_bf16_pack_weights(&p, w, packed, psz - 1) == AIE_ENOMEM, "short destination refused");
    KT_CHECK(aie_conv2d_bf16(&p, x, packed, NULL, NULL, NULL, y, ws, wss - 128, 1) == AIE_ENOMEM &&
                 strstr(aie_last_error(), "aie_conv2d_bf16_workspace_size"),
             "short workspace refused: %s", aie_last_error());
    aie_conv2d_params other = p;
    other.K = 41;
    KT_CHECK(aie_conv2d_bf16(&other, x, packed, NULL, NULL, NULL, y, ws, wss, 1) == AIE_EINVAL,
             "weights packed for other params refused");
    /* fp32 weights (aie_conv2d_pack_weights) are another kind */
    size_t fsz = aie_conv2d_packed_size(&p);
    void *fp32 = kt_xmalloc(fsz);
    KT_CHECK(aie_conv2d_pack_weights(&p, w, fp32, fsz) == AIE_OK, "fp32 pack: %s", aie_last_error());
    KT_CHECK(aie_conv2d_bf16(&p, x, fp32, NULL, NULL, NULL, y, ws, wss, 1) == AIE_EINVAL &&
                 strstr(aie_last_error(), "kind"),
             "fp32 weights refused: %s", aie_last_error());
    aie_epilogue bad = {NULL, AIE_BIAS_NONE, 99, 0.f, 0.f};
    KT_CHECK(aie_conv2d_bf16(&p, x, packed, NULL, NULL, &bad, y, ws, wss, 1) == AIE_EINVAL, "unknown act refused");
    KT_CHECK(aie_conv2d_bf16(&p, NULL, packed, NULL, NULL, NULL, y, ws, wss, 1) == AIE_EINVAL, "NULL x refused");
    KT_CHECK(strlen(aie_conv2d_bf16_path()) > 0, "a path name");
    free(packed), free(ws), free(w), free(x), free(y), free(fp32);
}

int main(void) {
    aie_level levels[AIE_LEVEL_COUNT];
    int nlevels = run_levels(levels);
    for (size_t i = 0; i < NCASES; i++) test_case(levels, nlevels, &CASES[i], (int)i);
    for (size_t i = 0; i < NCASES; i++) test_io(levels, nlevels, &CASES[i], (int)i);
    test_errors();
    return kt_report("test_conv_bf16");
}
