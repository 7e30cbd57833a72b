/*
 * The vector vocabulary (vf_*) of the AVX-512 micro-kernels, shared by the
 * GEMM and the direct convolution so both speak one set of primitives.
 * Include only from objects compiled with the matching ISA flags.
 */
#ifndef AIE_VF_AVX512_H
#define AIE_VF_AVX512_H

#include <immintrin.h>

#include <stdint.h>

typedef __m512 vf;
typedef __mmask16 vm; /* lane mask: bits set where a comparison holds */
#define VL 16
#define VF_MASK_FREE 1 /* masked loads/stores cost what full ones do */

static inline __mmask16 lanes(int n) { return (__mmask16)((1u << n) - 1u); } /* n <= 16 */
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

/* The rest serves vmath_fn.h (the operations of vf_scalar.h, lane-wise). */
static inline vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vf_fma_rn(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vf_neg(vf a) { return _mm512_xor_ps(a, _mm512_set1_ps(-0.0f)); }
static inline vf vf_abs(vf a) { return _mm512_andnot_ps(_mm512_set1_ps(-0.0f), a); }
static inline vf vf_copysign(vf mag, vf s) {
    __m512 sign = _mm512_set1_ps(-0.0f);
    return _mm512_or_ps(_mm512_andnot_ps(sign, mag), _mm512_and_ps(sign, s));
}
static inline vf vf_sqrt(vf a) { return _mm512_sqrt_ps(a); }
static inline vf vf_floor(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
static inline vf vf_ceil(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
static inline vf vf_round(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vm vf_lt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline vm vf_le(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
static inline vm vf_gt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
static inline vm vf_eq(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
static inline vm vf_isnan(vf a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
static inline vm vm_and(vm a, vm b) { return (vm)(a & b); }
static inline vm vm_or(vm a, vm b) { return (vm)(a | b); }
static inline int vm_any(vm m) { return m != 0; }
static inline vf vf_sel(vm m, vf a, vf b) { return _mm512_mask_blend_ps(m, b, a); }
/* e * 2^n for integral n: VSCALEFPS rounds once, as e * 2^(n/2) * 2^(n - n/2)
 * did (for vmf_exp's n in [-150, 128] the first product stays normal), in 2
 * uops instead of 11 -- exp is on the path of every sigmoid/SiLU epilogue.
 * A NaN n gives NaN; vmf_exp replaces that lane with its NaN input anyway. */
static inline vf vf_scale2n(vf e, vf n) { return _mm512_scalef_ps(e, n); }
static inline vf vf_frexp(vf x, vf *e) {
    __m512i b = _mm512_castps_si512(x);
    *e = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(b, 23), _mm512_set1_epi32(126)));
    b = _mm512_or_si512(_mm512_and_si512(b, _mm512_set1_epi32(0x007fffff)), _mm512_set1_epi32(0x3f000000));
    return _mm512_castsi512_ps(b);
}

#include "vmath_fn.h"

#endif
