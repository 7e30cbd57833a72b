/* aie_conv2d and aie_conv_transpose2d: every ISA path against the float64
 * naive references (ref/conv_ref.c), by normalised error
 * |y - ref| / sum|x||w|, plus the argument checks. */
#include <string.h>

#include "aie_kernels.h"
#include "kernel_test.h"
#include "ref.h"

/* aligned_alloc wants a size that is a multiple of the alignment */
#define AIE_TEST_ROUND64(n) (((n) + 63) / 64 * 64)

typedef struct {
    const char *name;
    aie_conv2d_params p;
    int act;
    int residual;
} conv_case;

#define P(N, H, W, C, K, R, S, sh, sw, dh, dw, pt, pl, pb, pr, g) \
    {N, H, W, C, K, R, S, sh, sw, dh, dw, pt, pl, pb, pr, g, 0, 0}

static const conv_case CASES[] = {
    {"3x3 pad1", P(1, 7, 7, 3, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1), AIE_U_IDENTITY, 0},
    {"3x3 s2 asym pads + relu", P(2, 17, 17, 17, 31, 3, 3, 2, 2, 1, 1, 0, 1, 2, 1, 1), AIE_U_RELU, 0},
    {"5x5 s3 d2", P(1, 17, 17, 31, 17, 5, 5, 3, 3, 2, 2, 2, 2, 2, 2, 1), AIE_U_IDENTITY, 0},
    {"stem 7x7 s2", P(1, 33, 33, 3, 16, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1), AIE_U_RELU, 0},
    {"1x1 gemm + residual", P(2, 7, 7, 17, 31, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1), AIE_U_RELU, 1},
    {"1x1 s2", P(1, 17, 17, 16, 32, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1), AIE_U_IDENTITY, 0},
    {"group 2", P(1, 7, 7, 6, 10, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2), AIE_U_IDENTITY, 1},
    {"depthwise 3x3 + clip + residual", P(1, 17, 17, 31, 31, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 31), AIE_U_CLIP, 1},
    {"depthwise s2 d2 asym", P(2, 17, 17, 17, 17, 3, 3, 2, 2, 2, 2, 2, 1, 0, 2, 17), AIE_U_HARDSWISH, 0},
    {"depthwise 5x5 C40", P(1, 7, 7, 40, 40, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 40), AIE_U_IDENTITY, 0},
    {"depthwise 7x7 H3", P(1, 3, 3, 3, 3, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3, 3), AIE_U_IDENTITY, 0},
    /* rows long enough for the direct kernel's tiles (14 pixels on AVX-512):
     * ragged ends, borders on both sides, strides, dilation, asymmetric pads */
    {"direct 3x3 W31 + residual", P(1, 6, 31, 17, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1), AIE_U_RELU, 1},
    {"direct stem 7x7 s2 W45", P(1, 21, 45, 3, 64, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1), AIE_U_RELU, 0},
    {"direct 3x3 s2 d(1,2) asym", P(2, 9, 47, 5, 33, 3, 3, 2, 2, 1, 2, 0, 3, 2, 1, 1), AIE_U_HARDSWISH, 1},
    {"direct 3x3 W9 half tiles", P(1, 5, 9, 9, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1), AIE_U_CLIP, 0},
    {"direct 1x5 big pads", P(1, 3, 30, 4, 7, 1, 5, 1, 1, 1, 1, 2, 4, 0, 3, 1), AIE_U_IDENTITY, 1},
    {"direct narrow 3x3 s2 K16", P(1, 9, 75, 3, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1), AIE_U_HARDSWISH, 1},
    {"3x3 asym pads N2 (winograd too)", P(2, 9, 11, 19, 37, 3, 3, 1, 1, 1, 1, 2, 0, 1, 2, 1), AIE_U_HARDSWISH, 1},
    {"direct 1x1 s1 one flat row", P(3, 5, 7, 19, 45, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1), AIE_U_RELU, 1},
    /* SiLU runs over the stored tile (conv_direct_body.h): row tails of
     * 5 of 8 / 16 lanes, narrow and wide tiles, with and without residual */
    {"direct stem 3x3 s2 K16 W83 + silu", P(1, 9, 83, 3, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1), AIE_U_SILU, 0},
    {"direct narrow 3x3 K13 W29 + silu + residual", P(2, 7, 29, 11, 13, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1), AIE_U_SILU,
     1},
    {"direct 1x1 K37 + silu", P(1, 5, 23, 21, 37, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1), AIE_U_SILU, 0},
    /* ... and Winograd's over whole output rows after every panel (conv_winograd.c): 3 panels, odd P and Q
     * (partial tiles), tile rows crossing images */
    {"3x3 K37 odd P, Q, N2 + silu + residual (winograd too)", P(2, 7, 9, 13, 37, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1),
     AIE_U_SILU, 1},
};

