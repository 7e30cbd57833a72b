/*
 * int8 GEMM micro-kernel for AVX512_VNNI: avx512_vnni_s8_32x32 (contract and
 * layouts in core/gemm_lowp_internal.h), as four 8 x 32 register blocks:
 * 16 zmm accumulators (8 rows x 2 x 16 columns), per k-quad 2 B loads and 8
 * broadcast rows of A into vpdpbusd (u8 x s8 quads summed into int32, no
 * saturation: exact). Called only at levels avx512_vnni and avx512_bf16.
 */
#include <immintrin.h>
#include <string.h>

#include "gemm_lowp_internal.h"

#define RB 8 /* rows per register block */

static void ukernel_avx512_vnni_s8_32x32(int64_t kp, const uint8_t *pa, int64_t strip_stride, const int8_t *pb,
                                         int m, int32_t *acc, int64_t ldacc) {
    for (int r0 = 0; r0 < m; r0 += RB) {
        const uint8_t *a = pa + (r0 / LOWP_STRIP) * strip_stride + (r0 % LOWP_STRIP) * LOWP_KCHUNK_S8;
        __m512i c[RB][2];
#pragma GCC unroll 8
        for (int i = 0; i < RB; i++) c[i][0] = c[i][1] = _mm512_setzero_si512();
        for (int64_t kc = 0; kc < kp; kc += LOWP_KCHUNK_S8) {
            const uint8_t *ac = a + kc * LOWP_STRIP;
            const int8_t *bc = pb + kc * LOWP_NR;
#pragma GCC unroll 4
            for (int q = 0; q < LOWP_KCHUNK_S8 / 4; q++) {
                __m512i b0 = _mm512_loadu_si512(bc + q * 4 * LOWP_NR);
                __m512i b1 = _mm512_loadu_si512(bc + q * 4 * LOWP_NR + 64);
#pragma GCC unroll 8
                for (int i = 0; i < RB; i++) {
                    int32_t quad;
                    memcpy(&quad, ac + i * LOWP_KCHUNK_S8 + 4 * q, 4);
                    __m512i av = _mm512_set1_epi32(quad);
                    c[i][0] = _mm512_dpbusd_epi32(c[i][0], av, b0);
                    c[i][1] = _mm512_dpbusd_epi32(c[i][1], av, b1);
                }
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < RB; i++) {
            _mm512_storeu_si512(acc + (r0 + i) * ldacc, c[i][0]);
            _mm512_storeu_si512(acc + (r0 + i) * ldacc + 16, c[i][1]);
        }
    }
}

const lowp_s8_kernels aie_lowp_s8_avx512_vnni = {
    .name = "avx512_vnni_s8_32x32",
    .pack_b = aie_lowp_pack_b_s8,
    .ukernel = ukernel_avx512_vnni_s8_32x32,
};
