/*
 * The vector vocabulary (vf_*) of the AVX-512 micro-kernels, shared by the
 * GEMM and the direct convolution so both speak one set of primitives.
 * Include only from objects compiled with the matching ISA flags.
 */
#ifndef AIE_VF_AVX512_H
#define AIE_VF_AVX512_H

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
static inline vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline float vf_hsum(vf v) { return _mm512_reduce_add_ps(v); }
#define act_row aie_act_row_avx512

#endif
