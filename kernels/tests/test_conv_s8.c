/*
 * int8 convolution tests: aie_conv2d_u8s8 at every level this CPU runs
 * (aie_set_level), 1 and 3 threads, against the naive int64 reference
 * (ref/conv_s8_ref.c): int32 sums bit-exact, U8 outputs equal to the
 * requantisation formula of aie_gemm_lowp.h and byte-identical across
 * levels. Padding with non-zero input zero points, strides, dilations,
 * 1x1 (the GEMM on x), odd sizes, R*S*C not a multiple of the tile depth,
 * saturation (255 x -128 everywhere), the im2col rows written into the A
 * strips along each of its three ways (whole k-chunks, a row buffer, runs
 * split at chunk boundaries), a per-channel lut_u8 after the requantisation;
 * then the error codes of bad arguments.
 */
#include <math.h>
#include <string.h>

#include "aie_kernels.h"
#include "conv_s8_ref.h"
#include "kernel_test.h"

typedef struct {
    int64_t N, H, W, C, K, R, S, sh, sw, dh, dw, pt, pl, pb, pr;
    int32_t x_zero;
    int fill; /* 0 random, 1 saturating: x = 255, w = -128 */
} conv_case;

static const conv_case CASES[] = {
    {1, 5, 7, 3, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 128, 0},
    {2, 9, 8, 17, 33, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 7, 0},
    {1, 6, 6, 64, 31, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 255, 0},   /* pointwise: x is A */
    {1, 7, 5, 70, 40, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 3, 0},     /* strided 1x1 */
    {1, 11, 10, 3, 16, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 0, 0},    /* a stem, K = 147 */
    {1, 9, 9, 5, 6, 3, 2, 1, 2, 2, 1, 2, 0, 1, 3, 200, 0},     /* dilation, uneven pads */
    {1, 4, 4, 30, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1},      /* saturation */
    {3, 3, 3, 130, 65, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 90, 0},   /* K = 1170: two k-slices */
    /* im2col straight into the A strips: C a multiple of the k-chunk (whole-chunk runs), a
     * row buffer (small K), runs split at chunk boundaries (large K, C not a multiple) */
    {2, 6, 7, 64, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 17, 0},
    {1, 9, 8, 128, 20, 3, 3, 2, 1, 2, 1, 2, 1, 0, 2, 9, 0},
    {1, 19, 3, 64, 5, 5, 3, 2, 1, 1, 1, 2, 1, 2, 1, 250, 0},   /* M = 30: a partial strip */
    {1, 4, 5, 520, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 33, 0},   /* K = 4680 */
    {1, 5, 4, 457, 7, 3, 3, 1, 2, 1, 2, 1, 2, 1, 0, 61, 0},    /* K = 4113, dilation */
};
#define NCASES (sizeof CASES / sizeof CASES[0])

static uint8_t requant(int64_t acc, float a_scale, float b_scale, float y_scale, int32_t y_zero) {
    float m = a_scale * b_scale / y_scale;
    float r = nearbyintf((float)(int32_t)acc * m) + (float)y_zero;
    return (uint8_t)(r < 0.f ? 0.f : r > 255.f ? 255.f : r);
}

