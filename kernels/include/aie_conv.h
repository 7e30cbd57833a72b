/*
 * 2-D convolution and transposed convolution, float32.
 *
 * Layout contract: activations are NHWC (x[n][h][w][c], y[n][p][q][k]).
 * Why NHWC and not NCHW or a blocked layout:
 *   - channels are contiguous, so a 1x1 stride-1 convolution IS a plain GEMM
 *     (M = N*H*W pixels, K = C, N = output channels) over the input buffer
 *     itself: no copy, no re-layout;
 *   - a general convolution's im2col row for one output pixel is R runs of
 *     S*C contiguous floats (one copy per kernel row: the S taps of a row are
 *     neighbours in NHWC), and the GEMM output rows land directly in y;
 *   - depthwise convolution and pooling vectorise over C with unit-stride
 *     loads, and every tap of a window is one vector load per channel block;
 *   - one layout for every op means the runtime never inserts transposes
 *     between layers (the converter transposes the model inputs once).
 *
 * Weights come in ONNX order — Conv: OIHW (K, C/groups, R, S); ConvTranspose:
 * (C, K/groups, R, S) — and are packed once by aie_conv2d_pack_weights /
 * aie_conv_transpose2d_pack_weights into a private layout tagged with the ISA
 * it was packed for (aie_conv2d rejects a mismatch, and a blob packed for
 * other params). The packed blob is position-independent bytes (offsets, no
 * pointers): the converter stores it in the model file and the runtime maps
 * it back at any address. Give it 64-byte alignment for full speed.
 *
 * Algorithms (chosen from the params and the packing, the same for every call):
 *   - weights packed by aie_conv2d_pack_winograd (3x3, stride 1, dilation 1,
 *     groups 1): Winograd F(2x2, 3x3), see below;
 *   - depthwise (groups == C == K > 1): a direct kernel vectorised over
 *     channels, per ISA (3x3 has a register-blocked row kernel);
 *   - groups == 1, R*S*C <= 4608 and output rows of at least half a tile
 *     (7 pixels on AVX-512; a 1x1 stride-1 conv is one row of N*H*W
 *     pixels): a direct kernel that broadcasts the input in place (balanced
 *     tiles of up to MR output pixels of a row x the GEMM's packed weight
 *     panels; only border taps are copied, with zeros for padding);
 *   - other 1x1, stride 1, no padding convs: aie_sgemm_packed straight on x;
 *   - anything else: implicit GEMM, im2col rows packed straight into the
 *     GEMM's A panels; grouped convolution runs one GEMM per group.
 * Epilogue (fused): y = act(conv + bias + residual). `bias` is NULL or K
 * floats; `residual` is NULL or an NHWC tensor shaped like y (it may be y
 * itself — ResNet's Add + Relu in place — but not overlap it otherwise); the
 * activation comes from ep->act/p0/p1 (ep may be NULL; ep->bias must be NULL:
 * the bias is the separate argument). x must not overlap y.
 * Threads: aie_parallel_for over a fixed split; bitwise deterministic for a
 * given (ISA, nthreads). Accuracy: as aie_sgemm, ~R*S*C/groups * 2^-24
 * relative to a float64 reference.
 */
#ifndef AIE_CONV_H
#define AIE_CONV_H

#include <stddef.h>
#include <stdint.h>

#include "aie_gemm.h" /* aie_epilogue */
#include "aie_ops.h"  /* aie_conv2d_params */

