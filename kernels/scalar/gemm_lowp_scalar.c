/*
 * bf16 and int8 GEMM micro-kernels in portable C (contract and layouts in
 * core/gemm_lowp_internal.h): portable_bf16_32x32 (bf16 widened to fp32,
 * fp32 multiply and add: the path of every CPU without bf16 hardware) and
 * scalar_s8_32x32 (int32 sums: bit-exact like every int8 path). Plain C for
 * baseline x86-64 / aarch64; ISO C mode, so no contraction into FMAs.
 */
#include "gemm_lowp_internal.h"

static void ukernel_portable_bf16_32x32(int64_t kp, const aie_bf16 *pa, int64_t strip_stride, const aie_bf16 *pb,
                                        int m, float *acc, int64_t ldacc, int accumulate) {
    for (int r = 0; r < (m <= LOWP_STRIP ? m : LOWP_MR); r++) {
        const aie_bf16 *a = pa + (r / LOWP_STRIP) * strip_stride + (r % LOWP_STRIP) * LOWP_KCHUNK_BF16;
        float row[LOWP_NR];
        for (int j = 0; j < LOWP_NR; j++) row[j] = accumulate ? acc[r * ldacc + j] : 0.0f;
        for (int64_t k = 0; k < kp; k += 2) {
            const aie_bf16 *ak = a + (k / LOWP_KCHUNK_BF16) * (LOWP_STRIP * LOWP_KCHUNK_BF16) + k % LOWP_KCHUNK_BF16;
            const aie_bf16 *b = pb + (k / 2) * 2 * LOWP_NR;
            float a0 = aie_bf16_to_f32(ak[0]), a1 = aie_bf16_to_f32(ak[1]);
            for (int j = 0; j < LOWP_NR; j++) {
                row[j] += a0 * aie_bf16_to_f32(b[2 * j]);
                row[j] += a1 * aie_bf16_to_f32(b[2 * j + 1]);
            }
        }
        for (int j = 0; j < LOWP_NR; j++) acc[r * ldacc + j] = row[j];
    }
}

static void ukernel_scalar_s8_32x32(int64_t kp, const uint8_t *pa, int64_t strip_stride, const int8_t *pb, int m,
                                    int32_t *acc, int64_t ldacc, int accumulate) {
    for (int r = 0; r < (m <= LOWP_STRIP ? m : LOWP_MR); r++) {
        const uint8_t *a = pa + (r / LOWP_STRIP) * strip_stride + (r % LOWP_STRIP) * LOWP_KCHUNK_S8;
        int32_t row[LOWP_NR];
        for (int j = 0; j < LOWP_NR; j++) row[j] = accumulate ? acc[r * ldacc + j] : 0;
        for (int64_t k = 0; k < kp; k += 4) {
            const uint8_t *ak = a + (k / LOWP_KCHUNK_S8) * (LOWP_STRIP * LOWP_KCHUNK_S8) + k % LOWP_KCHUNK_S8;
            const int8_t *b = pb + (k / 4) * 4 * LOWP_NR;
            for (int j = 0; j < LOWP_NR; j++)
                for (int g = 0; g < 4; g++) row[j] += (int32_t)ak[g] * (int32_t)b[4 * j + g];
        }
        for (int j = 0; j < LOWP_NR; j++) acc[r * ldacc + j] = row[j];
    }
}

const lowp_bf16_kernels aie_lowp_bf16_portable = {
    .name = "portable_bf16_32x32",
    .pack_b = aie_lowp_pack_b_bf16,
    .ukernel = ukernel_portable_bf16_32x32,
};

const lowp_s8_kernels aie_lowp_s8_scalar = {
    .name = "scalar_s8_32x32",
    .pack_b = aie_lowp_pack_b_s8,
    .ukernel = ukernel_scalar_s8_32x32,
};
