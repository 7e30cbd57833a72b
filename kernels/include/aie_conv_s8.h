/*
 * int8 convolution: u8 NHWC activations with a zero point, s8 weights
 * (symmetric, per output channel scales), int32 sums, and the int8 GEMM's
 * output stage (aie_qepilogue: S32 sums, F32 dequantised + fp32 epilogue, or
 * U8 requantised with QuantizeLinear's rounding). It is the int8 GEMM
 * (aie_gemm_lowp.h) over the im2col matrix, so the same contract holds:
 *
 *   acc[n,p,q][k] = sum_{r,s,c} (x[n, p*sh - pt + r*dh, q*sw - pl + s*dw, c] - x_zero) * w[k][c][r][s]
 *
 * in int32, bit-exact on every path, where a tap in the padding reads
 * x_zero (the quantised value of 0.0, as ONNX QLinearConv pads), so it adds
 * nothing. Needs R*S*C <= AIE_GEMM_S8_MAX_K and groups == 1 (depthwise:
 * aie_conv2d_u8s8_depthwise below; other grouped convs are left to the caller).
 *
 * Weights are OIHW int8, packed once (aie_conv2d_s8_pack_weights) into the
 * int8 GEMM's B layout for the (r, s, c) x k matrix, valid on every level.
 * y is N x P x Q x K (NHWC). 1x1 stride-1 unpadded convs read x as the
 * GEMM's A directly; for the others the GEMM's A packing reads the im2col
 * rows straight from x (no im2col matrix in the workspace).
 */
#ifndef AIE_CONV_S8_H
#define AIE_CONV_S8_H

#include <stddef.h>
#include <stdint.h>

#include "aie_conv.h"
#include "aie_gemm_lowp.h"

#ifdef __cplusplus
extern "C" {
#endif

size_t aie_conv2d_s8_packed_size(const aie_conv2d_params *p);
int aie_conv2d_s8_pack_weights(const aie_conv2d_params *p, const int8_t *w_oihw, void *packed, size_t packed_size);
size_t aie_conv2d_u8s8_workspace_size(const aie_conv2d_params *p, int nthreads);
int aie_conv2d_u8s8(const aie_conv2d_params *p, const uint8_t *x, int32_t x_zero, const void *packed_w, void *y,
                    const aie_qepilogue *q, void *workspace, size_t workspace_size, int nthreads);

/* Depthwise (groups == C == K): w is R x S x C int8 (tap-major, channel
 * contiguous: OIHW's (C, 1, R, S) transposed), x and y NHWC. The same sums
 * (padding taps add nothing) and, for q->out AIE_QOUT_U8, the int8 GEMM's
 * output stage with bias_s32 and b_scale per channel, bit-exact on every
 * level; AIE_QOUT_S32 writes the sums. No F32 output; R*S <= 64. Workspace: the
 * per-channel multipliers, aie_conv2d_u8s8_depthwise_workspace_size bytes. */
size_t aie_conv2d_u8s8_depthwise_workspace_size(const aie_conv2d_params *p);
int aie_conv2d_u8s8_depthwise(const aie_conv2d_params *p, const uint8_t *x, int32_t x_zero, const int8_t *w,
                              void *y, const aie_qepilogue *q, void *workspace, size_t workspace_size,
                              int nthreads);

#ifdef __cplusplus
}
#endif
#endif /* AIE_CONV_S8_H */
