/*
 * Direct NHWC convolution micro-kernels, portable C: conv_direct_scalar_wide
 * (4 pixels x 16 channels: the GEMM's scalar tile and packed B panels),
 * _narrow (8 x 8) and half heights. The reference the SIMD
 * variants are tested against and the path without AVX2. Plain float
 * arithmetic, no contraction (ISO C mode).
 */
#include "vf_scalar.h"

#define CD_MR 4
#define CD_NV 16
#define CD_NAME conv_direct_scalar
#define CD_TABLE aie_conv_direct_scalar

#include "conv_direct_body.h"
