/*
 * int8 depthwise convolution tests: aie_conv2d_u8s8_depthwise at every level
 * this CPU runs (aie_set_level), 1 and 3 threads, against a naive int64
 * reference here: int32 sums bit-exact, U8 outputs (with an int32 bias) equal
 * to the requantisation formula of aie_gemm_lowp.h and byte-identical across
 * levels. Channel counts around the 64-channel block (tails), padding with
 * non-zero zero points, strides, dilations, saturation (255 x -128 over 7x7);
 * then the error codes of bad arguments.
 */
#include <math.h>
#include <string.h>

#include "aie_kernels.h"
#include "kernel_test.h"

typedef struct {
    int64_t N, H, W, C, R, S, sh, sw, dh, dw, pt, pl, pb, pr;
    int32_t x_zero;
    int fill; /* 0 random, 1 saturating: x = 255, w = -128 */
} dw_case;

static const dw_case CASES[] = {
    {1, 5, 7, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 128, 0},
    {2, 9, 8, 67, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 7, 0},    /* a 64-channel block and a tail of 3 */
    {1, 6, 6, 64, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 255, 0},  /* one full block, 1x1 */
    {1, 9, 9, 130, 3, 2, 1, 2, 2, 1, 2, 0, 1, 3, 200, 0}, /* dilation, uneven pads */
    {1, 11, 10, 20, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3, 0, 1},  /* saturation: 49 x 255 x -128 */
};
#define NCASES (sizeof CASES / sizeof CASES[0])

static void naive(const aie_conv2d_params *p, int64_t P, int64_t Q, const uint8_t *x, int32_t zx, const int8_t *w,
                  int64_t *acc) {
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t oh = 0; oh < P; oh++)
            for (int64_t ow = 0; ow < Q; ow++)
                for (int64_t c = 0; c < p->C; c++) {
                    int64_t sum = 0;
                    for (int64_t r = 0; r < p->R; r++)
                        for (int64_t s = 0; s < p->S; s++) {
                            int64_t ih = oh * p->stride_h - p->pad_top + r * p->dil_h;
                            int64_t iw = ow * p->stride_w - p->pad_left + s * p->dil_w;
                            int64_t v = (ih < 0 || ih >= p->H || iw < 0 || iw >= p->W)
                                            ? 0
                                            : (int64_t)x[((n * p->H + ih) * p->W + iw) * p->C + c] - zx;
                            sum += v * w[(r * p->S + s) * p->C + c];
                        }
                    acc[((n * P + oh) * Q + ow) * p->C + c] = sum;
                }
}

static uint8_t requant(int64_t acc, float a_scale, float b_scale, float y_scale, int32_t y_zero) {
    float m = a_scale * b_scale / y_scale;
    float r = nearbyintf((float)(int32_t)acc * m) + (float)y_zero;
    return (uint8_t)(r < 0.f ? 0.f : r > 255.f ? 255.f : r);
}