#ifdef __cplusplus
extern "C" {
#endif

/* aie_conv2d_params (aie_ops.def): N, H, W, C (input, NHWC), K (output
 * channels), R, S (kernel), stride_h/w, dil_h/w (>= 1), pad_top/left/bottom/
 * right (>= 0), groups (divides C and K), out_pad_h/w (ConvTranspose only). */

/* Output spatial size (P rows, Q cols). AIE_EINVAL, with the reason, on bad
 * params (non-positive stride, groups not dividing C and K, a window larger
 * than the padded input, ...). */
int aie_conv2d_output_shape(const aie_conv2d_params *p, int64_t *P, int64_t *Q);

/* Packed weight size in bytes for the selected ISA (0 on bad params). Only
 * C, K, R, S and groups (and the ISA) shape the packing: N, H, W, strides,
 * pads and dilations may be anything valid. */
size_t aie_conv2d_packed_size(const aie_conv2d_params *p);
/* w_oihw: K x C/groups x R x S floats. Packing may allocate a temporary (it
 * runs at conversion time, not per inference). */
int aie_conv2d_pack_weights(const aie_conv2d_params *p, const float *w_oihw, void *packed, size_t packed_size);

/* Bytes of scratch aie_conv2d needs for these params and thread count
 * (nthreads <= 0: the pool's size). 0 for depthwise and 1x1 stride-1 convs
 * when the GEMM needs none. */
size_t aie_conv2d_workspace_size(const aie_conv2d_params *p, int nthreads);

int aie_conv2d(const aie_conv2d_params *p, const float *x, const void *packed_w, const float *bias,
               const float *residual, const aie_epilogue *ep, float *y, void *workspace,
               size_t workspace_size, int nthreads);

/* MobileNetV2's inverted-residual block in one pass: an optional 1x1
 * expand conv, a depthwise conv (groups == C == K > 1) and a 1x1 project
 * conv on its output (1x1 convs: stride 1, unpadded, groups 1), y =
 * act_pw(pw(act_dw(dw(act_ex(ex(x) + ex_bias)) + dw_bias)) + pw_bias +
 * residual) with the intermediates kept in per-thread scratch (a ring of
 * expanded rows, tiles of depthwise pixels) instead of memory. ex NULL: x
 * is the depthwise conv's input. Each stage: its params, its
 * aie_conv2d_pack_weights blob, bias (NULL or K floats), epilogue (NULL:
 * none; ep->bias must be NULL); each conv's N, H, W, C are the previous
 * one's output. residual: NULL or shaped like y, not overlapping it. y is
 * bitwise what aie_conv2d gives for the convs one by one when the 1x1
 * convs take the direct path (AUTO, C <= 4608 and N*H*W at least half a
 * tile), for any thread count. Workspace: aie_conv2d_dw_pw_workspace_size
 * (0 on bad or mismatched params). */
typedef struct {
    const aie_conv2d_params *p;
    const void *packed;
    const float *bias;
    const aie_epilogue *ep;
} aie_conv_stage;
size_t aie_conv2d_dw_pw_workspace_size(const aie_conv2d_params *ex, const aie_conv2d_params *dw,
                                       const aie_conv2d_params *pw, int nthreads);
int aie_conv2d_dw_pw(const aie_conv_stage *ex, const aie_conv_stage *dw, const aie_conv_stage *pw, const float *x,
                     const float *residual, float *y, void *workspace, size_t workspace_size, int nthreads);

/* Algorithm selection. aie_conv2d picks per call from the params and the
 * selected ISA (AUTO): depthwise direct, the direct NHWC kernel (see the
 * list above: the input is read in place, no im2col packing), 1x1 stride-1
 * GEMM or implicit GEMM. aie_conv2d_set_algo forces GEMM or
 * DIRECT process-wide where the params allow it (tests and benchmarks
 * compare the paths); it returns the previous setting. Not thread-safe
 * against concurrent aie_conv2d calls. aie_conv2d_algo says which path a
 * call with these params takes now (-1 on bad params). */
enum { AIE_CONV_ALGO_AUTO = 0, AIE_CONV_ALGO_GEMM = 1, AIE_CONV_ALGO_DIRECT = 2, AIE_CONV_ALGO_DEPTHWISE = 3 };
int aie_conv2d_set_algo(int algo);
int aie_conv2d_algo(const aie_conv2d_params *p);

/* Winograd F(2x2, 3x3): for 3x3, stride-1, dilation-1, ungrouped convs,
 * weights packed by aie_conv2d_pack_winograd (16 transformed C x K
 * matrices: 16/9 of the GEMM packing's bytes) make aie_conv2d compute each
 * 2x2 output block from 16 instead of 36 products per (c, k) pair: 2.25x
 * fewer multiply-adds. The blob decides: aie_conv2d takes the Winograd path
 * for such weights (and rejects params it cannot serve) and the other paths
 * for aie_conv2d_pack_weights blobs; aie_conv2d_workspace_size covers both.
 * aie_conv2d_winograd_wins: 1 when Winograd is the faster choice for these
 * params on the selected ISA (0 on bad params); with H = W = 0 ("spatial
 * size not known yet", e.g. a converter packing ahead of any input) it
 * decides from C and K alone. Accuracy: within the bound documented above
 * for the other paths (the transforms only add; weights transform in double). */
int aie_conv2d_winograd_wins(const aie_conv2d_params *p);
size_t aie_conv2d_winograd_packed_size(const aie_conv2d_params *p);
int aie_conv2d_pack_winograd(const aie_conv2d_params *p, const float *w_oihw, void *packed, size_t packed_size);

/* ConvTranspose 2-D (ONNX semantics, explicit pads): output
 *   P = stride_h*(H-1) + out_pad_h + (R-1)*dil_h + 1 - pad_top - pad_bottom
 * (Q likewise). Weights (C, K/groups, R, S). Computed per image as a GEMM
 * (x times the packed weights, into a H*W x R*S*K scratch) and a gather;
 * the scratch comes from the workspace. Deterministic for any thread count. */
int aie_conv_transpose2d_output_shape(const aie_conv2d_params *p, int64_t *P, int64_t *Q);
size_t aie_conv_transpose2d_packed_size(const aie_conv2d_params *p);
int aie_conv_transpose2d_pack_weights(const aie_conv2d_params *p, const float *w_ckrs, void *packed,
                                      size_t packed_size);
size_t aie_conv_transpose2d_workspace_size(const aie_conv2d_params *p, int nthreads);
int aie_conv_transpose2d(const aie_conv2d_params *p, const float *x, const void *packed_w, const float *bias,
                         const aie_epilogue *ep, float *y, void *workspace, size_t workspace_size, int nthreads);

#ifdef __cplusplus
}
#endif
#endif /* AIE_CONV_H */
