/*
 * fp32 -> bf16 conversion of the bf16 convolution's A packing in portable C
 * (contract in core/conv_lowp_internal.h): the levels without AVX-512 BF16.
 */
#include "conv_lowp_internal.h"

void aie_bf16_cvt_portable(const float *src, aie_bf16 *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = aie_f32_to_bf16(src[i]);
}