static void run_case(const aie_level *levels, int nlevels, const dw_case *c) {
    aie_conv2d_params p = {.N = c->N, .H = c->H, .W = c->W, .C = c->C, .K = c->C, .R = c->R, .S = c->S,
                           .stride_h = c->sh, .stride_w = c->sw, .dil_h = c->dh, .dil_w = c->dw, .pad_top = c->pt,
                           .pad_left = c->pl, .pad_bottom = c->pb, .pad_right = c->pr, .groups = c->C};
    int64_t P, Q;
    KT_CHECK(aie_conv2d_output_shape(&p, &P, &Q) == AIE_OK, "shape");
    const int64_t nx = c->N * c->H * c->W * c->C, nw = c->C * c->R * c->S, ny = c->N * P * Q * c->C;
    uint8_t *x = kt_xmalloc((size_t)nx), *yu = kt_xmalloc((size_t)ny), *yu0 = kt_xmalloc((size_t)ny);
    int8_t *w = kt_xmalloc((size_t)nw);
    int64_t *ref = kt_xmalloc((size_t)ny * sizeof(int64_t));
    int32_t *y32 = kt_xmalloc((size_t)ny * sizeof(int32_t)), *bias = kt_xmalloc((size_t)c->C * sizeof(int32_t));
    float *bscale = kt_xmalloc((size_t)c->C * sizeof(float));
    uint64_t s = 777 + (uint64_t)c->C;
    for (int64_t i = 0; i < nx; i++) x[i] = c->fill ? 255 : (uint8_t)(kt_next(&s) >> 56);
    for (int64_t i = 0; i < nw; i++) w[i] = c->fill ? -128 : (int8_t)(kt_next(&s) >> 56);
    for (int64_t k = 0; k < c->C; k++) {
        bscale[k] = 0.001f * (float)(1 + k % 7);
        bias[k] = (int32_t)(kt_next(&s) >> 52) - 2048;
    }
    naive(&p, P, Q, x, c->x_zero, w, ref);
    const float a_scale = 0.02f, y_scale = 0.05f * (float)(c->R * c->S);
    const int32_t y_zero = 120;
    for (int li = 0; li < nlevels; li++) {
        aie_set_level(levels[li]);
        for (int threads = 1; threads <= 3; threads += 2) {
            const char *ln = aie_level_name(levels[li]);
            size_t wss = aie_conv2d_u8s8_depthwise_workspace_size(&p);
            void *ws = kt_xmalloc(wss);
            aie_qepilogue q32 = {.out = AIE_QOUT_S32};
            aie_qepilogue qu = {.out = AIE_QOUT_U8, .a_scale = a_scale, .b_scale = bscale, .y_scale = y_scale,
                                .y_zero = y_zero, .bias_s32 = bias};
            int rc = aie_conv2d_u8s8_depthwise(&p, x, c->x_zero, w, y32, &q32, ws, wss, threads);
            KT_CHECK(rc == AIE_OK, "s32 %s: %s", ln, aie_last_error());
            rc = aie_conv2d_u8s8_depthwise(&p, x, c->x_zero, w, yu, &qu, ws, wss, threads);
            KT_CHECK(rc == AIE_OK, "u8 %s: %s", ln, aie_last_error());
            free(ws);
            int64_t bad32 = 0, badu = 0, diff = 0;
            for (int64_t i = 0; i < ny; i++) {
                int64_t k = i % c->C;
                bad32 += y32[i] != ref[i];
                badu += yu[i] != requant(ref[i] + bias[k], a_scale, bscale[k], y_scale, y_zero);
                if (li > 0 || threads > 1) diff += yu[i] != yu0[i];
            }
            KT_CHECK(bad32 == 0 && badu == 0 && diff == 0,
                     "depthwise u8s8 %s C=%lld %lldx%lld stride %lld x_zero %d fill %d threads %d: %lld int32, "
                     "%lld uint8 wrong, %lld differ from the first level",
                     ln, (long long)c->C, (long long)c->R, (long long)c->S, (long long)c->sh, (int)c->x_zero,
                     c->fill, threads, (long long)bad32, (long long)badu, (long long)diff);
            if (li == 0 && threads == 1) memcpy(yu0, yu, (size_t)ny);
        }
    }
    free(x), free(yu), free(yu0), free(w), free(ref), free(y32), free(bias), free(bscale);
}

static void test_bad_arguments(void) {
    aie_conv2d_params p = {.N = 1, .H = 4, .W = 4, .C = 4, .K = 4, .R = 3, .S = 3, .stride_h = 1, .stride_w = 1,
                           .dil_h = 1, .dil_w = 1, .pad_top = 1, .pad_left = 1, .pad_bottom = 1, .pad_right = 1,
                           .groups = 2};
    int8_t w[4 * 9] = {0};
    uint8_t x[64] = {0}, y[64 * 4];
    char ws[1 << 12] __attribute__((aligned(64)));
    aie_qepilogue q = {.out = AIE_QOUT_S32}, qf = {.out = AIE_QOUT_F32};
    KT_CHECK(aie_conv2d_u8s8_depthwise(&p, x, 0, w, y, &q, ws, sizeof ws, 1) == AIE_EINVAL, "groups 2 refused");
    KT_CHECK(strstr(aie_last_error(), "groups == C == K") != NULL, "message: %s", aie_last_error());
    p.groups = 4;
    KT_CHECK(aie_conv2d_u8s8_depthwise(&p, x, 0, w, y, &q, ws, sizeof ws, 1) == AIE_OK, "%s", aie_last_error());
    KT_CHECK(aie_conv2d_u8s8_depthwise(&p, x, 256, w, y, &q, ws, sizeof ws, 1) == AIE_EINVAL, "x_zero 256");
    KT_CHECK(aie_conv2d_u8s8_depthwise(&p, x, 0, w, y, &qf, ws, sizeof ws, 1) == AIE_EINVAL, "no F32 output");
    KT_CHECK(aie_conv2d_u8s8_depthwise(&p, x, 0, w, y, &q, ws, 8, 1) == AIE_ENOMEM, "small workspace");
    KT_CHECK(strstr(aie_last_error(), "aie_conv2d_u8s8_depthwise_workspace_size") != NULL, "%s", aie_last_error());
}

int main(void) {
    aie_level levels[AIE_LEVEL_COUNT];
    int n = 0;
    for (int l = 0; l < AIE_LEVEL_COUNT; l++)
        if (aie_level_supported((aie_level)l, NULL)) levels[n++] = (aie_level)l;
    for (size_t i = 0; i < NCASES; i++) run_case(levels, n, &CASES[i]);
    test_bad_arguments();
    aie_set_level(levels[n - 1]);
    return kt_report("test_conv_s8_depthwise");
}