/* Every case runs under both general algorithms; the direct one falls back
 * to implicit GEMM where the params do not allow it (groups, short rows). */
static const int ALGOS[] = {AIE_CONV_ALGO_GEMM, AIE_CONV_ALGO_DIRECT};
static int g_algo_now = AIE_CONV_ALGO_AUTO;
/* 1: pack with aie_conv2d_pack_winograd (the cases that allow it) */
static int g_winograd = 0;

/* Runs one case on `isa` with `nt` threads; returns the max normalised error. */
static double run_case(const conv_case *cs, aie_isa isa, int nt, float *y, const float *x, const float *w,
                       const float *b, const float *res, const double *ref, const double *scale, size_t ny) {
    aie_set_isa(isa);
    const aie_conv2d_params *p = &cs->p;
    size_t psz = g_winograd ? aie_conv2d_winograd_packed_size(p) : aie_conv2d_packed_size(p);
    size_t wsz = aie_conv2d_workspace_size(p, nt);
    void *packed = aligned_alloc(64, AIE_TEST_ROUND64(psz));
    void *ws = wsz ? malloc(wsz) : NULL;
    aie_epilogue ep = {NULL, AIE_BIAS_NONE, cs->act, 0.f, 6.f};
    int rc = g_winograd ? aie_conv2d_pack_winograd(p, w, packed, psz) : aie_conv2d_pack_weights(p, w, packed, psz);
    KT_CHECK(rc == AIE_OK, "%s/%s: pack: %s", cs->name, aie_isa_name(isa), aie_last_error());
    rc = aie_conv2d(p, x, packed, b, res, &ep, y, ws, wsz, nt);
    KT_CHECK(rc == AIE_OK, "%s/%s: conv2d: %s", cs->name, aie_isa_name(isa), aie_last_error());
    if (nt == 2 && (g_winograd || (g_algo_now == AIE_CONV_ALGO_DIRECT && aie_conv2d_algo(p) == AIE_CONV_ALGO_DIRECT))) {
        /* the direct and Winograd paths' arithmetic does not depend on the worker */
        float *y1 = malloc(ny * sizeof(float));
        rc = aie_conv2d(p, x, packed, b, res == y ? NULL : res, &ep, y1, ws, wsz, 1);
        KT_CHECK(rc == AIE_OK && memcmp(y1, y, ny * sizeof(float)) == 0, "%s/%s: direct, 1 vs 2 threads not bitwise",
                 cs->name, aie_isa_name(isa));
        free(y1);
    }
    double worst = 0;
    for (size_t i = 0; i < ny; i++) {
        double e = fabs(y[i] - ref[i]) / scale[i];
        if (!(e <= worst)) worst = e; /* NaN counts as the worst */
    }
    free(packed);
    free(ws);
    return worst;
}

static void test_case(const conv_case *cs) {
    const aie_conv2d_params *p = &cs->p;
    int64_t P, Q;
    KT_CHECK(aie_conv2d_output_shape(p, &P, &Q) == AIE_OK, "%s: output shape: %s", cs->name, aie_last_error());
    const size_t nx = (size_t)(p->N * p->H * p->W * p->C), ny = (size_t)(p->N * P * Q * p->K);
    const size_t nw = (size_t)(p->K * (p->C / p->groups) * p->R * p->S);
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc((size_t)p->K * 4), *res = malloc(ny * 4);
    float *y = malloc(ny * 4), *y_scalar = malloc(ny * 4);
    double *ref = malloc(ny * 8), *scale = malloc(ny * 8);
    kt_fill(x, nx, 1);
    kt_fill(w, nw, 2);
    kt_fill(b, (size_t)p->K, 3);
    kt_fill(res, ny, 4);
    const float *r = cs->residual ? res : NULL;
    aie_ref_conv2d(p, P, Q, x, w, b, r, cs->act, 0.0, 6.0, ref, scale); /* clip cases are relu6 */
    const aie_isa saved = aie_selected_isa();
    double e = run_case(cs, AIE_ISA_SCALAR, 1, y_scalar, x, w, b, r, ref, scale, ny);
    KT_CHECK(e < 1e-6, "%s/scalar: normalised error %.3g", cs->name, e);
    for (int isa = AIE_ISA_AVX2; isa <= (int)aie_best_isa(); isa++) {
        for (int nt = 1; nt <= 2; nt++) {
            e = run_case(cs, (aie_isa)isa, nt, y, x, w, b, r, ref, scale, ny);
            KT_CHECK(e < 1e-6, "%s/%s/%d threads: normalised error %.3g", cs->name, aie_isa_name((aie_isa)isa), nt,
                     e);
            double d = 0; /* SIMD vs the scalar reference path */
            for (size_t i = 0; i < ny; i++) {
                double di = fabs((double)y[i] - y_scalar[i]) / scale[i];
                if (!(di <= d)) d = di;
            }
            KT_CHECK(d < 1e-6, "%s/%s vs scalar: normalised difference %.3g", cs->name, aie_isa_name((aie_isa)isa),
                     d);
        }
    }
    aie_set_isa(saved);
    free(x), free(w), free(b), free(res), free(y), free(y_scalar), free(ref), free(scale);
}

