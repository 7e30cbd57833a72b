/*
 * int8 depthwise convolution driver (contract in include/aie_conv_s8.h):
 * groups == C == K, one int8 weight per channel and tap, no im2col and no
 * GEMM: output rows handed out dynamically to the selected level's row
 * kernel (kernel_table.h: dwconv_s8).
 */
#include "aie_conv_s8.h"
#include "aie_internal.h"
#include "conv_s8_depthwise.h"
#include "kernel_table.h"
#include "threadpool.h"

size_t aie_conv2d_u8s8_depthwise_workspace_size(const aie_conv2d_params *p) {
    return (size_t)(p->C > 0 ? p->C : 0) * sizeof(float) + AIE_ALIGN;
}

typedef struct {
    aie_dwconv_s8_args a;
    int64_t rows_per_task;
} dws8_ctx;

static void dws8_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const dws8_ctx *d = ctx;
    const int64_t rows = d->a.p->N * d->a.P, r0 = task * d->rows_per_task;
    const int64_t r1 = r0 + d->rows_per_task < rows ? r0 + d->rows_per_task : rows;
    if (r0 < r1) aie_kernels()->dwconv_s8(&d->a, r0, r1);
}

int aie_conv2d_u8s8_depthwise(const aie_conv2d_params *p, const uint8_t *x, int32_t x_zero, const int8_t *w,
                              void *y, const aie_qepilogue *q, void *workspace, size_t workspace_size,
                              int nthreads) {
    const char *fn = "aie_conv2d_u8s8_depthwise";
    int rc = aie_ensure_init();
    if (rc != AIE_OK) return rc;
    int64_t P, Q;
    if ((rc = aie_conv2d_output_shape(p, &P, &Q)) != AIE_OK) return rc;
    if (p->groups != p->C || p->K != p->C)
        return aie_fail(AIE_EINVAL, "%s: groups=%lld, C=%lld, K=%lld; depthwise needs groups == C == K", fn,
                        (long long)p->groups, (long long)p->C, (long long)p->K);
    if (p->R * p->S > AIE_DWS8_MAX_TAPS)
        return aie_fail(AIE_EINVAL, "%s: R*S=%lld is above %d taps (larger depthwise windows are left to the caller)",
                        fn, (long long)(p->R * p->S), AIE_DWS8_MAX_TAPS);
    if (x_zero < 0 || x_zero > 255)
        return aie_fail(AIE_EINVAL, "%s: x_zero=%d is outside the uint8 range 0..255", fn, (int)x_zero);
    if (!q || (q->out != AIE_QOUT_U8 && q->out != AIE_QOUT_S32))
        return aie_fail(AIE_EINVAL, "%s: q->out must be AIE_QOUT_U8 (2) or AIE_QOUT_S32 (0)", fn);
    if (!x || !y || !w) return aie_fail(AIE_EINVAL, "%s: x, w or y is NULL", fn);
    if (p->N == 0 || P * Q == 0 || p->C == 0) return AIE_OK;
    const size_t need = aie_conv2d_u8s8_depthwise_workspace_size(p);
    if (!workspace || workspace_size < need)
        return aie_fail(AIE_ENOMEM, "%s: workspace of %zu bytes, need %zu (aie_conv2d_u8s8_depthwise_workspace_size)",
                        fn, workspace ? workspace_size : 0, need);
    float *m = (float *)AIE_ROUND_UP((uintptr_t)workspace, AIE_ALIGN);
    if (q->out == AIE_QOUT_U8) {
        if (!(q->a_scale > 0.0f) || !(q->y_scale > 0.0f) || !q->b_scale || q->y_zero < 0 || q->y_zero > 255)
            return aie_fail(AIE_EINVAL, "%s: scales must be > 0 (b_scale given) and y_zero in 0..255", fn);
        /* the int8 GEMM's multiplier, the same fp32 operations (aie_gemm_lowp.h) */
        for (int64_t c = 0; c < p->C; c++) m[c] = q->a_scale * q->b_scale[c] / q->y_scale;
    }
    if (nthreads <= 0) nthreads = aie_threads_get();
    dws8_ctx d = {{p, P, Q, x, x_zero, q->y_zero, q->out, w, q->out == AIE_QOUT_U8 ? q->bias_s32 : NULL, m, y}, 1};
    const int64_t rows = p->N * P;
    /* a few tasks per thread for balance, each at least a row */
    d.rows_per_task = rows / (4 * (int64_t)nthreads) > 1 ? rows / (4 * (int64_t)nthreads) : 1;
    aie_parallel_dynamic((rows + d.rows_per_task - 1) / d.rows_per_task, nthreads, dws8_task, &d);
    return AIE_OK;
}