static void run_case(const aie_level *levels, int nlevels, const conv_case *c) {
    aie_conv2d_params p = {.N = c->N, .H = c->H, .W = c->W, .C = c->C, .K = c->K, .R = c->R, .S = c->S,
                           .stride_h = c->sh, .stride_w = c->sw, .dil_h = c->dh, .dil_w = c->dw, .pad_top = c->pt,
                           .pad_left = c->pl, .pad_bottom = c->pb, .pad_right = c->pr, .groups = 1};
    int64_t P, Q;
    KT_CHECK(aie_conv2d_output_shape(&p, &P, &Q) == AIE_OK, "shape");
    const int64_t nx = c->N * c->H * c->W * c->C, nw = c->K * c->C * c->R * c->S, ny = c->N * P * Q * c->K;
    uint8_t *x = kt_xmalloc((size_t)nx), *yu = kt_xmalloc((size_t)ny), *yu0 = kt_xmalloc((size_t)ny);
    uint8_t *yl = kt_xmalloc((size_t)ny), *lut = kt_xmalloc((size_t)c->K * 256);
    for (int64_t i = 0; i < c->K * 256; i++) lut[i] = (uint8_t)(i * 7 + i / 256);
    int8_t *w = kt_xmalloc((size_t)nw);
    int64_t *ref = kt_xmalloc((size_t)ny * sizeof(int64_t));
    int32_t *y32 = kt_xmalloc((size_t)ny * sizeof(int32_t));
    float *bscale = kt_xmalloc((size_t)c->K * sizeof(float));
    uint64_t s = 12345 + (uint64_t)c->C;
    for (int64_t i = 0; i < nx; i++) x[i] = c->fill ? 255 : (uint8_t)(kt_next(&s) >> 56);
    for (int64_t i = 0; i < nw; i++) w[i] = c->fill ? -128 : (int8_t)(kt_next(&s) >> 56);
    for (int64_t k = 0; k < c->K; k++) bscale[k] = 0.001f * (float)(1 + k % 7);
    KT_CHECK(aie_conv2d_u8s8_naive(&p, x, c->x_zero, w, ref) == AIE_OK, "reference");
    size_t psz = aie_conv2d_s8_packed_size(&p);
    void *packed = kt_xmalloc(psz);
    KT_CHECK(aie_conv2d_s8_pack_weights(&p, w, packed, psz) == AIE_OK, "pack: %s", aie_last_error());
    const float a_scale = 0.02f, y_scale = 0.002f * (float)(c->C * c->R * c->S);
    const int32_t y_zero = 120;
    for (int li = 0; li < nlevels; li++) {
        aie_set_level(levels[li]);
        for (int threads = 1; threads <= 3; threads += 2) {
            const char *ln = aie_level_name(levels[li]);
            size_t wss = aie_conv2d_u8s8_workspace_size(&p, threads);
            void *ws = kt_xmalloc(wss);
            aie_qepilogue q32 = {.out = AIE_QOUT_S32};
            aie_qepilogue qu = {.out = AIE_QOUT_U8, .a_scale = a_scale, .b_scale = bscale, .y_scale = y_scale,
                                .y_zero = y_zero};
            int rc = aie_conv2d_u8s8(&p, x, c->x_zero, packed, y32, &q32, ws, wss, threads);
            KT_CHECK(rc == AIE_OK, "s32 %s: %s", ln, aie_last_error());
            rc = aie_conv2d_u8s8(&p, x, c->x_zero, packed, yu, &qu, ws, wss, threads);
            KT_CHECK(rc == AIE_OK, "u8 %s: %s", ln, aie_last_error());
            aie_qepilogue ql = qu;
            ql.lut_u8 = lut;
            rc = aie_conv2d_u8s8(&p, x, c->x_zero, packed, yl, &ql, ws, wss, threads);
            KT_CHECK(rc == AIE_OK, "u8 lut %s: %s", ln, aie_last_error());
            free(ws);
            int64_t badl = 0;
            for (int64_t i = 0; i < ny; i++) badl += yl[i] != lut[(i % c->K) * 256 + yu[i]];
            KT_CHECK(badl == 0, "conv u8s8 %s C=%lld: %lld bytes differ from lut[k][requantised]", ln,
                     (long long)c->C, (long long)badl);
            int64_t bad32 = 0, badu = 0, diff = 0;
            for (int64_t i = 0; i < ny; i++) {
                int64_t k = i % c->K;
                bad32 += y32[i] != ref[i];
                badu += yu[i] != requant(ref[i], a_scale, bscale[k], y_scale, y_zero);
                if (li > 0 || threads > 1) diff += yu[i] != yu0[i];
            }
            KT_CHECK(bad32 == 0 && badu == 0 && diff == 0,
                     "conv u8s8 %s C=%lld K=%lld %lldx%lld stride %lld x_zero %d fill %d threads %d: %lld int32, "
                     "%lld uint8 wrong, %lld differ from the first level",
                     ln, (long long)c->C, (long long)c->K, (long long)c->R, (long long)c->S, (long long)c->sh,
                     (int)c->x_zero, c->fill, threads, (long long)bad32, (long long)badu, (long long)diff);
            if (li == 0 && threads == 1) memcpy(yu0, yu, (size_t)ny);
        }
    }
    free(x), free(yu), free(yu0), free(yl), free(lut), free(w), free(ref), free(y32), free(bscale), free(packed);
}

static void test_bad_arguments(void) {
    aie_conv2d_params p = {.N = 1, .H = 4, .W = 4, .C = 4, .K = 4, .R = 3, .S = 3, .stride_h = 1, .stride_w = 1,
                           .dil_h = 1, .dil_w = 1, .pad_top = 1, .pad_left = 1, .pad_bottom = 1, .pad_right = 1,
                           .groups = 2};
    int8_t w[4 * 4 * 9] = {0};
    char packed[1 << 14] __attribute__((aligned(64)));
    uint8_t x[64] = {0}, y[64];
    char ws[1 << 16] __attribute__((aligned(64)));
    aie_qepilogue q = {.out = AIE_QOUT_S32};
    KT_CHECK(aie_conv2d_s8_pack_weights(&p, w, packed, sizeof packed) == AIE_EINVAL, "groups 2 refused");
    KT_CHECK(strstr(aie_last_error(), "groups=2") != NULL, "message names groups: %s", aie_last_error());
    p.groups = 1;
    KT_CHECK(aie_conv2d_s8_pack_weights(&p, w, packed, sizeof packed) == AIE_OK, "%s", aie_last_error());
    KT_CHECK(aie_conv2d_u8s8(&p, x, 256, packed, y, &q, ws, sizeof ws, 1) == AIE_EINVAL, "x_zero 256");
    KT_CHECK(aie_conv2d_u8s8(&p, x, 0, packed, y, &q, ws, 100, 1) == AIE_ENOMEM, "small workspace");
    KT_CHECK(strstr(aie_last_error(), "aie_conv2d_u8s8_workspace_size") != NULL, "%s", aie_last_error());
    p.C = 40000;
    KT_CHECK(aie_conv2d_s8_packed_size(&p) == 0, "R*S*C above the int8 K limit");
}

int main(void) {
    aie_level levels[AIE_LEVEL_COUNT];
    int n = 0;
    for (int l = 0; l < AIE_LEVEL_COUNT; l++)
        if (aie_level_supported((aie_level)l, NULL)) levels[n++] = (aie_level)l;
    for (size_t i = 0; i < NCASES; i++) run_case(levels, n, &CASES[i]);
    test_bad_arguments();
    aie_set_level(levels[n - 1]);
    return kt_report("test_conv_s8");
}