static void test_transpose(void) {
    /* 3x3 stride 2, pads 1, output_padding 1, groups 2: the decoder shape */
    const aie_conv2d_params p = {2, 5, 4, 4, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2, 1, 1};
    int64_t P, Q;
    KT_CHECK(aie_conv_transpose2d_output_shape(&p, &P, &Q) == AIE_OK && P == 10 && Q == 8,
             "conv_transpose2d: output %lldx%lld, expected 10x8", (long long)P, (long long)Q);
    const size_t nx = 2 * 5 * 4 * 4, ny = (size_t)(2 * P * Q * 6), nw = 4 * 3 * 9;
    float x[2 * 5 * 4 * 4], w[4 * 3 * 9], b[6];
    float *y = malloc(ny * 4);
    double *ref = malloc(ny * 8), *scale = malloc(ny * 8);
    kt_fill(x, nx, 5);
    kt_fill(w, nw, 6);
    kt_fill(b, 6, 7);
    aie_ref_conv_transpose2d(&p, P, Q, x, w, b, ref, scale);
    const aie_isa saved = aie_selected_isa();
    for (int isa = AIE_ISA_SCALAR; isa <= (int)aie_best_isa(); isa++) {
        aie_set_isa((aie_isa)isa);
        size_t psz = aie_conv_transpose2d_packed_size(&p);
        void *packed = aligned_alloc(64, AIE_TEST_ROUND64(psz));
        KT_CHECK(aie_conv_transpose2d_pack_weights(&p, w, packed, psz) == AIE_OK, "pack: %s", aie_last_error());
        size_t wsz = aie_conv_transpose2d_workspace_size(&p, 2);
        void *ws = malloc(wsz);
        KT_CHECK(aie_conv_transpose2d(&p, x, packed, b, NULL, y, ws, wsz, 2) == AIE_OK, "run: %s", aie_last_error());
        KT_CHECK(aie_conv_transpose2d(&p, x, packed, b, NULL, y, ws, wsz - 1, 2) == AIE_ENOMEM,
                 "short workspace accepted");
        free(ws);
        double e = 0;
        for (size_t i = 0; i < ny; i++) {
            double d = fabs(y[i] - ref[i]) / scale[i];
            if (!(d <= e)) e = d;
        }
        KT_CHECK(e < 1e-6, "conv_transpose2d/%s: normalised error %.3g", aie_isa_name((aie_isa)isa), e);
        free(packed);
    }
    aie_set_isa(saved);
    free(y), free(ref), free(scale);
}

