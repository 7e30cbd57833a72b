/* QSOFTMAX_U8: com.microsoft QLinearSoftmax on uint8 (engine/ops/qoperator.py),
 * and the QDQ group DequantizeLinear -> Softmax -> QuantizeLinear that
 * onnxruntime fuses into it (engine/passes/qdq_fuse.py). t: y (u8), x (u8),
 * table (256 float32: exp((i - 255 + shift) * x_scale), built by the
 * planner). Per row: the table shifted so the row's largest byte reads entry
 * 255, a float32 sum in element order, then y = nearbyint(t * m / sum) + zero,
 * saturated at 255. This is onnxruntime's arithmetic step for step (its
 * operator has no other definition), so the sum is sequential on purpose: a
 * vector sum rounds differently and moves bytes that sit on a rounding tie.
 * Rows go to the thread pool. */
#include <math.h>
#include <string.h>

#include "exec_ops.h"
#include "threadpool.h"

#define ROWS_PER_TASK 64

typedef struct {
    uint8_t *y;
    const uint8_t *x;
    const float *table;
    float m;
    int64_t rows, d, zero;
} qsoftmax_job;

static void qsoftmax_rows(void *ctx, int64_t t, int worker) {
    (void)worker;
    const qsoftmax_job *j = ctx;
    const int64_t r0 = t * ROWS_PER_TASK, r1 = r0 + ROWS_PER_TASK < j->rows ? r0 + ROWS_PER_TASK : j->rows;
    const int64_t d = j->d;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *x = j->x + r * d;
        uint8_t *y = j->y + r * d;
        uint8_t xmax = 0;
        for (int64_t i = 0; i < d; i++)
            xmax = x[i] > xmax ? x[i] : xmax;
        const float *tab = j->table + (255 - xmax);
        float sum = 0.0f;
        for (int64_t i = 0; i < d; i++)
            sum += tab[x[i]];
        if (sum == 0.0f) { /* onnxruntime leaves such a row unwritten; it cannot happen: tab[xmax] = table[255] > 0 */
            memset(y, 0, (size_t)d);
            continue;
        }
        for (int64_t i = 0; i < d; i++) {
            const float e = tab[x[i]], p = e * j->m;
            /* t * m overflows only for rows of one element (the table's top entry is ~FLT_MAX / d / e^5;
             * see qsoftmax_table): there e / sum is 1, and onnxruntime answers m + zero */
            const float q = nearbyintf(isinf(p) ? (e / sum) * j->m : p / sum) + (float)j->zero;
            y[i] = (uint8_t)(q > 255.0f ? 255.0f : q);
        }
    }
}

int aie_x_qsoftmax_u8(const aie_step_args *a) {
    const aie_qsoftmax_u8_step *sp = (const aie_qsoftmax_u8_step *)(const void *)a->ip;
    if (sp->rows < 0 || sp->d < 1 || sp->y_zero < 0 || sp->y_zero > 255)
        return AIE_EINVAL;
    qsoftmax_job j = {a->t[0], a->t[1], a->t[2], (float)a->fp[0], sp->rows, sp->d, sp->y_zero};
    aie_parallel_dynamic((sp->rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK, a->nthreads, qsoftmax_rows, &j);
    return AIE_OK;
}
