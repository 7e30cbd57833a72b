/* Internal: the Winograd F(2x2, 3x3) path of aie_conv2d (conv_winograd.c). */
#ifndef AIE_CONV_WINOGRAD_H
#define AIE_CONV_WINOGRAD_H

#include "aie_conv.h"

/* aie_conv2d_winograd_wins wants at least this many 2x2 output tiles per
 * image (12x12 output pixels): see the measurements there. */
#define AIE_CONV_WINOGRAD_MIN_TILES 36

/* 3x3, stride 1, dilation 1, groups 1, on an ISA whose direct-conv tile
 * kernels can run the 16 products (the kernel panel width = the GEMM's NR). */
int aie_conv_winograd_possible(const aie_conv2d_params *p);
size_t aie_conv_winograd_workspace(const aie_conv2d_params *p, int nthreads);
/* body: the 16 packed transformed-weight matrices, xi_bytes apart. */
int aie_conv_winograd_run(const aie_conv2d_params *p, int64_t P, int64_t Q, const float *x, const char *body,
                          uint64_t xi_bytes, const float *bias, const float *residual, const aie_epilogue *ep,
                          float *y, void *workspace, size_t workspace_size, int nthreads);
/* Pack w (K x C x 3 x 3) as U_xi = (G g G^T)[xi], each a C x K aie_sgemm_pack_b
 * blob xi_bytes apart, into body. */
int aie_conv_winograd_pack(const aie_conv2d_params *p, const float *w, char *body, uint64_t xi_bytes);
uint64_t aie_conv_winograd_xi_bytes(const aie_conv2d_params *p);

#endif