static void test_errors(void) {
    aie_conv2d_params p = P(1, 5, 5, 3, 4, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1);
    int64_t P_, Q_;
    p.groups = 2;
    KT_CHECK(aie_conv2d_output_shape(&p, &P_, &Q_) == AIE_EINVAL && strstr(aie_last_error(), "groups=2"),
             "groups not dividing C: %s", aie_last_error());
    p.groups = 1;
    p.H = 2;
    KT_CHECK(aie_conv2d_output_shape(&p, &P_, &Q_) == AIE_EINVAL && strstr(aie_last_error(), "larger than"),
             "window larger than input: %s", aie_last_error());
    p.H = 5;
    p.stride_w = 0;
    KT_CHECK(aie_conv2d_output_shape(&p, &P_, &Q_) == AIE_EINVAL, "stride 0 accepted");
    p.stride_w = 1;
    /* a blob packed for other params is rejected, never misread */
    aie_conv2d_params other = p;
    other.K = 5;
    size_t psz = aie_conv2d_packed_size(&other);
    void *packed = aligned_alloc(64, AIE_TEST_ROUND64(psz));
    float w[5 * 3 * 9], x[5 * 5 * 3], y[3 * 3 * 4];
    kt_fill(w, 5 * 27, 9);
    kt_fill(x, 75, 10);
    KT_CHECK(aie_conv2d_pack_weights(&other, w, packed, psz) == AIE_OK, "pack: %s", aie_last_error());
    size_t wsz = aie_conv2d_workspace_size(&p, 1);
    void *ws = malloc(wsz + 1);
    KT_CHECK(aie_conv2d(&p, x, packed, NULL, NULL, NULL, y, ws, wsz, 1) == AIE_EINVAL &&
                 strstr(aie_last_error(), "packed weights are for"),
             "mismatched blob: %s", aie_last_error());
    KT_CHECK(aie_conv2d_pack_weights(&p, w, packed, 16) == AIE_ENOMEM, "short pack destination accepted");
    KT_CHECK(aie_conv2d_pack_weights(&p, w, packed, psz) == AIE_OK, "pack: %s", aie_last_error());
    KT_CHECK(aie_conv2d(&p, x, packed, NULL, NULL, NULL, y, ws, wsz ? wsz - 1 : 0, 1) == (wsz ? AIE_ENOMEM : AIE_OK),
             "short workspace: %s", aie_last_error());
    free(ws);
    free(packed);
}

/* The forced direct algo reaches the direct kernel on every ISA for the
 * cases written for it (else the loop above would test GEMM twice). */
/* aie_conv2d_dw_pw: bitwise the aie_conv2d calls it replaces (the 1x1s on
 * the direct path), on every ISA and 1-2 threads, and within the conv bound
 * of a float64 reference of the project conv on the depthwise step's output
 * (the other steps are checked by the cases above). cin > 0: an expand conv
 * cin -> dw.C first (x then has cin channels). */
typedef struct {
    const char *name;
    aie_conv2d_params dw;
    int64_t K, cin;
    int dw_act, pw_act, residual;
} dw_pw_case;

static const dw_pw_case DW_PW_CASES[] = {
    {"dw 3x3 s1 -> 24, residual", P(2, 9, 23, 37, 37, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 37), 24, 0, AIE_U_CLIP,
     AIE_U_IDENTITY, 1},
    {"dw 3x3 s2 -> 13 (narrow)", P(1, 17, 33, 19, 19, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 19), 13, 0, AIE_U_CLIP,
     AIE_U_RELU, 0},
    {"dw 5x5 asym -> 45, Q 4", P(3, 6, 5, 33, 33, 5, 5, 1, 1, 1, 1, 2, 1, 0, 2, 33), 45, 0, AIE_U_HARDSWISH,
     AIE_U_CLIP, 1},
    {"dw 3x3 s1 W30 -> 70", P(1, 4, 30, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 64), 70, 0, AIE_U_RELU,
     AIE_U_IDENTITY, 1},
    {"expand 7 -> dw 3x3 s1 -> 7, residual", P(2, 19, 9, 42, 42, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 42), 7, 7,
     AIE_U_CLIP, AIE_U_IDENTITY, 1},
    {"expand 16 -> dw 3x3 s2 -> 24", P(3, 13, 31, 96, 96, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 96), 24, 16, AIE_U_CLIP,
     AIE_U_IDENTITY, 0},
    {"expand 5 -> dw 3x3 d2 s2 asym -> 33", P(1, 23, 15, 17, 17, 3, 3, 2, 1, 2, 1, 0, 1, 2, 1, 17), 33, 5,
     AIE_U_HARDSWISH, AIE_U_RELU, 1},
};

