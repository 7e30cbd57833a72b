/*
 * SGEMM kernels for AVX2 + FMA: micro-kernel ukernel_avx2_6x16.
 * 6 rows x 2 ymm = 12 accumulators + 2 B vectors + 1 broadcast of the 16
 * registers (the classic Haswell tile). Edge columns use maskload/maskstore.
 * Called only when aie_selected_isa() == AIE_ISA_AVX2.
 */
#include "vf_avx2.h"

#define GEMM_MR 6
#define GEMM_NV 2
#define GEMM_UKERNEL ukernel_avx2_6x16
#define GEMM_SMALL_NV_1 4
#define GEMM_SMALL_NV_2 4
#define GEMM_SMALL_NV_3 3
#define GEMM_SMALL_NV_4 2
#define GEMM_SMALL_NV_5 2
#define GEMM_SMALL_NV_6 2
#define GEMM_SMALL_NV_7 1
#define GEMM_SMALL_NV_8 1
#define GEMM_BT_RB 2
#define GEMM_ACC_BUDGET 12 /* accumulators of the small-M kernel on packed B */
#define GEMM_ISA_ID AIE_ISA_AVX2
#define GEMM_TABLE aie_gemm_kernels_avx2

#include "gemm_kernels_body.h"
