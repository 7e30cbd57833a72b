/* Naive int8 convolution reference for the C tests (kernels/ref/conv_s8_ref.c). */
#ifndef AIE_CONV_S8_REF_H
#define AIE_CONV_S8_REF_H

#include <stdint.h>

#include "aie_kernels.h"

/* The aie_conv2d_u8s8 sum (aie_conv_s8.h) in int64, NHWC x, OIHW w,
 * groups 1: acc is N x P x Q x K. */
int aie_conv2d_u8s8_naive(const aie_conv2d_params *p, const uint8_t *x, int32_t x_zero, const int8_t *w,
                          int64_t *acc);

#endif /* AIE_CONV_S8_REF_H */
