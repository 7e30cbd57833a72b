/* Naive int8 convolution for the C tests: the aie_conv_s8.h sum as nested
 * loops in int64 over NHWC u8 x and OIHW s8 w, padding taps skipped (they
 * are x_zero - x_zero = 0 by the contract). */
#include "conv_s8_ref.h"

int aie_conv2d_u8s8_naive(const aie_conv2d_params *p, const uint8_t *x, int32_t x_zero, const int8_t *w,
                          int64_t *acc) {
    int64_t P, Q;
    if (aie_conv2d_output_shape(p, &P, &Q) != AIE_OK || p->groups != 1) return AIE_EINVAL;
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t oh = 0; oh < P; oh++)
            for (int64_t ow = 0; ow < Q; ow++)
                for (int64_t k = 0; k < p->K; k++) {
                    int64_t sum = 0;
                    for (int64_t c = 0; c < p->C; c++)
                        for (int64_t r = 0; r < p->R; r++)
                            for (int64_t s = 0; s < p->S; s++) {
                                int64_t ih = oh * p->stride_h - p->pad_top + r * p->dil_h;
                                int64_t iw = ow * p->stride_w - p->pad_left + s * p->dil_w;
                                if (ih < 0 || ih >= p->H || iw < 0 || iw >= p->W) continue;
                                int64_t xv = x[((n * p->H + ih) * p->W + iw) * p->C + c];
                                sum += (xv - x_zero) * w[((k * p->C + c) * p->R + r) * p->S + s];
                            }
                    acc[((n * P + oh) * Q + ow) * p->K + k] = sum;
                }
    return AIE_OK;
}
