/* Internal: the direct (packing-free) convolution path of aie_conv2d (see
 * conv_direct.c; the micro-kernels' contract is in conv_kernels.h). */
#ifndef AIE_CONV_DIRECT_H
#define AIE_CONV_DIRECT_H

#include "conv_kernels.h"

/* Tap limit of one tile's segment list (on the stack): 7x7 = 49 fits. */
#define AIE_CONV_DIRECT_MAX_TAPS 64
/* The automatic choice takes the direct path up to this many weight rows
 * per output channel (R*S*C; 3x3x512). Measured with benchmarks/bench_conv.py
 * (AVX-512, 1 thread, ratio to onnxruntime, implicit GEMM -> direct): ResNet-18
 * stem 1.73 -> 0.96, 3x3 64@56 1.65 -> 0.97, 128@28 1.27 -> 0.97, 256@14
 * 1.10 -> 1.03, 512@7 1.11 -> 1.06 (weights swept in L2-sized panel blocks);
 * the gain is largest where few output channels share a packed A block. */
#define AIE_CONV_DIRECT_MAX_ROWS 4608

/* The direct kernel can run these params (groups == 1, output rows of at
 * least half a wide tile, at most AIE_CONV_DIRECT_MAX_TAPS taps) under the
 * selected ISA. */
int aie_conv_direct_possible(const aie_conv2d_params *p, int64_t Q);
/* ... and aie_conv2d will use it (the automatic choice or the forced algo). */
int aie_conv_direct_chosen(const aie_conv2d_params *p, int64_t Q);
size_t aie_conv_direct_workspace(const aie_conv2d_params *p, int nthreads);
/* packed_b: group 0's body of an AIE_CONV_PACK_GEMM blob (an aie_sgemm_pack_b
 * blob for the selected ISA). */
int aie_conv_direct_run(const aie_conv2d_params *p, int64_t P, int64_t Q, const float *x, const void *packed_b,
                        const float *bias, const float *residual, const aie_epilogue *ep, float *y, void *workspace,
                        size_t workspace_size, int nthreads);

#endif
