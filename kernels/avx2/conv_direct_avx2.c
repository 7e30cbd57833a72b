/*
 * Direct NHWC convolution micro-kernels for AVX2 + FMA: conv_direct_avx2_wide
 * (6 output pixels x 2 ymm = 12 accumulators + 2 weight vectors + 1 broadcast
 * of the 16 registers: the GEMM's 6x16 tile and its packed B panels),
 * _narrow (12 pixels x 1 ymm, for <= 8 output channels) and half heights.
 * Called only when aie_selected_isa() == AIE_ISA_AVX2.
 */
#include "vf_avx2.h"

#define CD_MR 6
#define CD_NV 2
#define CD_NAME conv_direct_avx2
#define CD_TABLE aie_conv_direct_avx2

#include "conv_direct_body.h"
