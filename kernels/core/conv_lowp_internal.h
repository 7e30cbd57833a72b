/*
 * bf16 convolution internals shared by its driver (core/conv_lowp.c), the
 * dispatch table (core/kernel_table.c) and the per-level conversions
 * (scalar/conv_lowp_scalar.c, avx512_bf16/conv_bf16_avx512_bf16.c).
 *
 * The driver converts im2col runs of x to bf16 straight into the bf16 GEMM's
 * A strips (layouts in gemm_lowp_internal.h); the conversion is the only
 * per-level code it adds to the GEMM's micro-kernels.
 */
#ifndef AIE_CONV_LOWP_INTERNAL_H
#define AIE_CONV_LOWP_INTERNAL_H

#include "aie_conv_lowp.h"
#include "gemm_lowp_internal.h"

/* dst[i] = src[i] rounded to bf16, nearest even, for i < n (any n >= 0, no
 * alignment): aie_f32_to_bf16's bits for every finite normal value and NaN
 * (the AVX-512 BF16 one reads fp32 denormals as zero, as that level's
 * products treat bf16 denormals). */
typedef void (*aie_bf16_cvt_fn)(const float *src, aie_bf16 *dst, int64_t n);

void aie_bf16_cvt_portable(const float *src, aie_bf16 *dst, int64_t n);
#ifdef AIE_HAVE_X86
void aie_bf16_cvt_avx512_bf16(const float *src, aie_bf16 *dst, int64_t n);
#endif

#endif /* AIE_CONV_LOWP_INTERNAL_H */
