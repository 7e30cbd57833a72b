/*
 * Direct NHWC convolution micro-kernels for AVX2 + FMA: conv_direct_avx2_wide
 * (6 output pixels x 2 ymm = 12 accumulators + 2 weight vectors + 1 broadcast
 * of the 16 registers: the GEMM's 6x16 tile and its packed B panels),
 * _narrow (12 pixels x 1 ymm, for <= 8 output channels) and half heights.
 * Called only when aie_selected_isa() == AIE_ISA_AVX2.
 */
#include <immintrin.h>

#include "act_avx2.h"

typedef __m256 vf;
#define VL 8

/* lanes(n): the first n of 8 lanes set, read from a sliding window. */
static const int32_t k_lane_window[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
static inline __m256i lanes(int n) { return _mm256_loadu_si256((const __m256i *)(k_lane_window + 8 - n)); }
static inline vf vf_zero(void) { return _mm256_setzero_ps(); }
static inline vf vf_set1(float x) { return _mm256_set1_ps(x); }
static inline vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline vf vf_loadn(const float *p, int n) { return _mm256_maskload_ps(p, lanes(n)); }
static inline void vf_store(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline void vf_storen(float *p, vf v, int n) { _mm256_maskstore_ps(p, lanes(n), v); }
static inline vf vf_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }
#define act_row aie_act_row_avx2

#define CD_MR 6
#define CD_NV 2
#define CD_NAME conv_direct_avx2
#define CD_TABLE aie_conv_direct_avx2

#include "conv_direct_body.h"
