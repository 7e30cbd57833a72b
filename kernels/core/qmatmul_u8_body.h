/* QMATMUL_U8's task (core/qlinear_u8_kernels.h), compiled per ISA by
 * scalar/ and avx2/ qlinear_u8_*.c: rows r0..r1 of one matrix, each as exact
 * int32 sums of (a - za)(b - zb) in the worker's row of ws (a row of B at a
 * time: straight loops the compiler vectorises for the file's ISA), then
 * onnxruntime's requantisation: float32(acc) * mult, rounded half to even,
 * plus zy, saturated. The includer defines QMM_ROWS_TASK (the name); built
 * with -fno-trapping-math (kernels/Makefile). */
#include "qlinear_u8_kernels.h"

static void QMM_ROWS_TASK(void *ctx, int64_t task, int worker) {
    const aie_qmm_job *j = ctx;
    const int64_t mat = task / j->row_blocks, r0 = (task % j->row_blocks) * AIE_QMM_ROWS;
    const int64_t r1 = r0 + AIE_QMM_ROWS < j->m ? r0 + AIE_QMM_ROWS : j->m, n = j->n, k = j->k;
    const uint8_t *b = j->b + mat * j->b_stride;
    int32_t *restrict acc = j->ws + (int64_t)worker * n;
    /* locals: stores to acc (int32) and y (bytes) may alias *j, which would reload its fields per element */
    const int32_t za = j->za, zb = j->zb;
    const float mult = j->mult, zy = (float)j->zy;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *a = j->a + (mat * j->m + r) * k;
        for (int64_t c = 0; c < n; c++)
            acc[c] = 0;
        for (int64_t p = 0; p < k; p++) {
            const int32_t av = (int32_t)a[p] - za;
            const uint8_t *restrict brow = b + p * n;
            for (int64_t c = 0; c < n; c++)
                acc[c] += av * ((int32_t)brow[c] - zb);
        }
        uint8_t *restrict y = j->y + (mat * j->m + r) * n;
        for (int64_t c = 0; c < n; c++)
            y[c] = aie_qmm_requant(acc[c], mult, zy);
    }
}
