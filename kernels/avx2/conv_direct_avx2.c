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
/* Winograd vs direct, interleaved thread-time A/B on Zen 3, 1 thread
 * (winograd / direct): 16->16@80 1.04-1.44, 16->32@40 1.07, 32->32@40/80
 * 0.98-1.25, 32->64 0.91-1.08; from 48 channels Winograd wins: 48->48@40
 * 0.94, 64->32@40 0.87, 64->64 0.78-0.99, 96->64 0.71-0.83. A 6-pixel tile
 * over a 16- or 32-long product spends as much on its set-up and stores as
 * on its FMAs. */
#define CD_WINOGRAD_MIN_C 48
/* 16-wide panels make twice the channel parts of AVX-512's 32 at 2 threads
 * (256->64@20: 4 parts, each transforming the same 56 tiles). Blocks of 12+
 * tiles instead, wall-time A/B at 2 threads on Zen 3 with SiLU (new / old,
 * two runs): 3x3 256->64@20 0.67-0.73, 96->64@40 0.78-0.92, 128->128@20
 * 0.57-0.65, 256->128@10 0.81, 64->64@40 0.75. */
#define CD_WINOGRAD_BLOCK_MIN (2 * CD_MR)

#include "conv_direct_body.h"
