/* Resize: hand-checked nearest/linear cases, and NCHW == NHWC. */
#include "aie_kernels.h"
#include "kernel_test.h"

int main(void) {
    /* 1x1x2x2 -> 4x4, asymmetric nearest floor: each pixel repeated 2x2 */
    float x[4] = {1, 2, 3, 4}, y[16];
    KT_CHECK(aie_resize2d(x, y, AIE_LAYOUT_NCHW, 1, 1, 2, 2, 4, 4, 2.0, 2.0, AIE_RESIZE_NEAREST, AIE_COORD_ASYMMETRIC,
                          AIE_NEAREST_FLOOR, 1) == AIE_OK, "%s", aie_last_error());
    KT_CHECK(y[0] == 1 && y[1] == 1 && y[2] == 2 && y[5] == 1 && y[10] == 4 && y[15] == 4, "nearest 2x");
    /* align_corners linear 2 -> 3 along w: midpoint is the mean */
    float r[3];
    KT_CHECK(aie_resize2d(x, r, AIE_LAYOUT_NCHW, 1, 1, 1, 2, 1, 3, 1.0, 1.5, AIE_RESIZE_LINEAR,
                          AIE_COORD_ALIGN_CORNERS, 0, 1) == AIE_OK, "%s", aie_last_error());
    KT_CHECK(r[0] == 1 && r[1] == 1.5f && r[2] == 2, "align_corners linear: %g %g %g", r[0], r[1], r[2]);
    /* NCHW and NHWC agree on a random 2x3x5x7 -> 2x3x9x4 half_pixel linear */
    enum { N = 2, C = 3, H = 5, W = 7, OH = 9, OW = 4 };
    float a[N * C * H * W], b[N * H * W * C], ya[N * C * OH * OW], yb[N * OH * OW * C];
    kt_fill(a, sizeof a / 4, 4);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < H * W; i++) b[(n * H * W + i) * C + c] = a[(n * C + c) * H * W + i];
    for (int mode = 0; mode < 2; mode++) {
        aie_resize2d(a, ya, AIE_LAYOUT_NCHW, N, C, H, W, OH, OW, 9.0 / 5, 4.0 / 7, mode, AIE_COORD_HALF_PIXEL, 0, 2);
        aie_resize2d(b, yb, AIE_LAYOUT_NHWC, N, C, H, W, OH, OW, 9.0 / 5, 4.0 / 7, mode, AIE_COORD_HALF_PIXEL, 0, 1);
        int bad = 0;
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++)
                for (int i = 0; i < OH * OW; i++) bad += ya[(n * C + c) * OH * OW + i] != yb[(n * OH * OW + i) * C + c];
        KT_CHECK(bad == 0, "mode %d: NCHW and NHWC differ in %d elements", mode, bad);
    }
    KT_CHECK(aie_resize2d(x, y, 7, 1, 1, 2, 2, 4, 4, 2, 2, 0, 0, 0, 1) == AIE_EINVAL, "bad layout accepted");
    return kt_report("test_resize");
}
