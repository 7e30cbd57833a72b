/*
 * 2-D convolution in bf16 with fp32 accumulation, on the bf16 GEMM's
 * micro-kernels (AMX tiles, AVX-512 BF16, portable; aie_gemm_lowp.h), chosen
 * by the selected level (aie_selected_level, AIE_ISA).
 *
 * Layout: as aie_conv2d (aie_conv.h): x is NHWC fp32, y is NHWC fp32, the
 * weights come in ONNX order (K x C x R x S) and are packed once by
 * aie_conv2d_bf16_pack_weights: rounded to bf16 (nearest even) into the bf16
 * GEMM's B layout (rows (r, s, c), the im2col order; columns k). That layout
 * is the same on every path, so a blob packed on an AMX host runs on any
 * other (no ISA tag, unlike the fp32 blobs). groups must be 1: grouped and
 * depthwise convolutions stay fp32 (aie_conv2d), where they are memory-
 * rather than multiply-bound anyway.
 *
 * Algorithm: one implicit GEMM, M = N*P*Q output pixels x N = K channels x
 * depth R*S*C. Each task writes its rows of the im2col matrix in bf16
 * straight into the micro-kernels' A strips (no full im2col buffer), then
 * runs the 32 x 32 blocks against the packed weights. A conv with several
 * taps first converts x once into a zero-padded bf16 image in the workspace
 * (each input is read R*S times: converted once, copied after); a 1x1 conv
 * converts its rows from x directly (stride 1, unpadded: a plain GEMM on x).
 * Threads split the output as the bf16 GEMM does (aie_gemm_plan_tiles);
 * each element's arithmetic depends only on the level, so results are
 * bitwise equal for any thread count. Every shape runs on one AMX tile
 * configuration (16 rows x 64 bytes): A and B are zero-padded to whole
 * tiles, so M, K (output channels) and R*S*C tails need no other.
 *
 * Epilogue (fused, the fp32 conv's order): y = act((conv + residual) + bias),
 * the activation by the shared vector math (aie_epilogue's act/p0/p1; ep may
 * be NULL; ep->bias must be NULL: the bias is its own argument). residual is
 * NULL or NHWC shaped like y, and may be y itself (ResNet's Add + Relu in
 * place) but must not overlap it otherwise; x must not overlap y.
 *
 * Accuracy against a float64 convolution of the fp32 inputs, before the
 * activation (D = R*S*C, the sum over the window of |x||w|):
 *     |y - ref| <= (2^-8 + (D + 2) * 2^-24) * (D-term sum + |residual| + |bias|)
 * (2^-9 relative rounding of x and w to bf16; products of two bf16 are exact
 * in fp32; D + 2 fp32 additions). Against the float64 convolution of the
 * bf16-rounded inputs the 2^-8 term drops. An activation then adds its own
 * error (exact for relu/clip). The AMX and AVX-512 BF16 paths treat bf16
 * denormals (|v| < 2^-126) as zero, and convert x with VCVTNE2PS2BF16, which
 * also reads fp32 denormals as zero; the portable path keeps them.
 *
 * Workspace: caller-provided, sized by aie_conv2d_bf16_workspace_size;
 * nthreads <= 0 means the pool's size.
 */
#ifndef AIE_CONV_LOWP_H
#define AIE_CONV_LOWP_H

#include <stddef.h>
#include <stdint.h>

#include "aie_gemm.h" /* aie_epilogue */
#include "aie_ops.h"  /* aie_conv2d_params */

#ifdef __cplusplus
extern "C" {
#endif

/* Packed weight size in bytes (0 on bad params, groups != 1 included: the
 * reason is in aie_last_error). Only C, K, R and S shape the packing. */
size_t aie_conv2d_bf16_packed_size(const aie_conv2d_params *p);
/* w_oihw: K x C x R x S floats, rounded to bf16 while packed. */
int aie_conv2d_bf16_pack_weights(const aie_conv2d_params *p, const float *w_oihw, void *packed, size_t packed_size);
/* Scratch bytes aie_conv2d_bf16 needs for these params and nthreads (0 on
 * bad params). */
size_t aie_conv2d_bf16_workspace_size(const aie_conv2d_params *p, int nthreads);
int aie_conv2d_bf16(const aie_conv2d_params *p, const float *x, const void *packed_w, const float *bias,
                    const float *residual, const aie_epilogue *ep, float *y, void *workspace, size_t workspace_size,
                    int nthreads);
/* aie_conv2d_bf16 with some operands in bf16 (uint16 bits) instead of fp32,
 * by the io flags: AIE_CONV_BF16_X, x is NHWC bf16 (copied into the A strips,
 * not converted: the same products as an fp32 x holding those values);
 * AIE_CONV_BF16_RES, the residual is bf16; AIE_CONV_BF16_Y, y is written in
 * bf16, the fp32 result of the epilogue rounded to nearest even (the level's
 * conversion: AVX-512 BF16 and AMX read fp32 denormals as zero), which adds
 * half a bf16 ulp (<= 2^-8 |y|) to the bound above. residual may be y itself when both are
 * bf16 or both fp32. io 0 is aie_conv2d_bf16. Between bf16 convs this
 * halves the activations' bytes and skips a conversion per input read. */
#define AIE_CONV_BF16_X 1
#define AIE_CONV_BF16_Y 2
#define AIE_CONV_BF16_RES 4
int aie_conv2d_bf16_io(const aie_conv2d_params *p, const void *x, const void *packed_w, const float *bias,
                       const void *residual, const aie_epilogue *ep, void *y, void *workspace, size_t workspace_size,
                       int nthreads, int io);
/* The kernel the selected level runs, e.g. "amx_bf16_32x32" (for reports). */
const char *aie_conv2d_bf16_path(void);

#ifdef __cplusplus
}
#endif
#endif /* AIE_CONV_LOWP_H */
