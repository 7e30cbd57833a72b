/*
 * SGEMM kernels, portable C: micro-kernel ukernel_scalar_4x16. The reference
 * every SIMD path is tested against, and the path on CPUs without AVX2 (and
 * on aarch64). Plain float arithmetic, no contraction (ISO C mode), so the
 * compiler may vectorise it with baseline SSE2/NEON but not change results.
 */
#include "vf_scalar.h"

#define GEMM_MR 4
#define GEMM_NV 16
#define GEMM_UKERNEL ukernel_scalar_4x16
#define GEMM_SMALL_NV_1 8
#define GEMM_SMALL_NV_2 8
#define GEMM_SMALL_NV_3 8
#define GEMM_SMALL_NV_4 8
#define GEMM_SMALL_NV_5 4
#define GEMM_SMALL_NV_6 4
#define GEMM_SMALL_NV_7 4
#define GEMM_SMALL_NV_8 4
#define GEMM_BT_RB 2
#define GEMM_ACC_BUDGET 16 /* accumulators of the small-M kernel on packed B */
#define GEMM_ISA_ID AIE_ISA_SCALAR
#define GEMM_TABLE aie_gemm_kernels_scalar

#include "gemm_kernels_body.h"
