/* Depthwise convolution, portable reference (groups == C == K, NHWC).
 * Per output pixel and channel: acc = bias; acc += x_tap * w_tap for each tap
 * inside the input, in (r, s) order; then + residual and the activation. The
 * SIMD variants keep this order per channel (they may fuse the multiply-add).
 * Channels go in blocks through a local accumulator so that `residual` may
 * alias `y` (read before the block is stored). */
#include "conv_kernels.h"

#define DW_BLOCK 64

void aie_dwconv_rows_scalar(const aie_dwconv_args *a, int64_t row0, int64_t row1) {
    const aie_conv2d_params *p = a->p;
    const int64_t C = p->C;
    const aie_epilogue *ep = a->ep;
    float acc[DW_BLOCK];
    for (int64_t row = row0; row < row1; row++) {
        const int64_t n = row / a->P, pp = row % a->P;
        for (int64_t q = 0; q < a->Q; q++) {
            const int64_t o = (row * a->Q + q) * C;
            for (int64_t c0 = 0; c0 < C; c0 += DW_BLOCK) {
                const int64_t nc = C - c0 < DW_BLOCK ? C - c0 : DW_BLOCK;
                for (int64_t c = 0; c < nc; c++) acc[c] = a->bias ? a->bias[c0 + c] : 0.f;
                for (int64_t r = 0; r < p->R; r++) {
                    const int64_t h = pp * p->stride_h - p->pad_top + r * p->dil_h;
                    if (h < 0 || h >= p->H) continue;
                    for (int64_t s = 0; s < p->S; s++) {
                        const int64_t w = q * p->stride_w - p->pad_left + s * p->dil_w;
                        if (w < 0 || w >= p->W) continue;
                        const float *xin = a->x + ((n * p->H + h) * p->W + w) * C + c0;
                        const float *wt = a->w + (r * p->S + s) * C + c0;
                        for (int64_t c = 0; c < nc; c++) acc[c] += xin[c] * wt[c];
                    }
                }
                aie_act_row_scalar(acc, a->residual ? a->residual + o + c0 : NULL, nc, ep);
                for (int64_t c = 0; c < nc; c++) a->y[o + c0 + c] = acc[c];
            }
        }
    }
}
