/*
 * The int8 GEMM's output stage for one row of a block, included by
 * core/gemm_lowp.c (the portable definition) and by the per-level int8
 * files, which compile the same source with their ISA's flags and list it in
 * their lowp_s8_kernels (row_f32, row_u8): the baseline build only has SSE2.
 * The same fp32 operations on every path (C17 does not contract them into
 * FMAs), so every path gives the same bytes.
 *
 * The zero-point correction is in wrapping 32-bit arithmetic (exact: the
 * true sum fits, see AIE_GEMM_S8_MAX_K), then the store, dequantisation or
 * requantisation. Loops without branches or aliasing, so they vectorise.
 */
#ifndef AIE_GEMM_S8_STORE_BODY_H
#define AIE_GEMM_S8_STORE_BODY_H

#include <stdint.h>

/* 1.5 * 2^23: adding and subtracting it rounds |x| < 2^22 to an integer,
 * half to even (the FPU's default mode), in plain fp32 arithmetic. */
#define ROUND_MAGIC 12582912.0f

static inline void s8_row_s32(const int32_t *restrict a, const int32_t *restrict cs, uint32_t za, int n,
                       int32_t *restrict c) {
    for (int x = 0; x < n; x++) c[x] = (int32_t)((uint32_t)a[x] - za * (uint32_t)cs[x]);
}

static inline void s8_row_f32(const int32_t *restrict a, const int32_t *restrict cs, uint32_t za, const float *restrict s,
                       int n, float *restrict c) {
    for (int x = 0; x < n; x++) c[x] = (float)(int32_t)((uint32_t)a[x] - za * (uint32_t)cs[x]) * s[x];
}

/* bias: int32 per column (zeros when the call has none). no-trapping-math:
 * lets gcc turn the clamps into vector compares and blends (it keeps them as
 * branches while a compare might raise an FP flag, which nothing reads);
 * the values are unchanged. */
__attribute__((optimize("no-trapping-math"))) static inline void s8_row_u8(const int32_t *restrict a,
                                                                    const int32_t *restrict cs, uint32_t za,
                                                                    const int32_t *restrict bias,
                                                                    const float *restrict s, int32_t y_zero, int n,
                                                                    uint8_t *restrict c) {
    for (int x = 0; x < n; x++) {
        uint32_t v = (uint32_t)a[x] - za * (uint32_t)cs[x] + (uint32_t)bias[x];
        float y = (float)(int32_t)v * s[x];
        /* beyond +-512 the result saturates whatever y_zero (0..255) is */
        y = y > 512.0f ? 512.0f : y;
        y = y < -512.0f ? -512.0f : y;
        y = (y + ROUND_MAGIC) - ROUND_MAGIC;
        int32_t o = (int32_t)y + y_zero;
        o = o < 0 ? 0 : o;
        c[x] = (uint8_t)(o > 255 ? 255 : o);
    }
}

#endif /* AIE_GEMM_S8_STORE_BODY_H */
