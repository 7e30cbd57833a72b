/*
 * SGEMM kernels for AVX2 + FMA: micro-kernel ukernel_avx2_6x16.
 * 6 rows x 2 ymm = 12 accumulators + 2 B vectors + 1 broadcast of the 16
 * registers (the classic Haswell tile). Edge columns use maskload/maskstore.
 * A is packed by an in-register transpose (pack_a_avx2).
 * Called only when aie_selected_isa() == AIE_ISA_AVX2.
 */
#include "vf_avx2.h"

#define GEMM_MR 6
#define GEMM_NV 2
#define GEMM_UKERNEL ukernel_avx2_6x16
#define GEMM_SMALL_NV_1 4
#define GEMM_SMALL_NV_2 4
#define GEMM_SMALL_NV_3 3
#define GEMM_SMALL_NV_4 2
#define GEMM_SMALL_NV_5 2
#define GEMM_SMALL_NV_6 2
#define GEMM_SMALL_NV_7 1
#define GEMM_SMALL_NV_8 1
#define GEMM_BT_RB 2
#define GEMM_ACC_BUDGET 12 /* accumulators of the small-M kernel on packed B */
/* With 8-wide vectors the register tile reads B in 32-96-byte runs one row
 * (a page or more for wide B) apart, which Zen 3 fetched at 4-7 GFLOPS for
 * 3-8 rows of a 2048 x 2048 B; streaming whole rows took 2.5-4x less time
 * (3..8 x 2048 x 2048 and 4..8 x 1024 x 1024, 1 and 2 threads). AVX-512's
 * 16-wide tile (4 vectors a row) keeps the default of 2. */
#define GEMM_STREAM_MAX_M 8
#define GEMM_PACK_A pack_a_avx2
#define GEMM_ISA_ID AIE_ISA_AVX2
#define GEMM_TABLE aie_gemm_kernels_avx2

#include "gemm_internal.h"

/* 6-row panels of a row-major A, 8 values of k at a time: the rows (zeros
 * for those past mc, and 2 zero rows) are transposed in registers and each
 * k's 6 values stored with one 8-lane store whose last 2 lanes the next
 * store overwrites (the very last one is masked, not to write past the
 * panel). The scalar copy (aie_gemm_pack_a) spent ~0.9 cycles per value on
 * Zen 3, the register transpose ~0.6 (A's trip from L2/L3 is the rest).
 * A transposed goes to aie_gemm_pack_a. */
static void pack_a_avx2(int trans_a, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc,
                        int mr, float *dst) {
    if (trans_a || mr != 6) {
        aie_gemm_pack_a(trans_a, A, lda, i0, mc, k0, kc, mr, dst);
        return;
    }
    for (int64_t p = 0; p < mc; p += 6) {
        float *panel = dst + p * kc;
        const int rows = (int)(mc - p < 6 ? mc - p : 6);
        const float *s = A + (i0 + p) * lda + k0;
        const __m256 z = _mm256_setzero_ps();
        int64_t k = 0;
        for (; k + 8 <= kc; k += 8) {
            __m256 r0 = _mm256_loadu_ps(s + k);
            __m256 r1 = rows > 1 ? _mm256_loadu_ps(s + lda + k) : z;
            __m256 r2 = rows > 2 ? _mm256_loadu_ps(s + 2 * lda + k) : z;
            __m256 r3 = rows > 3 ? _mm256_loadu_ps(s + 3 * lda + k) : z;
            __m256 r4 = rows > 4 ? _mm256_loadu_ps(s + 4 * lda + k) : z;
            __m256 r5 = rows > 5 ? _mm256_loadu_ps(s + 5 * lda + k) : z;
            /* t*: pairs of rows interleaved per 128-bit lane; u*: quads */
            __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
            __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
            __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
            __m256 u4 = _mm256_shuffle_ps(t4, z, 0x44), u5 = _mm256_shuffle_ps(t4, z, 0xEE);
            __m256 u6 = _mm256_shuffle_ps(t5, z, 0x44), u7 = _mm256_shuffle_ps(t5, z, 0xEE);
            /* column q: rows 0-3 from u(q%4) and rows 4-5 from u(4 + q%4), lane half q/4 */
            float *d = panel + k * 6;
            _mm256_storeu_ps(d + 0, _mm256_permute2f128_ps(u0, u4, 0x20));
            _mm256_storeu_ps(d + 6, _mm256_permute2f128_ps(u1, u5, 0x20));
            _mm256_storeu_ps(d + 12, _mm256_permute2f128_ps(u2, u6, 0x20));
            _mm256_storeu_ps(d + 18, _mm256_permute2f128_ps(u3, u7, 0x20));
            _mm256_storeu_ps(d + 24, _mm256_permute2f128_ps(u0, u4, 0x31));
            _mm256_storeu_ps(d + 30, _mm256_permute2f128_ps(u1, u5, 0x31));
            _mm256_storeu_ps(d + 36, _mm256_permute2f128_ps(u2, u6, 0x31));
            __m256 last = _mm256_permute2f128_ps(u3, u7, 0x31);
            if (k + 8 < kc) _mm256_storeu_ps(d + 42, last);
            else vf_storen(d + 42, last, 6);
        }
        for (; k < kc; k++)
            for (int r = 0; r < 6; r++) panel[k * 6 + r] = r < rows ? s[r * lda + k] : 0.0f;
    }
}

#include "gemm_kernels_body.h"
