/* Reductions and normalisations: Reduce*, Softmax/LogSoftmax, LayerNorm,
 * ArgMax/ArgMin, CumSum. float32 reductions, softmax and layer norm run in
 * the library (aie_reduce.h, aie_norm.h); what stays here is the rest of the
 * dtypes (float64, integers), accumulated in double. */
#include "nd_iter.h"

#include <math.h>
#include <string.h>

static double r_init(int64_t op) {
    switch (op) {
    case AIE_R_MAX: return -INFINITY;
    case AIE_R_MIN: return INFINITY;
    case AIE_R_PROD: return 1.0;
    default: return 0.0;
    }
}

static inline double r_acc(int64_t op, double acc, double x) {
    switch (op) {
    case AIE_R_MAX: return (x > acc || isnan(x)) ? x : acc;
    case AIE_R_MIN: return (x < acc || isnan(x)) ? x : acc;
    case AIE_R_PROD: return acc * x;
    case AIE_R_SUM_SQUARE: case AIE_R_L2: return acc + x * x;
    case AIE_R_L1: return acc + fabs(x);
    case AIE_R_LOG_SUM_EXP: return acc + exp(x);
    default: return acc + x;
    }
}

static inline double r_final(int64_t op, double acc, int64_t count) {
    switch (op) {
    case AIE_R_MEAN: return acc / (double)count;
    case AIE_R_L2: return sqrt(acc);
    case AIE_R_LOG_SUM: case AIE_R_LOG_SUM_EXP: return log(acc);
    default: return acc;
    }
}

static double ld(const void *p, int64_t dt, int64_t i) {
    switch (dt) {
    case AIE_DT_F32: return ((const float *)p)[i];
    case AIE_DT_F64: return ((const double *)p)[i];
    case AIE_DT_I32: return ((const int32_t *)p)[i];
    case AIE_DT_I64: return (double)((const int64_t *)p)[i];
    case AIE_DT_U8: return ((const uint8_t *)p)[i];
    case AIE_DT_I8: return ((const int8_t *)p)[i];
    default: return 0;
    }
}

static void st(void *p, int64_t dt, int64_t i, double v) {
    switch (dt) {
    case AIE_DT_F32: ((float *)p)[i] = (float)v; break;
    case AIE_DT_F64: ((double *)p)[i] = v; break;
    case AIE_DT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case AIE_DT_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case AIE_DT_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case AIE_DT_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    default: break;
    }
}

typedef struct {
    int64_t op, dt, rows, n;
    void *o;
    const void *x;
} suffix_ctx;

/* Reduced axes are exactly the trailing ones: rows x n, contiguous. */
static void suffix_task(void *vctx, int64_t task, int64_t ntasks) {
    const suffix_ctx *c = vctx;
    int64_t lo, hi;
    aie_chunk(c->rows, task, ntasks, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        double acc = r_init(c->op);
        for (int64_t i = 0; i < c->n; i++) acc = r_acc(c->op, acc, ld(c->x, c->dt, r * c->n + i));
        st(c->o, c->dt, r, r_final(c->op, acc, c->n));
    }
}

