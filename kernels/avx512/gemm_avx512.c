/*
 * SGEMM kernels for AVX-512 (F/BW/DQ/VL): micro-kernel ukernel_avx512_14x32.
 * 14 rows x 2 zmm = 28 accumulators + 2 B vectors of the 32 registers; per k
 * step 2 loads and 14 broadcast-FMAs pairs, so the two FMA ports, not the
 * load ports, are the limit. Edge columns use masked loads/stores.
 * Called only when aie_selected_isa() == AIE_ISA_AVX512.
 */
#include "vf_avx512.h"

#define GEMM_MR 14
#define GEMM_NV 2
#define GEMM_UKERNEL ukernel_avx512_14x32
/* m rows x NV vectors: 8 independent FMA chains for m = 1 (2 ports x 4 cycles
 * latency), <= 24 accumulators otherwise. */
#define GEMM_SMALL_NV_1 8
#define GEMM_SMALL_NV_2 6
#define GEMM_SMALL_NV_3 4
#define GEMM_SMALL_NV_4 4
#define GEMM_SMALL_NV_5 4
#define GEMM_SMALL_NV_6 3
#define GEMM_SMALL_NV_7 3
#define GEMM_SMALL_NV_8 2
#define GEMM_BT_RB 4
#define GEMM_ISA_ID AIE_ISA_AVX512
#define GEMM_TABLE aie_gemm_kernels_avx512

#include "gemm_kernels_body.h"
