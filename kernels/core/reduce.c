/*
 * Reductions over a set of axes, and arg-max/min along one axis.
 *
 * The shape is simplified first (size-1 dims dropped, neighbouring dims with
 * the same kept/reduced flag merged). Then one of two vector strategies:
 *  - innermost dim reduced: each output element reduces contiguous runs
 *    (row_reduce) and folds the runs' partials in row-major order;
 *  - innermost dim kept: each group of contiguous outputs accumulates whole
 *    input rows into itself (col_accumulate), also in row-major order.
 * PROD and LOG_SUM_EXP walk elements one at a time (scalar, double sums).
 * Every output element is computed by one task in an order fixed by the
 * shape, so results do not depend on the thread count. The exception, a
 * whole contiguous tensor reduced to one value, is split into blocks whose
 * number depends on the size alone (see SPLIT_MAX), folded in block order.
 */
#include <math.h>
#include <string.h>

#include "aie_reduce.h"
#include "aie_eltwise.h"
#include "vmath.h"

#define COL_CHUNK 1024 /* columns per task in the kept-inner strategy */

typedef struct {
    int nk, nr;                      /* kept and reduced dims after simplification */
    int64_t kshape[AIE_MAX_DIMS], kstride[AIE_MAX_DIMS];
    int64_t rshape[AIE_MAX_DIMS], rstride[AIE_MAX_DIMS];
    int inner_reduced;               /* the innermost (stride 1) dim is reduced */
    int64_t nout, count;             /* outputs, elements reduced per output */
} red_shape;

/* A whole contiguous tensor reduced to one value is cut into at most
 * SPLIT_MAX blocks of at least SPLIT_MIN elements; the block count depends
 * on the size alone, so the partials (and their in-order fold) are the same
 * for every thread count. */
#define SPLIT_MAX 64
#define SPLIT_MIN (64 * 1024)

typedef struct {
    red_shape s;
    int op;
    const float *x;
    float *y;
    int64_t units, ntasks, nchunks;
    const aie_vm_table *vm;
    float partial[SPLIT_MAX]; /* split mode: one per block */
    int split;
} red_ctx;

static int simplify(red_shape *s, int ndim, const int64_t *shape, uint32_t mask) {
    int64_t sh[AIE_MAX_DIMS], st[AIE_MAX_DIMS];
    int fl[AIE_MAX_DIMS], k = 0;
    int64_t stride = 1;
    s->nout = 1;
    s->count = 1;
    for (int d = ndim - 1; d >= 0; d--) { /* innermost first */
        int red = (mask >> d) & 1;
        if (red) s->count *= shape[d];
        else s->nout *= shape[d];
        if (shape[d] != 1) {
            if (k > 0 && fl[k - 1] == red && st[k - 1] * sh[k - 1] == stride) {
                sh[k - 1] *= shape[d];
            } else {
                sh[k] = shape[d];
                st[k] = stride;
                fl[k] = red;
                k++;
            }
        }
        stride *= shape[d];
    }
    s->nk = s->nr = 0;
    s->inner_reduced = k > 0 && fl[0];
    for (int i = k - 1; i >= 0; i--) { /* back to outermost first */
        if (fl[i]) { s->rshape[s->nr] = sh[i]; s->rstride[s->nr++] = st[i]; }
        else { s->kshape[s->nk] = sh[i]; s->kstride[s->nk++] = st[i]; }
    }
    return AIE_OK;
}

/* Offset of the idx-th combination of dims [0, n) of shape/stride (row-major). */
static int64_t offset_of(int64_t idx, int n, const int64_t *shape, const int64_t *stride) {
    int64_t off = 0;
    for (int d = n - 1; d >= 0; d--) {
        off += (idx % shape[d]) * stride[d];
        idx /= shape[d];
    }
    return off;
}

static int vr_of(int op) {
    switch (op) {
    case AIE_REDUCE_MAX: return AIE_VR_MAX;
    case AIE_REDUCE_MIN: return AIE_VR_MIN;
    case AIE_REDUCE_L1: return AIE_VR_ABSSUM;
    case AIE_REDUCE_L2: case AIE_REDUCE_SUM_SQUARE: return AIE_VR_SUMSQ;
    default: return AIE_VR_SUM;
    }
}

static float identity_of(int vr) { return vr == AIE_VR_MAX ? -INFINITY : vr == AIE_VR_MIN ? INFINITY : 0.0f; }

static float fold(int vr, float a, float b) {
    if (vr == AIE_VR_MAX) return (a > b || a != a) ? a : b;
    if (vr == AIE_VR_MIN) return (a < b || a != a) ? a : b;
    return a + b;
}

static float finish(int op, float v, int64_t count) {
    switch (op) {
    case AIE_REDUCE_MEAN: return v / (float)count;
    case AIE_REDUCE_L2: return sqrtf(v);
    case AIE_REDUCE_LOG_SUM: return logf(v);
    default: return v;
    }
}

