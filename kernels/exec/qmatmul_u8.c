/* QMATMUL_U8: QLinearMatMul of two uint8 run-time tensors (engine/ops/
 * qoperator.py; attention's Q.K^T and P.V in a model quantised by
 * onnxruntime, QDQ or QOperator), per-tensor scales and zero points.
 * t: y (u8, batch x m x n), a (u8, batch x m x k), b (u8, [batch x] k x n),
 * workspace (int32 rows of n, one per participant). Exact int32 sums of
 * (a - za)(b - zb), then onnxruntime's requantisation: float32(acc) * m,
 * rounded half to even, plus zy, saturated (m = float32(sa * sb) / sy, made
 * by the planner). Tasks are blocks of rows of one matrix. */
#include "exec_ops.h"
#include "threadpool.h"

#define QROUND_MAGIC 12582912.0f /* 1.5 * 2^23: rounds |v| < 2^22 half to even */
#define ROWS 8

typedef struct {
    uint8_t *y;
    const uint8_t *a, *b;
    int32_t *ws;
    float mult;
    int64_t m, n, k, b_stride, row_blocks;
    int32_t za, zb, zy;
} qmm_job;

__attribute__((always_inline)) static inline void qmm_rows(const qmm_job *j, int64_t task, int worker) {
    const int64_t mat = task / j->row_blocks, r0 = (task % j->row_blocks) * ROWS;
    const int64_t r1 = r0 + ROWS < j->m ? r0 + ROWS : j->m, n = j->n, k = j->k;
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
        for (int64_t c = 0; c < n; c++) {
            float v = (float)acc[c] * mult;
            v = v > 512.0f ? 512.0f : v; /* past +-512 every zero point saturates */
            v = v < -512.0f ? -512.0f : v;
            v = ((v + QROUND_MAGIC) - QROUND_MAGIC) + zy;
            v = v >= 0.0f ? v : 0.0f;
            y[c] = (uint8_t)(v > 255.0f ? 255.0f : v);
        }
    }
}

__attribute__((optimize("no-trapping-math"))) static void qmm_task(void *ctx, int64_t task, int worker) {
    qmm_rows(ctx, task, worker);
}

#if defined(__x86_64__)
__attribute__((target("avx2"), optimize("no-trapping-math"))) static void qmm_task_avx2(void *ctx, int64_t task,
                                                                                        int worker) {
    qmm_rows(ctx, task, worker);
}
#endif

int aie_x_qmatmul_u8(const aie_step_args *a) {
    const aie_qmatmul_u8_step *sp = (const aie_qmatmul_u8_step *)(const void *)a->ip;
    if (sp->batch < 0 || sp->m < 0 || sp->n < 1 || sp->k < 1 || sp->k > 33025 /* |acc| < 2^31 */ ||
        sp->workspace_bytes < sp->n * 4)
        return AIE_EINVAL;
    const int64_t row_blocks = (sp->m + ROWS - 1) / ROWS, ntasks = sp->batch * row_blocks;
    qmm_job j = {a->t[0], a->t[1], a->t[2], a->t[3], (float)a->fp[0], sp->m, sp->n, sp->k, sp->b_stride,
                 row_blocks, (int32_t)sp->a_zero, (int32_t)sp->b_zero, (int32_t)sp->y_zero};
    int nthreads = a->nthreads;
    const int64_t rows_held = sp->workspace_bytes / (sp->n * 4);
    if (aie_parallel_participants(nthreads, ntasks) > rows_held)
        nthreads = (int)rows_held; /* one int32 row per participant: no more threads than rows */
    void (*task)(void *, int64_t, int) = qmm_task;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2"))
        task = qmm_task_avx2;
#endif
    aie_parallel_dynamic(ntasks, nthreads, task, &j);
    return AIE_OK;
}
