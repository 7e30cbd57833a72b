/* QMATMUL_U8: QLinearMatMul of two uint8 run-time tensors (engine/ops/
 * qoperator.py; attention's Q.K^T and P.V in a model quantised by
 * onnxruntime, QDQ or QOperator), per-tensor scales and zero points.
 * t: y (u8, batch x m x n), a (u8, batch x m x k), b (u8, [batch x] k x n),
 * workspace (int32 rows of n, one per participant). Exact int32 sums of
 * (a - za)(b - zb), then onnxruntime's requantisation: float32(acc) * m,
 * rounded half to even, plus zy, saturated (m = float32(sa * sb) / sy, made
 * by the planner). Tasks are blocks of rows of one matrix, each run by the
 * selected level's loop (the dispatch table's q8: scalar/ and avx2/
 * qlinear_u8_*.c). */
#include "exec_ops.h"
#include "kernel_table.h"
#include "threadpool.h"

int aie_x_qmatmul_u8(const aie_step_args *a) {
    const aie_qmatmul_u8_step *sp = (const aie_qmatmul_u8_step *)(const void *)a->ip;
    if (sp->batch < 0 || sp->m < 0 || sp->n < 1 || sp->k < 1 || sp->k > 33025 /* |acc| < 2^31 */ ||
        sp->workspace_bytes < sp->n * 4)
        return AIE_EINVAL;
    const int64_t row_blocks = (sp->m + AIE_QMM_ROWS - 1) / AIE_QMM_ROWS, ntasks = sp->batch * row_blocks;
    aie_qmm_job j = {a->t[0], a->t[1], a->t[2], a->t[3], (float)a->fp[0], sp->m, sp->n, sp->k, sp->b_stride,
                     row_blocks, (int32_t)sp->a_zero, (int32_t)sp->b_zero, (int32_t)sp->y_zero};
    int nthreads = a->nthreads;
    const int64_t rows_held = sp->workspace_bytes / (sp->n * 4);
    if (aie_parallel_participants(nthreads, ntasks) > rows_held)
        nthreads = (int)rows_held; /* one int32 row per participant: no more threads than rows */
    aie_parallel_dynamic(ntasks, nthreads, aie_kernels()->q8->qmatmul_rows, &j);
    return AIE_OK;
}
