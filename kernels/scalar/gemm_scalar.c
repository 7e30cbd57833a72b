/*
 * SGEMM kernels, portable C: micro-kernel ukernel_scalar_4x16. The reference
 * every SIMD path is tested against, and the path on CPUs without AVX2 (and
 * on aarch64). Plain float arithmetic, no contraction (ISO C mode), so the
 * compiler may vectorise it with baseline SSE2/NEON but not change results.
 */
#include "act_scalar.h"

typedef float vf;
#define VL 1

static inline vf vf_zero(void) { return 0.0f; }
static inline vf vf_set1(float x) { return x; }
static inline vf vf_load(const float *p) { return *p; }
static inline vf vf_loadn(const float *p, int n) { return n > 0 ? *p : 0.0f; }
static inline void vf_store(float *p, vf v) { *p = v; }
static inline void vf_storen(float *p, vf v, int n) {
    if (n > 0) *p = v;
}
static inline vf vf_fma(vf a, vf b, vf c) { return a * b + c; }
static inline vf vf_mul(vf a, vf b) { return a * b; }
static inline vf vf_add(vf a, vf b) { return a + b; }
/* x86 min/max semantics (the second operand when either is NaN), in
 * the scalar file too, so every path clamps NaN the same way. */
static inline vf vf_min(vf a, vf b) { return a < b ? a : b; }
static inline vf vf_max(vf a, vf b) { return a > b ? a : b; }
static inline float vf_hsum(vf v) { return v; }
#define act_row aie_act_row_s

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
