/*
 * int8 GEMM micro-kernel for AVX512_VNNI: avx512_vnni_s8_32x32, the body of
 * core/gemm_s8_vnni_body.h on zmm: 8 x 32 register blocks, 16 accumulators.
 * Called only at levels avx512_vnni and avx512_bf16.
 */
#include <immintrin.h>

#include <stdint.h>

typedef __m512i vi;
#define VL 16
static inline vi vi_zero(void) { return _mm512_setzero_si512(); }
static inline vi vi_load(const void *p) { return _mm512_loadu_si512(p); }
static inline void vi_store(void *p, vi x) { _mm512_storeu_si512(p, x); }
static inline vi vi_set1(int32_t x) { return _mm512_set1_epi32(x); }
static inline vi vi_dpbusd(vi c, vi a, vi b) { return _mm512_dpbusd_epi32(c, a, b); }

#define VNNI_RB 8
#define VNNI_UKERNEL ukernel_avx512_vnni_s8_32x32
#define VNNI_TABLE aie_lowp_s8_avx512_vnni
#define VNNI_NAME "avx512_vnni_s8_32x32"

#include "gemm_s8_vnni_body.h"
