/*
 * The int8 micro-kernel for vpdpbusd (u8 x s8 quads summed into int32, no
 * saturation: exact), written once and instantiated by
 * avx512_vnni/gemm_s8_avx512_vnni.c (zmm) and avx_vnni/gemm_s8_avx_vnni.c
 * (ymm, VEX encoding); contract and layouts in core/gemm_lowp_internal.h.
 * The including file defines, before including this:
 *
 *   vi, VL              vector type and its int32 lanes (columns per vector)
 *   vi_zero/vi_load/vi_store/vi_set1/vi_dpbusd   static inline wrappers
 *   VNNI_RB             rows per register block: VNNI_RB x 2 accumulators
 *   VNNI_UKERNEL, VNNI_TABLE, VNNI_NAME   the kernel, its table, its name
 *
 * A register block is VNNI_RB rows x 2 vectors of columns; the panel's 32
 * columns are walked in 32 / (2 * VL) such column groups. Per k-quad: 2 B
 * loads and VNNI_RB broadcast rows of A.
 */
#include <string.h>

#include "gemm_lowp_internal.h"

#define VNNI_GROUPS (LOWP_NR / (2 * VL))

static void VNNI_UKERNEL(int64_t kp, const uint8_t *pa, int64_t strip_stride, const int8_t *pb, int m, int32_t *acc,
                         int64_t ldacc, int accumulate) {
    const int rows = m <= LOWP_STRIP ? m : LOWP_MR;
    for (int h = 0; h < VNNI_GROUPS; h++)
        for (int r0 = 0; r0 < rows; r0 += VNNI_RB) {
            const uint8_t *a = pa + (r0 / LOWP_STRIP) * strip_stride + (r0 % LOWP_STRIP) * LOWP_KCHUNK_S8;
            int32_t *out = acc + r0 * ldacc + h * 2 * VL;
            vi c[VNNI_RB][2];
#pragma GCC unroll 8
            for (int i = 0; i < VNNI_RB; i++)
#pragma GCC unroll 2
                for (int v = 0; v < 2; v++) c[i][v] = accumulate ? vi_load(out + i * ldacc + v * VL) : vi_zero();
            for (int64_t kc = 0; kc < kp; kc += LOWP_KCHUNK_S8) {
                const uint8_t *ac = a + kc * LOWP_STRIP;
                const int8_t *bc = pb + kc * LOWP_NR + h * 2 * VL * 4;
#pragma GCC unroll 4
                for (int q = 0; q < LOWP_KCHUNK_S8 / 4; q++) {
                    vi b0 = vi_load(bc + q * 4 * LOWP_NR), b1 = vi_load(bc + q * 4 * LOWP_NR + VL * 4);
#pragma GCC unroll 8
                    for (int i = 0; i < VNNI_RB; i++) {
                        int32_t quad;
                        memcpy(&quad, ac + i * LOWP_KCHUNK_S8 + 4 * q, 4);
                        vi av = vi_set1(quad);
                        c[i][0] = vi_dpbusd(c[i][0], av, b0);
                        c[i][1] = vi_dpbusd(c[i][1], av, b1);
                    }
                }
            }
#pragma GCC unroll 8
            for (int i = 0; i < VNNI_RB; i++)
#pragma GCC unroll 2
                for (int v = 0; v < 2; v++) vi_store(out + i * ldacc + v * VL, c[i][v]);
        }
}

#include "gemm_s8_store_body.h"

const lowp_s8_kernels VNNI_TABLE = {
    .name = VNNI_NAME,
    .pack_b = aie_lowp_pack_b_s8,
    .ukernel = VNNI_UKERNEL,
    .row_f32 = s8_row_f32,
    .row_u8 = s8_row_u8,
};
