/*
 * SGEMM kernels for AVX-512 (F/BW/DQ/VL): micro-kernel ukernel_avx512_14x32.
 * 14 rows x 2 zmm = 28 accumulators + 2 B vectors of the 32 registers; per k
 * step 2 loads and 14 broadcast-FMAs pairs, so the two FMA ports, not the
 * load ports, are the limit. Edge columns use masked loads/stores.
 * Called only when aie_selected_isa() == AIE_ISA_AVX512.
 */
#include <immintrin.h>

#include "act_avx512.h"

typedef __m512 vf;
#define VL 16

static inline __mmask16 lanes(int n) { return (__mmask16)((1u << n) - 1u); }
static inline vf vf_zero(void) { return _mm512_setzero_ps(); }
static inline vf vf_set1(float x) { return _mm512_set1_ps(x); }
static inline vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline vf vf_loadn(const float *p, int n) { return _mm512_maskz_loadu_ps(lanes(n), p); }
static inline void vf_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline void vf_storen(float *p, vf v, int n) { _mm512_mask_storeu_ps(p, lanes(n), v); }
static inline vf vf_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline float vf_hsum(vf v) { return _mm512_reduce_add_ps(v); }
#define act_row aie_act_row_avx512

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
