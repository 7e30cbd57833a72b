/* The uint8 QADD_U8 loop, avx2: core/qadd_u8_body.h. QMATMUL_U8's task on
 * AVX2 (core/qlinear_u8_kernels.h; the portable loop:
 * core/qmatmul_u8_body.h). Same contract, same bytes: exact int32 sums of
 * (a - za)(b - zb), then float32(acc) * mult, rounded half to even, + zy,
 * saturated. The products go through vpmaddwd: both factors fit int16
 * (-255..255) and a pair's sum 2 * 65025 fits int32, so a madd of
 * [b(p, c), b(p+1, c)] by [a(r, p), a(r, p+1)] adds two exact products per
 * int32 lane (the driver caps k so the whole sum stays below 2^31).
 * Register block: all (up to AIE_QMM_ROWS = 8) rows of the task x 8 columns,
 * one ymm accumulator per row; each interleaved B pair-row is widened once
 * and used by every row. A's zero-shifted pairs are made once per chunk of
 * QMM_KC values of k into a small stack table. Columns past the last block
 * of 8 take the scalar loop. */
#include <immintrin.h>

#include "qlinear_u8_kernels.h"
#define QADD_CHUNK_TASK qadd_chunk_avx2
#include "qadd_u8_body.h"

#define QMM_KC 512 /* values of k per A-pair table: 8 rows x 256 pairs x 4 bytes = 8 KiB of stack */

/* B rows p and p+1 (row p+1 zero past k), columns c..c+7, less zb, as 8 interleaved int16 pairs. */
static inline __m256i qmm_b_pairs(const uint8_t *b, int64_t n, int64_t p, int64_t k, int64_t c, __m128i zb) {
    const uint8_t *row = b + p * n + c;
    const __m128i r0 = _mm_sub_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)row)), zb);
    const __m128i r1 =
        p + 1 < k ? _mm_sub_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)(row + n))), zb)
                  : _mm_setzero_si128();
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(r0, r1)), _mm_unpackhi_epi16(r0, r1), 1);
}

/* float32(acc) * mult, rounded half to even, + zy, saturated: the portable loop's operations lane by lane. */
static inline void qmm_store8(uint8_t *y, __m256i acc, __m256 mult, __m256 zy) {
    const __m256 magic = _mm256_set1_ps(AIE_QROUND_MAGIC);
    __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), mult);
    v = _mm256_max_ps(_mm256_min_ps(v, _mm256_set1_ps(512.0f)), _mm256_set1_ps(-512.0f));
    v = _mm256_add_ps(_mm256_sub_ps(_mm256_add_ps(v, magic), magic), zy);
    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _mm256_set1_ps(255.0f));
    const __m256i i32 = _mm256_cvttps_epi32(v);
    const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
    _mm_storel_epi64((__m128i *)(void *)y, _mm_packus_epi16(i16, i16));
}

/* Rows [0, R) x columns [c, c + 8) over k in [p0, p1), added to acc[]; R a constant where inlined with one. */
__attribute__((always_inline)) static inline void qmm_block(int R, const int32_t *apairs, int64_t pairs_stride,
                                                            const uint8_t *b, int64_t n, int64_t k, int64_t c,
                                                            int64_t p0, int64_t p1, __m128i zb, __m256i *acc) {
    for (int64_t p = p0; p < p1; p += 2) {
        const __m256i bp = qmm_b_pairs(b, n, p, k, c, zb);
        const int32_t *ap = apairs + (p - p0) / 2;
        for (int r = 0; r < R; r++)
            acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(bp, _mm256_set1_epi32(ap[r * pairs_stride])));
    }
}

static void qmm_rows_avx2(void *ctx, int64_t task, int worker) {
    (void)worker;
    const aie_qmm_job *j = ctx;
    const int64_t mat = task / j->row_blocks, r0 = (task % j->row_blocks) * AIE_QMM_ROWS;
    const int64_t r1 = r0 + AIE_QMM_ROWS < j->m ? r0 + AIE_QMM_ROWS : j->m, n = j->n, k = j->k;
    const int R = (int)(r1 - r0);
    const uint8_t *b = j->b + mat * j->b_stride, *a = j->a + (mat * j->m + r0) * k;
    uint8_t *y = j->y + (mat * j->m + r0) * n;
    const int32_t za = j->za, zb = j->zb;
    const float mult = j->mult, zyf = (float)j->zy;
    const __m128i zb16 = _mm_set1_epi16((int16_t)zb);
    const __m256 mult8 = _mm256_set1_ps(mult), zy8 = _mm256_set1_ps(zyf);
    int32_t apairs[AIE_QMM_ROWS * (QMM_KC / 2)];
    const int64_t nfull = n / 8 * 8;
    for (int64_t c = 0; c < nfull; c += 8) {
        __m256i acc[AIE_QMM_ROWS];
        for (int r = 0; r < AIE_QMM_ROWS; r++) acc[r] = _mm256_setzero_si256();
        for (int64_t p0 = 0; p0 < k; p0 += QMM_KC) {
            const int64_t p1 = p0 + QMM_KC < k ? p0 + QMM_KC : k;
            if (c == 0 || k > QMM_KC) /* one chunk: the table made for the first block serves every block */
                for (int r = 0; r < R; r++)
                    for (int64_t p = p0; p < p1; p += 2) {
                        const int32_t lo = (int32_t)a[r * k + p] - za;
                        const int32_t hi = p + 1 < k ? (int32_t)a[r * k + p + 1] - za : 0;
                        apairs[r * (QMM_KC / 2) + (p - p0) / 2] =
                            (int32_t)(((uint32_t)hi << 16) | ((uint32_t)lo & 0xffffu));
                    }
            if (R == AIE_QMM_ROWS)
                qmm_block(AIE_QMM_ROWS, apairs, QMM_KC / 2, b, n, k, c, p0, p1, zb16, acc);
            else
                qmm_block(R, apairs, QMM_KC / 2, b, n, k, c, p0, p1, zb16, acc);
        }
        for (int r = 0; r < R; r++) qmm_store8(y + r * n + c, acc[r], mult8, zy8);
    }
    for (int r = 0; r < R; r++) /* the columns past the last block of 8 */
        for (int64_t c = nfull; c < n; c++) {
            int32_t s = 0;
            for (int64_t p = 0; p < k; p++)
                s += ((int32_t)a[r * k + p] - za) * ((int32_t)b[p * n + c] - zb);
            y[r * n + c] = aie_qmm_requant(s, mult, zyf);
        }
}

const aie_q8_kernels aie_q8_avx2 = {"avx2", qmm_rows_avx2, qadd_chunk_avx2};