int aie_x_reduce(const aie_step_args *a) {
    const aie_reduce_step *sp = (const aie_reduce_step *)(const void *)a->ip;
    int64_t op = sp->op, dt = sp->dtype, r = sp->rank;
    if (r < 1 || r > AIE_MAX_DIMS) return aie_fail(AIE_EINVAL, "bad rank %lld", (long long)r);
    const int64_t *shape = sp->dims, *red = sp->dims + r;
    int64_t total = 1, count = 1, first_red = r;
    for (int64_t d = 0; d < r; d++) {
        total *= shape[d];
        if (red[d]) { count *= shape[d]; if (first_red == r) first_red = d; }
    }
    if (dt == AIE_DT_F32) {
        uint32_t mask = 0;
        for (int64_t d = 0; d < r; d++) mask |= red[d] ? 1u << d : 0u;
        return aie_reduce((int)op, (int)r, shape, a->t[1], mask, a->t[0], a->nthreads);
    }
    int suffix = 1;
    for (int64_t d = first_red; d < r; d++) suffix &= red[d] != 0;
    if (suffix && total > 0) {
        suffix_ctx c = {op, dt, total / (count ? count : 1), count, a->t[0], a->t[1]};
        if (count == 0) c.rows = 0;
        aie_parallel_for(aie_tasks_for(total, c.rows, a->nthreads), a->nthreads, suffix_task, &c);
        return AIE_OK;
    }
    /* General case: one pass over the input with an output-index counter;
     * the accumulators live in the output itself (double where needed would
     * need scratch; float32 accumulation is acceptable for this rare path). */
    int64_t ostr[AIE_MAX_DIMS], cnt[AIE_MAX_DIMS] = {0}, on = 1;
    for (int64_t d = r - 1; d >= 0; d--) {
        ostr[d] = red[d] ? 0 : on;
        if (!red[d]) on *= shape[d];
    }
    for (int64_t i = 0; i < on; i++) st(a->t[0], dt, i, r_init(op));
    int64_t oi = 0;
    for (int64_t i = 0; i < total; i++) {
        st(a->t[0], dt, oi, r_acc(op, ld(a->t[0], dt, oi), ld(a->t[1], dt, i)));
        for (int64_t d = r - 1; d >= 0; d--) {
            oi += ostr[d];
            if (++cnt[d] < shape[d]) break;
            oi -= ostr[d] * shape[d];
            cnt[d] = 0;
        }
    }
    for (int64_t i = 0; i < on; i++) st(a->t[0], dt, i, r_final(op, ld(a->t[0], dt, i), count));
    return AIE_OK;
}

/* Softmax and LayerNorm are the library's (aie_norm.h): vectorised, and
 * each row owned by one task, so results do not depend on the thread count. */
int aie_x_softmax(const aie_step_args *a) {
    const aie_softmax_step *sp = (const aie_softmax_step *)(const void *)a->ip;
    return aie_softmax(a->t[1], a->t[0], sp->outer, sp->n, sp->inner, (int)sp->log, a->nthreads);
}

int aie_x_layernorm(const aie_step_args *a) {
    const aie_norm_step *sp = (const aie_norm_step *)(const void *)a->ip;
    return aie_layer_norm(a->t[1], a->t[2], a->t[3], a->t[0], sp->rows, sp->cols, (float)a->fp[0], NULL, NULL,
                          a->nthreads);
}

int aie_x_argmax(const aie_step_args *a) {
    const aie_axis_step *sp = (const aie_axis_step *)(const void *)a->ip;
    int64_t dt = sp->dtype, outer = sp->outer, n = sp->n, inner = sp->inner, last = sp->flag0, is_min = sp->flag1;
    int64_t *o = a->t[0];
    for (int64_t ou = 0; ou < outer; ou++)
        for (int64_t ii = 0; ii < inner; ii++) {
            int64_t best = 0;
            double bv = ld(a->t[1], dt, ou * n * inner + ii);
            for (int64_t i = 1; i < n; i++) {
                double v = ld(a->t[1], dt, (ou * n + i) * inner + ii);
                int better = is_min ? (v < bv || (last && v == bv)) : (v > bv || (last && v == bv));
                if (better) { bv = v; best = i; }
            }
            o[ou * inner + ii] = best;
        }
    return AIE_OK;
}

int aie_x_cumsum(const aie_step_args *a) {
    const aie_axis_step *sp = (const aie_axis_step *)(const void *)a->ip;
    int64_t dt = sp->dtype, outer = sp->outer, n = sp->n, inner = sp->inner, excl = sp->flag0, rev = sp->flag1;
    for (int64_t ou = 0; ou < outer; ou++)
        for (int64_t ii = 0; ii < inner; ii++) {
            double acc = 0;
            for (int64_t k = 0; k < n; k++) {
                int64_t i = rev ? n - 1 - k : k, at = (ou * n + i) * inner + ii;
                double v = ld(a->t[1], dt, at);
                if (excl) { st(a->t[0], dt, at, acc); acc += v; }
                else { acc += v; st(a->t[0], dt, at, acc); }
            }
        }
    return AIE_OK;
}