static void test_dw_pw_case(const dw_pw_case *cs) {
    const aie_conv2d_params *dw = &cs->dw;
    int64_t P, Q;
    KT_CHECK(aie_conv2d_output_shape(dw, &P, &Q) == AIE_OK, "%s: shape", cs->name);
    const aie_conv2d_params pw = P(dw->N, P, Q, dw->K, cs->K, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1);
    const aie_conv2d_params ex = P(dw->N, dw->H, dw->W, cs->cin, dw->C, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1);
    const int64_t cx = cs->cin ? cs->cin : dw->C;
    const size_t nx = (size_t)(dw->N * dw->H * dw->W * cx), ne = (size_t)(dw->N * dw->H * dw->W * dw->C);
    const size_t nm = (size_t)(dw->N * P * Q * dw->K), ny = (size_t)(dw->N * P * Q * cs->K);
    const size_t nwd = (size_t)(dw->K * dw->R * dw->S), nwp = (size_t)(cs->K * dw->K), nwx = (size_t)(dw->C * cx);
    float *x = malloc(nx * 4), *wd = malloc(nwd * 4), *wp = malloc(nwp * 4), *bd = malloc((size_t)dw->K * 4);
    float *bp = malloc((size_t)cs->K * 4), *res = malloc(ny * 4), *mid = malloc(nm * 4), *y = malloc(ny * 4);
    float *y2 = malloc(ny * 4), *wx = malloc(nwx * 4), *bx = malloc((size_t)dw->C * 4), *xe = malloc(ne * 4);
    double *ref = malloc(ny * 8), *scale = malloc(ny * 8);
    kt_fill(x, nx, 11), kt_fill(wd, nwd, 12), kt_fill(wp, nwp, 13), kt_fill(bd, (size_t)dw->K, 14);
    kt_fill(bp, (size_t)cs->K, 15), kt_fill(res, ny, 16), kt_fill(wx, nwx, 17), kt_fill(bx, (size_t)dw->C, 18);
    const float *r = cs->residual ? res : NULL;
    aie_epilogue ed = {NULL, AIE_BIAS_NONE, cs->dw_act, 0.f, 6.f}, ep = {NULL, AIE_BIAS_NONE, cs->pw_act, 0.f, 6.f};
    aie_epilogue ex_ep = {NULL, AIE_BIAS_NONE, AIE_U_CLIP, 0.f, 6.f};
    const aie_isa saved = aie_selected_isa();
    for (int isa = AIE_ISA_SCALAR; isa <= (int)aie_best_isa(); isa++) {
        aie_set_isa((aie_isa)isa);
        const char *in = aie_isa_name((aie_isa)isa);
        size_t sd = aie_conv2d_packed_size(dw), sp = aie_conv2d_packed_size(&pw), sx = aie_conv2d_packed_size(&ex);
        void *pd = aligned_alloc(64, AIE_TEST_ROUND64(sd)), *pp = aligned_alloc(64, AIE_TEST_ROUND64(sp));
        void *px = cs->cin ? aligned_alloc(64, AIE_TEST_ROUND64(sx)) : NULL;
        KT_CHECK(aie_conv2d_pack_weights(dw, wd, pd, sd) == AIE_OK && aie_conv2d_pack_weights(&pw, wp, pp, sp) == AIE_OK
                     && (!cs->cin || aie_conv2d_pack_weights(&ex, wx, px, sx) == AIE_OK),
                 "%s/%s: pack: %s", cs->name, in, aie_last_error());
        /* the unfused steps: [expand,] depthwise into memory, then the 1x1 (direct path) */
        KT_CHECK(aie_conv2d_algo(&pw) == AIE_CONV_ALGO_DIRECT && (!cs->cin || aie_conv2d_algo(&ex) == AIE_CONV_ALGO_DIRECT),
                 "%s/%s: a 1x1 is not on the direct path", cs->name, in);
        size_t w2 = aie_conv2d_workspace_size(&pw, 1), w3 = aie_conv2d_workspace_size(&ex, 1);
        if (w3 > w2) w2 = w3;
        void *ws2 = w2 ? malloc(w2) : NULL;
        const float *dx = x;
        if (cs->cin) {
            KT_CHECK(aie_conv2d(&ex, x, px, bx, NULL, &ex_ep, xe, ws2, w2, 1) == AIE_OK, "%s/%s: expand: %s", cs->name,
                     in, aie_last_error());
            dx = xe;
        }
        KT_CHECK(aie_conv2d(dw, dx, pd, bd, NULL, &ed, mid, NULL, 0, 1) == AIE_OK &&
                     aie_conv2d(&pw, mid, pp, bp, r, &ep, y2, ws2, w2, 1) == AIE_OK,
                 "%s/%s: unfused: %s", cs->name, in, aie_last_error());
        aie_ref_conv2d(&pw, P, Q, mid, wp, bp, r, cs->pw_act, 0.0, 6.0, ref, scale);
        const aie_conv_stage sdw = {dw, pd, bd, &ed}, spw = {&pw, pp, bp, &ep}, sex = {&ex, px, bx, &ex_ep};
        const aie_conv_stage *e = cs->cin ? &sex : NULL;
        for (int nt = 1; nt <= 2; nt++) {
            size_t wsz = aie_conv2d_dw_pw_workspace_size(cs->cin ? &ex : NULL, dw, &pw, nt);
            void *ws = malloc(wsz);
            int rc = aie_conv2d_dw_pw(e, &sdw, &spw, x, r, y, ws, wsz, nt);
            KT_CHECK(rc == AIE_OK, "%s/%s/%d: dw_pw: %s", cs->name, in, nt, aie_last_error());
            KT_CHECK(memcmp(y, y2, ny * 4) == 0, "%s/%s/%d threads: fused differs from the unfused steps", cs->name,
                     in, nt);
            double worst = 0;
            for (size_t i = 0; i < ny; i++) {
                double err = fabs(y[i] - ref[i]) / scale[i];
                if (!(err <= worst)) worst = err;
            }
            KT_CHECK(worst < 1e-6, "%s/%s/%d threads: normalised error %.3g", cs->name, in, nt, worst);
            rc = aie_conv2d_dw_pw(e, &sdw, &spw, x, r, y, ws, wsz - 1, nt);
            KT_CHECK(rc == AIE_ENOMEM, "%s/%s: a short workspace was accepted", cs->name, in);
            free(ws);
        }
        free(ws2), free(pd), free(pp), free(px);
    }
    aie_set_isa(saved);
    /* mismatched: the project conv reads other channels than the depthwise writes */
    aie_conv2d_params bad = pw;
    bad.C += 1;
    KT_CHECK(aie_conv2d_dw_pw_workspace_size(NULL, dw, &bad, 1) == 0, "%s: mismatched pair sized", cs->name);
    bad = ex;
    bad.K += 1;
    KT_CHECK(aie_conv2d_dw_pw_workspace_size(&bad, dw, &pw, 1) == 0, "%s: mismatched expand sized", cs->name);
    free(x), free(wd), free(wp), free(bd), free(bp), free(res), free(mid), free(y), free(y2), free(wx), free(bx);
    free(xe), free(ref), free(scale);
}

