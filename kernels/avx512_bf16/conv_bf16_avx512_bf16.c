/*
 * fp32 -> bf16 conversion of the bf16 convolution's A packing with
 * VCVTNE2PS2BF16 (contract in core/conv_lowp_internal.h): 32 values per
 * instruction, round to nearest even, NaN kept quiet; fp32 denormals read as
 * zero, as this level's and AMX's bf16 products treat bf16 denormals. Called
 * only at levels avx512_bf16 and amx.
 */
#include <immintrin.h>

#include "conv_lowp_internal.h"

void aie_bf16_cvt_avx512_bf16(const float *src, aie_bf16 *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        /* the second operand fills the low half: element order is kept */
        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512(dst + i, (__m512i)v);
    }
    if (i < n) {
        const int64_t left = n - i;
        const __mmask16 lo = (__mmask16)(left >= 16 ? 0xffff : (1u << left) - 1);
        const __mmask16 hi = (__mmask16)(left > 16 ? (1u << (left - 16)) - 1 : 0);
        __m512 a = _mm512_maskz_loadu_ps(lo, src + i), b = _mm512_maskz_loadu_ps(hi, src + i + 16);
        __m512bh v = _mm512_cvtne2ps_pbh(b, a);
        _mm512_mask_storeu_epi16(dst + i, (__mmask32)(((uint64_t)1 << left) - 1), (__m512i)v);
    }
}
