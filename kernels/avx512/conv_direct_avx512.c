/*
 * Direct NHWC convolution micro-kernels for AVX-512: conv_direct_avx512_wide
 * (14 output pixels x 2 zmm of output channels = 28 accumulators + 2 weight
 * vectors + 1 broadcast: the GEMM's 14x32 tile, so the weights are its packed
 * B panels), _narrow (28 pixels x 1 zmm, for <= 16 output channels) and
 * their half-height variants; the broadcasts read the NHWC input in place.
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
static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
#define act_row aie_act_row_avx512

#define CD_MR 14
#define CD_NV 2
#define CD_NAME conv_direct_avx512
#define CD_TABLE aie_conv_direct_avx512

#include "conv_direct_body.h"
