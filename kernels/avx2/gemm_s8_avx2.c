/*
 * int8 GEMM micro-kernel for AVX2 without VNNI: avx2_s8_32x32 (contract and
 * layouts in core/gemm_lowp_internal.h).
 *
 * Saturation: vpmaddubsw (u8 x s8 pairs summed into int16) saturates, e.g.
 * 255 * 127 * 2 > 32767, so it is not used. Instead both operands are
 * widened to int16 (A zero-extended, B sign-extended with vpmovsxbw) and
 * multiplied with vpmaddwd: int16 pairs summed into int32, |255 * -128| * 2
 * < 2^31, exact. Per k-quad a B load of 4 columns widens to 8 int16 pairs,
 * giving two partial sums per column in separate lanes; they are added once,
 * after the K loop (vphaddd + a lane permute). 2 x 16 register blocks over
 * the column halves of the panel: 8 accumulators + 4 B + 1 A of 16 ymm.
 * Called at levels avx2 and avx512 (no 512-bit kernel without VNNI).
 */
#include <immintrin.h>
#include <string.h>

#include "gemm_lowp_internal.h"
#include "gemm_s8_store_body.h"

#define RB 2 /* rows per register block */

static void ukernel_avx2_s8_32x32(int64_t kp, const uint8_t *pa, int64_t strip_stride, const int8_t *pb, int m,
                                  int32_t *acc, int64_t ldacc, int accumulate) {
    for (int h = 0; h < 2; h++)
        for (int r0 = 0; r0 < (m <= LOWP_STRIP ? m : LOWP_MR); r0 += RB) {
            const uint8_t *a = pa + (r0 / LOWP_STRIP) * strip_stride + (r0 % LOWP_STRIP) * LOWP_KCHUNK_S8;
            __m256i c[RB][4]; /* row i, columns 4g..4g+3: lanes 2c, 2c+1 are two halves of column c's sum */
#pragma GCC unroll 2
            for (int i = 0; i < RB; i++)
#pragma GCC unroll 4
                for (int g = 0; g < 4; g++) c[i][g] = _mm256_setzero_si256();
            for (int64_t kc = 0; kc < kp; kc += LOWP_KCHUNK_S8) {
                const uint8_t *ac = a + kc * LOWP_STRIP;
                const int8_t *bc = pb + kc * LOWP_NR + h * 64;
#pragma GCC unroll 2
                for (int q = 0; q < LOWP_KCHUNK_S8 / 4; q++) {
                    __m256i b[4];
#pragma GCC unroll 4
                    for (int g = 0; g < 4; g++)
                        b[g] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bc + q * 4 * LOWP_NR + 16 * g)));
#pragma GCC unroll 2
                    for (int i = 0; i < RB; i++) {
                        int32_t quad;
                        memcpy(&quad, ac + i * LOWP_KCHUNK_S8 + 4 * q, 4);
                        __m256i av = _mm256_broadcastq_epi64(_mm_cvtepu8_epi16(_mm_cvtsi32_si128(quad)));
#pragma GCC unroll 4
                        for (int g = 0; g < 4; g++) c[i][g] = _mm256_add_epi32(c[i][g], _mm256_madd_epi16(b[g], av));
                    }
                }
            }
#pragma GCC unroll 2
            for (int i = 0; i < RB; i++)
#pragma GCC unroll 2
                for (int g = 0; g < 4; g += 2) {
                    /* hadd: [c0 c1 c4 c5 | c2 c3 c6 c7] as 64-bit pairs 0 2 1 3 -> columns in order */
                    __m256i s = _mm256_permute4x64_epi64(_mm256_hadd_epi32(c[i][g], c[i][g + 1]), 0xD8);
                    __m256i *out = (__m256i *)(acc + (r0 + i) * ldacc + h * 16 + g * 4);
                    if (accumulate) s = _mm256_add_epi32(s, _mm256_loadu_si256(out));
                    _mm256_storeu_si256(out, s);
                }
        }
}

const lowp_s8_kernels aie_lowp_s8_avx2 = {
    .name = "avx2_s8_32x32",
    .pack_b = aie_lowp_pack_b_s8,
    .ukernel = ukernel_avx2_s8_32x32,
    .row_f32 = s8_row_f32,
    .row_u8 = s8_row_u8,
};
