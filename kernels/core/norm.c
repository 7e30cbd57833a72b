/* Layer normalisation and RMS normalisation over the last dim of [rows, cols]. */
#include <math.h>

#include "aie_norm.h"
#include "vmath.h"

typedef struct {
    const float *x, *scale, *bias;
    float *y, *mean, *invstd;
    int64_t rows, cols, ntasks;
    float eps;
    int rms;
    const aie_vm_table *vm;
} norm_ctx;

static void norm_task(void *vctx, int64_t t, int64_t nt) {
    const norm_ctx *c = vctx;
    int64_t lo, hi;
    aie_ops_chunk(c->rows, t, c->ntasks, &lo, &hi);
    float inv_n = 1.0f / (float)c->cols;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = c->x + r * c->cols;
        float mean = 0.0f, var;
        if (c->rms) {
            var = c->vm->row_reduce(AIE_VR_SUMSQ, x, c->cols, 0.0f) * inv_n;
        } else {
            /* two passes: the squares are of deviations, so no cancellation */
            mean = c->vm->row_reduce(AIE_VR_SUM, x, c->cols, 0.0f) * inv_n;
            var = c->vm->row_reduce(AIE_VR_SUMSQ, x, c->cols, mean) * inv_n;
        }
        float invstd = 1.0f / sqrtf(var + c->eps);
        c->vm->norm_apply(x, c->y + r * c->cols, c->cols, mean, invstd, c->scale, c->bias);
        if (c->mean) c->mean[r] = mean;
        if (c->invstd) c->invstd[r] = invstd;
    }
}

static int run_norm(norm_ctx *c, const char *what, int nthreads) {
    aie_ensure_init();
    if (c->rows < 0 || c->cols < 0)
        return aie_fail(AIE_EINVAL, "%s: negative dims [%lld, %lld]", what, (long long)c->rows, (long long)c->cols);
    if (c->rows == 0) return AIE_OK;
    if (c->cols == 0) return aie_fail(AIE_EINVAL, "%s: the normalised dims are empty (mean of nothing)", what);
    if (!c->x || !c->y || !c->scale) return aie_fail(AIE_EINVAL, "%s: NULL x, y or scale", what);
    if (!(c->eps >= 0.0f)) return aie_fail(AIE_EINVAL, "%s: epsilon %g must be >= 0", what, (double)c->eps);
    c->vm = aie_vm();
    c->ntasks = aie_ops_tasks(c->rows, c->cols * 3, nthreads);
    aie_parallel_for(c->ntasks, aie_ops_threads(nthreads), norm_task, c);
    return AIE_OK;
}

int aie_layer_norm(const float *x, const float *scale, const float *bias, float *y, int64_t rows, int64_t cols,
                   float eps, float *mean, float *invstd, int nthreads) {
    norm_ctx c = {.x = x, .scale = scale, .bias = bias, .y = y, .mean = mean, .invstd = invstd,
                  .rows = rows, .cols = cols, .eps = eps};
    return run_norm(&c, "layer_norm", nthreads);
}

int aie_rms_norm(const float *x, const float *scale, float *y, int64_t rows, int64_t cols, float eps, int nthreads) {
    norm_ctx c = {.x = x, .scale = scale, .y = y, .rows = rows, .cols = cols, .eps = eps, .rms = 1};
    return run_norm(&c, "rms_norm", nthreads);
}
