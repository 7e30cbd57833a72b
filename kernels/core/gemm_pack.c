/*
 * Packing for the blocked SGEMM (layouts in gemm_internal.h). Generic C: the
 * copies are memory-bound and a small share of the time (A is packed once
 * per KC x MC block and reused over NC columns; B once per KC x NC block and
 * reused over every row of C).
 */
#include <string.h>

#include "gemm_internal.h"

void aie_gemm_pack_a(int trans_a, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc,
                     int mr, float *dst) {
    for (int64_t p = 0; p < mc; p += mr) {
        int rows = (int)(mc - p < mr ? mc - p : mr);
        float *panel = dst + p * kc;
        if (trans_a) { /* A stored K x M: row k holds the mr values contiguously */
            for (int64_t k = 0; k < kc; k++) {
                const float *src = A + (k0 + k) * lda + i0 + p;
                float *d = panel + k * mr;
                memcpy(d, src, (size_t)rows * sizeof(float));
                for (int r = rows; r < mr; r++) d[r] = 0.0f;
            }
        } else { /* read each row of A contiguously, scatter with stride mr */
            for (int r = 0; r < rows; r++) {
                const float *src = A + (i0 + p + r) * lda + k0;
                for (int64_t k = 0; k < kc; k++) panel[k * mr + r] = src[k];
            }
            for (int r = rows; r < mr; r++)
                for (int64_t k = 0; k < kc; k++) panel[k * mr + r] = 0.0f;
        }
    }
}

void aie_gemm_pack_b(int trans_b, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
                     int nr, float *dst, int64_t panel_stride) {
    for (int64_t p = 0; p < nc; p += nr) {
        int cols = (int)(nc - p < nr ? nc - p : nr);
        float *panel = dst + (p / nr) * panel_stride;
        if (!trans_b) { /* B stored K x N: nr contiguous values per k */
            for (int64_t k = 0; k < kc; k++) {
                float *d = panel + k * nr;
                memcpy(d, B + (k0 + k) * ldb + j0 + p, (size_t)cols * sizeof(float));
                for (int c = cols; c < nr; c++) d[c] = 0.0f;
            }
        } else { /* B stored N x K: read each row (a column of op(B)) contiguously */
            for (int c = 0; c < cols; c++) {
                const float *src = B + (j0 + p + c) * ldb + k0;
                for (int64_t k = 0; k < kc; k++) panel[k * nr + c] = src[k];
            }
            for (int c = cols; c < nr; c++)
                for (int64_t k = 0; k < kc; k++) panel[k * nr + c] = 0.0f;
        }
    }
}
