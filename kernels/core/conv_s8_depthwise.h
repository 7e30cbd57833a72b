/* Internal: the int8 depthwise convolution (aie_conv_s8.h,
 * aie_conv2d_u8s8_depthwise) row kernels, one per vector ISA (scalar/,
 * avx2/, avx512/: core/conv_s8_depthwise_body.h compiled with each ISA's
 * flags), picked through the dispatch table (kernel_table.h). */
#ifndef AIE_CONV_S8_DEPTHWISE_H
#define AIE_CONV_S8_DEPTHWISE_H

#include <stdint.h>

#include "aie_conv.h"

/* One call computes output rows [row0, row1) of the flattened (n, p) range.
 * w: R*S x C int8 (tap-major, channel-contiguous). out: AIE_QOUT_U8 (m[c] =
 * x_scale * w_scale[c] / y_scale, bias int32 or NULL) or AIE_QOUT_S32. */
/* R * S at most: the row kernels list a pixel's taps on the stack. */
#define AIE_DWS8_MAX_TAPS 64

typedef struct {
    const aie_conv2d_params *p;
    int64_t P, Q;
    const uint8_t *x;
    int32_t x_zero, y_zero, out;
    const int8_t *w;
    const int32_t *bias;
    const float *m;
    void *y;
} aie_dwconv_s8_args;

typedef void aie_dwconv_s8_fn(const aie_dwconv_s8_args *a, int64_t row0, int64_t row1);
aie_dwconv_s8_fn aie_dwconv_s8_rows_scalar, aie_dwconv_s8_rows_avx2, aie_dwconv_s8_rows_avx512;

#endif /* AIE_CONV_S8_DEPTHWISE_H */
