/*
 * bf16 GEMM micro-kernel for AVX512_BF16: avx512_bf16_32x32 (contract and
 * layouts in core/gemm_lowp_internal.h), as four 8 x 32 register blocks:
 * 16 zmm fp32 accumulators, per k-pair 2 B loads and 8 broadcast A pairs
 * into vdpbf16ps (two bf16 products added into fp32; bf16 denormals read as
 * zero). Called only at level avx512_bf16.
 */
#include <immintrin.h>
#include <string.h>

#include "gemm_lowp_internal.h"

#define RB 8 /* rows per register block */

static void ukernel_avx512_bf16_32x32(int64_t kp, const aie_bf16 *pa, int64_t strip_stride, const aie_bf16 *pb,
                                      int m, float *acc, int64_t ldacc, int accumulate) {
    for (int r0 = 0; r0 < (m <= LOWP_STRIP ? m : LOWP_MR); r0 += RB) {
        const aie_bf16 *a = pa + (r0 / LOWP_STRIP) * strip_stride + (r0 % LOWP_STRIP) * LOWP_KCHUNK_BF16;
        __m512 c[RB][2];
#pragma GCC unroll 8
        for (int i = 0; i < RB; i++) {
            c[i][0] = accumulate ? _mm512_loadu_ps(acc + (r0 + i) * ldacc) : _mm512_setzero_ps();
            c[i][1] = accumulate ? _mm512_loadu_ps(acc + (r0 + i) * ldacc + 16) : _mm512_setzero_ps();
        }
        for (int64_t kc = 0; kc < kp; kc += LOWP_KCHUNK_BF16) {
            const aie_bf16 *ac = a + kc * LOWP_STRIP;
            const aie_bf16 *bc = pb + kc * LOWP_NR;
#pragma GCC unroll 4
            for (int q = 0; q < LOWP_KCHUNK_BF16 / 2; q++) {
                __m512bh b0 = (__m512bh)_mm512_loadu_si512(bc + q * 2 * LOWP_NR);
                __m512bh b1 = (__m512bh)_mm512_loadu_si512(bc + q * 2 * LOWP_NR + 32);
#pragma GCC unroll 8
                for (int i = 0; i < RB; i++) {
                    int32_t pair;
                    memcpy(&pair, ac + i * LOWP_KCHUNK_BF16 + 2 * q, 4);
                    __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
                    c[i][0] = _mm512_dpbf16_ps(c[i][0], av, b0);
                    c[i][1] = _mm512_dpbf16_ps(c[i][1], av, b1);
                }
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < RB; i++) {
            _mm512_storeu_ps(acc + (r0 + i) * ldacc, c[i][0]);
            _mm512_storeu_ps(acc + (r0 + i) * ldacc + 16, c[i][1]);
        }
    }
}

const lowp_bf16_kernels aie_lowp_bf16_avx512_bf16 = {
    .name = "avx512_bf16_32x32",
    .pack_b = aie_lowp_pack_b_bf16,
    .ukernel = ukernel_avx512_bf16_32x32,
};
