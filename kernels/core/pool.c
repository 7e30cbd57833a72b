/* Pooling driver: validates params, computes the ONNX output shape, splits
 * output rows over threads and calls the selected ISA's kernel. */
#include "conv_kernels.h"
#include "kernel_table.h"

static int64_t pool_out(int64_t in, int64_t pb, int64_t pe, int64_t k, int64_t dil, int64_t stride, int ceil_mode) {
    const int64_t span = (k - 1) * dil + 1, room = in + pb + pe - span;
    int64_t out = (ceil_mode ? (room + stride - 1) / stride : room / stride) + 1;
    /* ONNX/onnxruntime: the last window must start inside the input or the
     * begin padding, never wholly in the end padding */
    if (ceil_mode && (out - 1) * stride >= in + pb) out--;
    return out;
}

int aie_pool2d_output_shape(const aie_pool2d_params *p, int64_t *P, int64_t *Q) {
    if (!p) return aie_fail(AIE_EINVAL, "pool2d: params is NULL");
    if (p->N < 0 || p->H < 1 || p->W < 1 || p->C < 1 || p->kh < 1 || p->kw < 1)
        return aie_fail(AIE_EINVAL, "pool2d: bad shape N=%lld H=%lld W=%lld C=%lld kernel=%lldx%lld", (long long)p->N,
                        (long long)p->H, (long long)p->W, (long long)p->C, (long long)p->kh, (long long)p->kw);
    if (p->stride_h < 1 || p->stride_w < 1 || p->dil_h < 1 || p->dil_w < 1)
        return aie_fail(AIE_EINVAL, "pool2d: strides (%lld, %lld) and dilations (%lld, %lld) must be >= 1",
                        (long long)p->stride_h, (long long)p->stride_w, (long long)p->dil_h, (long long)p->dil_w);
    const int64_t span_h = (p->kh - 1) * p->dil_h + 1, span_w = (p->kw - 1) * p->dil_w + 1;
    if (p->pad_top < 0 || p->pad_left < 0 || p->pad_bottom < 0 || p->pad_right < 0 || p->pad_top >= span_h ||
        p->pad_bottom >= span_h || p->pad_left >= span_w || p->pad_right >= span_w)
        return aie_fail(AIE_EINVAL, "pool2d: pads (%lld, %lld, %lld, %lld) must be >= 0 and smaller than the window "
                        "span %lldx%lld", (long long)p->pad_top, (long long)p->pad_left, (long long)p->pad_bottom,
                        (long long)p->pad_right, (long long)span_h, (long long)span_w);
    if (span_h > p->H + p->pad_top + p->pad_bottom || span_w > p->W + p->pad_left + p->pad_right)
        return aie_fail(AIE_EINVAL, "pool2d: window span %lldx%lld is larger than the padded input %lldx%lld",
                        (long long)span_h, (long long)span_w, (long long)(p->H + p->pad_top + p->pad_bottom),
                        (long long)(p->W + p->pad_left + p->pad_right));
    if (P) *P = pool_out(p->H, p->pad_top, p->pad_bottom, p->kh, p->dil_h, p->stride_h, p->ceil_mode);
    if (Q) *Q = pool_out(p->W, p->pad_left, p->pad_right, p->kw, p->dil_w, p->stride_w, p->ceil_mode);
    return AIE_OK;
}

static void pool_task(void *ctx, int64_t task, int64_t ntasks) {
    const aie_pool_args *a = ctx;
    const int64_t rows = a->p->N * a->P, r0 = rows * task / ntasks, r1 = rows * (task + 1) / ntasks;
    if (r0 < r1) aie_kernels()->pool(a, r0, r1);
}

static int threads_for(int64_t work, int nthreads) {
    int nt = nthreads <= 0 ? aie_threads_get() : nthreads;
    if (nt < 1) nt = 1;
    return work < nt ? (int)(work > 0 ? work : 1) : nt;
}

int aie_pool2d(int kind, const aie_pool2d_params *p, const float *x, float *y, int nthreads) {
    int64_t P, Q;
    int rc;
    if (aie_ensure_init()) return aie_init();
    if (kind != AIE_POOL_MAX && kind != AIE_POOL_AVG)
        return aie_fail(AIE_EINVAL, "pool2d: kind %d is neither AIE_POOL_MAX (0) nor AIE_POOL_AVG (1)", kind);
    if ((rc = aie_pool2d_output_shape(p, &P, &Q))) return rc;
    if (p->N == 0) return AIE_OK;
    if (!x || !y) return aie_fail(AIE_EINVAL, "pool2d: NULL input or output");
    aie_pool_args a = {p, P, Q, kind, x, y};
    const int nt = threads_for(p->N * P, nthreads);
    aie_parallel_for(nt, nt, pool_task, &a);
    return AIE_OK;
}

typedef struct {
    int kind;
    int64_t N, HW, C;
    const float *x;
    float *y;
} gpool_ctx;

static void gpool_task(void *ctx, int64_t task, int64_t ntasks) {
    const gpool_ctx *g = ctx;
    const int64_t n0 = g->N * task / ntasks, n1 = g->N * (task + 1) / ntasks;
    if (n0 < n1) aie_kernels()->gpool(g->kind, g->HW, g->C, g->x, g->y, n0, n1);
}

int aie_global_pool(int kind, int64_t N, int64_t HW, int64_t C, const float *x, float *y, int nthreads) {
    if (aie_ensure_init()) return aie_init();
    if (kind != AIE_POOL_MAX && kind != AIE_POOL_AVG)
        return aie_fail(AIE_EINVAL, "global_pool: kind %d is neither AIE_POOL_MAX (0) nor AIE_POOL_AVG (1)", kind);
    if (N < 0 || HW < 1 || C < 1)
        return aie_fail(AIE_EINVAL, "global_pool: bad shape N=%lld HW=%lld C=%lld (expected N >= 0, HW, C >= 1)",
                        (long long)N, (long long)HW, (long long)C);
    if (N == 0) return AIE_OK;
    if (!x || !y) return aie_fail(AIE_EINVAL, "global_pool: NULL input or output");
    gpool_ctx g = {kind, N, HW, C, x, y};
    /* batch-1 global pools are one image: a few microseconds, not worth a
     * channel split (which would change nothing about the result anyway) */
    const int nt = threads_for(N, nthreads);
    aie_parallel_for(nt, nt, gpool_task, &g);
    return AIE_OK;
}
