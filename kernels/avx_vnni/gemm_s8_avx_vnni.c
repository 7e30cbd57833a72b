/*
 * int8 GEMM micro-kernel for AVX-VNNI: avx_vnni_s8_32x32, the body of
 * core/gemm_s8_vnni_body.h on ymm (VEX vpdpbusd): 4 x 16 register blocks
 * over the two column halves of a panel, 8 accumulators (16 ymm registers
 * leave no room for a wider block). Called only at level avx_vnni.
 */
#include <immintrin.h>

#include <stdint.h>

typedef __m256i vi;
#define VL 8
static inline vi vi_zero(void) { return _mm256_setzero_si256(); }
static inline vi vi_load(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline void vi_store(void *p, vi x) { _mm256_storeu_si256((__m256i *)p, x); }
static inline vi vi_set1(int32_t x) { return _mm256_set1_epi32(x); }
static inline vi vi_dpbusd(vi c, vi a, vi b) { return _mm256_dpbusd_avx_epi32(c, a, b); }

#define VNNI_RB 4
#define VNNI_UKERNEL ukernel_avx_vnni_s8_32x32
#define VNNI_TABLE aie_lowp_s8_avx_vnni
#define VNNI_NAME "avx_vnni_s8_32x32"

#include "gemm_s8_vnni_body.h"
