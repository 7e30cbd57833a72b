/*
 * int8 GEMM micro-kernel for AVX-VNNI: avx_vnni_s8_32x32 (contract and
 * layouts in core/gemm_lowp_internal.h), as 4 x 16 register blocks over the
 * two column halves of a panel: 8 ymm accumulators, per k-quad 2 B loads and
 * 4 broadcast rows of A into the VEX vpdpbusd (exact int32 sums; 16 ymm
 * registers leave no room for a wider block). Called only at level avx_vnni.
 */
#include <immintrin.h>
#include <string.h>

#include "gemm_lowp_internal.h"

#define RB 4 /* rows per register block */

static void ukernel_avx_vnni_s8_32x32(int64_t kp, const uint8_t *pa, int64_t strip_stride, const int8_t *pb, int m,
                                      int32_t *acc, int64_t ldacc) {
    for (int h = 0; h < 2; h++)
        for (int r0 = 0; r0 < m; r0 += RB) {
            const uint8_t *a = pa + (r0 / LOWP_STRIP) * strip_stride + (r0 % LOWP_STRIP) * LOWP_KCHUNK_S8;
            __m256i c[RB][2];
#pragma GCC unroll 4
            for (int i = 0; i < RB; i++) c[i][0] = c[i][1] = _mm256_setzero_si256();
            for (int64_t kc = 0; kc < kp; kc += LOWP_KCHUNK_S8) {
                const uint8_t *ac = a + kc * LOWP_STRIP;
                const int8_t *bc = pb + kc * LOWP_NR + h * 64;
#pragma GCC unroll 4
                for (int q = 0; q < LOWP_KCHUNK_S8 / 4; q++) {
                    __m256i b0 = _mm256_loadu_si256((const __m256i *)(bc + q * 4 * LOWP_NR));
                    __m256i b1 = _mm256_loadu_si256((const __m256i *)(bc + q * 4 * LOWP_NR + 32));
#pragma GCC unroll 4
                    for (int i = 0; i < RB; i++) {
                        int32_t quad;
                        memcpy(&quad, ac + i * LOWP_KCHUNK_S8 + 4 * q, 4);
                        __m256i av = _mm256_set1_epi32(quad);
                        c[i][0] = _mm256_dpbusd_avx_epi32(c[i][0], av, b0);
                        c[i][1] = _mm256_dpbusd_avx_epi32(c[i][1], av, b1);
                    }
                }
            }
#pragma GCC unroll 4
            for (int i = 0; i < RB; i++) {
                _mm256_storeu_si256((__m256i *)(acc + (r0 + i) * ldacc + h * 16), c[i][0]);
                _mm256_storeu_si256((__m256i *)(acc + (r0 + i) * ldacc + h * 16 + 8), c[i][1]);
            }
        }
}

const lowp_s8_kernels aie_lowp_s8_avx_vnni = {
    .name = "avx_vnni_s8_32x32",
    .pack_b = aie_lowp_pack_b_s8,
    .ukernel = ukernel_avx_vnni_s8_32x32,
};
