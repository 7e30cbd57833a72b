/*
 * Direct NHWC convolution micro-kernels for AVX-512: conv_direct_avx512_wide
 * (14 output pixels x 2 zmm of output channels = 28 accumulators + 2 weight
 * vectors + 1 broadcast: the GEMM's 14x32 tile, so the weights are its packed
 * B panels), _narrow (28 pixels x 1 zmm, for <= 16 output channels) and
 * their half-height variants; the broadcasts read the NHWC input in place.
 * Called only when aie_selected_isa() == AIE_ISA_AVX512.
 */
#include "vf_avx512.h"

#define CD_MR 14
#define CD_NV 2
#define CD_NAME conv_direct_avx512
#define CD_TABLE aie_conv_direct_avx512

#include "conv_direct_body.h"