/* PROD / LOG_SUM_EXP: element by element. */
static float reduce_scalar(const red_ctx *c, const float *base) {
    const red_shape *s = &c->s;
    if (c->op == AIE_REDUCE_PROD) {
        float p = 1.0f;
        for (int64_t r = 0; r < s->count; r++) p *= base[offset_of(r, s->nr, s->rshape, s->rstride)];
        return p;
    }
    float m = -INFINITY;
    for (int64_t r = 0; r < s->count; r++) m = fold(AIE_VR_MAX, m, base[offset_of(r, s->nr, s->rshape, s->rstride)]);
    if (isinf(m) || isnan(m)) return m; /* all -inf (or empty), an +inf, or a NaN */
    double sum = 0.0;
    for (int64_t r = 0; r < s->count; r++) sum += exp((double)base[offset_of(r, s->nr, s->rshape, s->rstride)] - m);
    return (float)(m + log(sum));
}

static void reduce_task(void *vctx, int64_t t, int64_t nt) {
    const red_ctx *c = vctx;
    const red_shape *s = &c->s;
    int vr = vr_of(c->op);
    int64_t lo, hi;
    aie_ops_chunk(c->units, t, c->ntasks, &lo, &hi);
    if (c->op == AIE_REDUCE_PROD || c->op == AIE_REDUCE_LOG_SUM_EXP) {
        for (int64_t o = lo; o < hi; o++) c->y[o] = reduce_scalar(c, c->x + offset_of(o, s->nk, s->kshape, s->kstride));
        return;
    }
    if (c->split) {
        red_ctx *w = vctx; /* each task writes only its own partials */
        for (int64_t b = lo; b < hi; b++) {
            int64_t b0, b1;
            aie_ops_chunk(s->count, b, c->units, &b0, &b1);
            w->partial[b] = c->vm->row_reduce(vr, c->x + b0, b1 - b0, 0.0f);
        }
        return;
    }
    if (s->inner_reduced) {
        /* runs: the innermost reduced dim; the others are walked row-major */
        int64_t run = s->rshape[s->nr - 1], nruns = s->count / run;
        for (int64_t o = lo; o < hi; o++) {
            const float *base = c->x + offset_of(o, s->nk, s->kshape, s->kstride);
            float acc = identity_of(vr);
            for (int64_t r = 0; r < nruns; r++) {
                float part = c->vm->row_reduce(vr, base + offset_of(r, s->nr - 1, s->rshape, s->rstride), run, 0.0f);
                acc = fold(vr, acc, part);
            }
            c->y[o] = finish(c->op, acc, s->count);
        }
        return;
    }
    /* innermost dim kept: outputs come in contiguous groups of `width` */
    int64_t width = s->nk ? s->kshape[s->nk - 1] : 1;
    for (int64_t u = lo; u < hi; u++) {
        int64_t g = u / c->nchunks, j0 = (u % c->nchunks) * COL_CHUNK;
        int64_t w = width - j0 < COL_CHUNK ? width - j0 : COL_CHUNK;
        float *acc = c->y + g * width + j0;
        const float *base = c->x + offset_of(g, s->nk - 1, s->kshape, s->kstride) + j0;
        float ident = identity_of(vr);
        for (int64_t j = 0; j < w; j++) acc[j] = ident;
        for (int64_t r = 0; r < s->count; r++)
            c->vm->col_accumulate(vr, acc, base + offset_of(r, s->nr, s->rshape, s->rstride), w);
        for (int64_t j = 0; j < w; j++) acc[j] = finish(c->op, acc[j], s->count);
    }
}