static void test_direct_taken(void) {
    const aie_isa saved = aie_selected_isa();
    aie_conv2d_set_algo(AIE_CONV_ALGO_DIRECT);
    for (int isa = AIE_ISA_SCALAR; isa <= (int)aie_best_isa(); isa++) {
        aie_set_isa((aie_isa)isa);
        for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
            if (strncmp(CASES[i].name, "direct", 6) == 0)
                KT_CHECK(aie_conv2d_algo(&CASES[i].p) == AIE_CONV_ALGO_DIRECT, "%s/%s: direct path not taken",
                         CASES[i].name, aie_isa_name((aie_isa)isa));
    }
    aie_conv2d_set_algo(AIE_CONV_ALGO_AUTO);
    aie_set_isa(saved);
}

int main(void) {
    if (aie_init() != AIE_OK) {
        fprintf(stderr, "aie_init: %s\n", aie_last_error());
        return 1;
    }
    for (size_t a = 0; a < sizeof ALGOS / sizeof ALGOS[0]; a++) {
        g_algo_now = ALGOS[a];
        aie_conv2d_set_algo(g_algo_now);
        for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) test_case(&CASES[i]);
    }
    aie_conv2d_set_algo(AIE_CONV_ALGO_AUTO);
    g_algo_now = AIE_CONV_ALGO_AUTO;
    /* Winograd F(2x2, 3x3): the 3x3 stride-1 dilation-1 ungrouped cases */
    g_winograd = 1;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const aie_conv2d_params *p = &CASES[i].p;
        if (p->R == 3 && p->S == 3 && p->stride_h == 1 && p->stride_w == 1 && p->dil_h == 1 && p->dil_w == 1 &&
            p->groups == 1)
            test_case(&CASES[i]);
    }
    g_winograd = 0;
    test_direct_taken();
    for (size_t i = 0; i < sizeof DW_PW_CASES / sizeof DW_PW_CASES[0]; i++) test_dw_pw_case(&DW_PW_CASES[i]);
    test_transpose();
    test_errors();
    return kt_report("test_conv");
}