int aie_reduce(int op, int ndim, const int64_t *shape, const float *x, uint32_t axes_mask, float *y, int nthreads) {
    aie_ensure_init();
    if (op < 0 || op >= AIE_REDUCE_COUNT) return aie_fail(AIE_EINVAL, "reduce: unknown op %d", op);
    if (ndim < 0 || ndim > AIE_MAX_DIMS) return aie_fail(AIE_EINVAL, "reduce: ndim %d outside [0, %d]", ndim, AIE_MAX_DIMS);
    if (ndim < 32 && (axes_mask >> ndim))
        return aie_fail(AIE_EINVAL, "reduce: axes mask 0x%x names dims beyond ndim %d", axes_mask, ndim);
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0) return aie_fail(AIE_EINVAL, "reduce: dim %d has negative size %lld", d, (long long)shape[d]);
    red_ctx c;
    memset(&c, 0, sizeof c);
    simplify(&c.s, ndim, shape, axes_mask);
    if (c.s.nout == 0) return AIE_OK;
    if (!x && c.s.count) return aie_fail(AIE_EINVAL, "reduce: NULL input");
    if (!y) return aie_fail(AIE_EINVAL, "reduce: NULL output");
    c.op = op;
    c.x = x;
    c.y = y;
    c.vm = aie_vm();
    int scalar = op == AIE_REDUCE_PROD || op == AIE_REDUCE_LOG_SUM_EXP;
    if (c.s.count == 0) { /* empty reduction: the identity */
        float v = op == AIE_REDUCE_PROD ? 1.0f : op == AIE_REDUCE_LOG_SUM_EXP ? -INFINITY : finish(op, identity_of(vr_of(op)), 0);
        for (int64_t o = 0; o < c.s.nout; o++) y[o] = v;
        return AIE_OK;
    }
    int64_t nblocks = c.s.count / SPLIT_MIN < SPLIT_MAX ? c.s.count / SPLIT_MIN : SPLIT_MAX;
    if (!scalar && c.s.nout == 1 && c.s.nr == 1 && c.s.inner_reduced && nblocks > 1) {
        c.split = 1;
        c.units = nblocks;
        c.ntasks = aie_ops_tasks(c.units, SPLIT_MIN, nthreads);
        aie_parallel_for(c.ntasks, aie_ops_threads(nthreads), reduce_task, &c);
        int vr = vr_of(op);
        float acc = identity_of(vr);
        for (int64_t b = 0; b < nblocks; b++) acc = fold(vr, acc, c.partial[b]);
        y[0] = finish(op, acc, c.s.count);
        return AIE_OK;
    }
    if (scalar || c.s.inner_reduced) {
        c.units = c.s.nout;
    } else {
        int64_t width = c.s.nk ? c.s.kshape[c.s.nk - 1] : 1;
        c.nchunks = (width + COL_CHUNK - 1) / COL_CHUNK;
        c.units = (c.s.nout / width) * c.nchunks;
    }
    c.ntasks = aie_ops_tasks(c.units, (c.s.count * c.s.nout) / c.units * (scalar ? 8 : 1), nthreads);
    aie_parallel_for(c.ntasks, aie_ops_threads(nthreads), reduce_task, &c);
    return AIE_OK;
}

/* ---- arg max / min ------------------------------------------------------- */

typedef struct {
    const float *x;
    int64_t *y;
    int64_t outer, axis, inner, ntasks;
    int is_max, last;
} arg_ctx;

static void arg_task(void *vctx, int64_t t, int64_t nt) {
    const arg_ctx *c = vctx;
    int64_t lo, hi;
    aie_ops_chunk(c->outer * c->inner, t, c->ntasks, &lo, &hi);
    for (int64_t u = lo; u < hi; u++) {
        int64_t o = u / c->inner, i = u % c->inner;
        const float *x = c->x + o * c->axis * c->inner + i;
        int64_t best = 0;
        float bv = x[0];
        for (int64_t k = 1; k < c->axis && bv == bv; k++) { /* stop at the first NaN */
            float v = x[k * c->inner];
            int better = v != v || (c->is_max ? (c->last ? v >= bv : v > bv) : (c->last ? v <= bv : v < bv));
            if (better) best = k, bv = v;
        }
        c->y[u] = best;
    }
}

int aie_arg_reduce(int op, int ndim, const int64_t *shape, const float *x, int axis, int select_last, int64_t *y,
                   int nthreads) {
    aie_ensure_init();
    if (op != AIE_REDUCE_MAX && op != AIE_REDUCE_MIN)
        return aie_fail(AIE_EINVAL, "arg_reduce: op %d (expected AIE_REDUCE_MAX or AIE_REDUCE_MIN)", op);
    if (ndim < 1 || ndim > AIE_MAX_DIMS) return aie_fail(AIE_EINVAL, "arg_reduce: ndim %d outside [1, %d]", ndim, AIE_MAX_DIMS);
    if (axis < 0 || axis >= ndim) return aie_fail(AIE_EINVAL, "arg_reduce: axis %d outside [0, %d)", axis, ndim);
    arg_ctx c = {.x = x, .y = y, .outer = 1, .inner = 1, .axis = shape[axis], .is_max = op == AIE_REDUCE_MAX,
                 .last = select_last != 0};
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return aie_fail(AIE_EINVAL, "arg_reduce: dim %d has negative size", d);
        if (d < axis) c.outer *= shape[d];
        if (d > axis) c.inner *= shape[d];
    }
    if (c.outer * c.inner == 0) return AIE_OK;
    if (c.axis == 0) return aie_fail(AIE_EINVAL, "arg_reduce: axis %d is empty (no index to return)", axis);
    if (!x || !y) return aie_fail(AIE_EINVAL, "arg_reduce: NULL tensor pointer");
    c.ntasks = aie_ops_tasks(c.outer * c.inner, c.axis, nthreads);
    aie_parallel_for(c.ntasks, aie_ops_threads(nthreads), arg_task, &c);
    return AIE_OK;
}
