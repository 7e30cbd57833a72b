/* Extension indexing ops: TopK, ScatterElements, ScatterND, GatherND.
 * Every index is checked against the data shape at run time: an
 * out-of-range index is an error, never an out-of-bounds access. */
#include "nd_iter.h"

#include <stdlib.h>
#include <string.h>

/* ---- TopK ---------------------------------------------------------------- */

typedef struct {
    const char *base; /* first element of the lane */
    int64_t stride;   /* elements between lane entries */
    int64_t dtype;
    int64_t largest;
} topk_lane;

static double lane_value(const topk_lane *l, int64_t i) {
    const char *p = l->base;
    switch (l->dtype) {
    case AIE_DT_F32: return ((const float *)p)[i * l->stride];
    case AIE_DT_F64: return ((const double *)p)[i * l->stride];
    case AIE_DT_I32: return ((const int32_t *)p)[i * l->stride];
    default: return 0.0;
    }
}

/* Order: larger (or smaller) value first, then the lower index. int64 is
 * compared exactly (a double would merge values above 2^53). */
static int topk_cmp(const void *pa, const void *pb, void *ctx) {
    const topk_lane *l = ctx;
    int64_t ia = *(const int64_t *)pa, ib = *(const int64_t *)pb;
    int c;
    if (l->dtype == AIE_DT_I64) {
        int64_t va = ((const int64_t *)l->base)[ia * l->stride], vb = ((const int64_t *)l->base)[ib * l->stride];
        c = (va > vb) - (va < vb);
    } else {
        /* NaN ranks above every number (as numpy sorts), which also keeps
         * the order total, as qsort requires. */
        double va = lane_value(l, ia), vb = lane_value(l, ib);
        int na = va != va, nb = vb != vb;
        c = (na || nb) ? na - nb : (va > vb) - (va < vb);
    }
    if (l->largest) c = -c;
    if (c) return c;
    return (ia > ib) - (ia < ib);
}

int aie_x_topk(const aie_step_args *a) {
    const aie_axis_step *sp = (const aie_axis_step *)(const void *)a->ip;
    int64_t dt = sp->dtype, outer = sp->outer, n = sp->n, inner = sp->inner, k = sp->flag0, largest = sp->flag1;
    size_t es = aie_dtype_size(dt);
    if (!(dt == AIE_DT_F32 || dt == AIE_DT_F64 || dt == AIE_DT_I32 || dt == AIE_DT_I64))
        return aie_fail(AIE_EINVAL, "topk: dtype %lld", (long long)dt);
    if (k < 0 || k > n) return aie_fail(AIE_EINVAL, "topk: k %lld outside [0, %lld]", (long long)k, (long long)n);
    char *vals = a->t[0];
    int64_t *idx = a->t[1];
    const char *x = a->t[2];
    int64_t *order = a->t[3];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            topk_lane lane = {x + ((size_t)(o * n * inner + j)) * es, inner, dt, largest};
            for (int64_t i = 0; i < n; i++) order[i] = i;
            qsort_r(order, (size_t)n, sizeof *order, topk_cmp, &lane);
            for (int64_t r = 0; r < k; r++) {
                size_t at = (size_t)((o * k + r) * inner + j);
                memcpy(vals + at * es, lane.base + (size_t)(order[r] * inner) * es, es);
                idx[at] = order[r];
            }
        }
    return AIE_OK;
}

/* ---- scatter ------------------------------------------------------------- */

#define REDUCE_AS(T)                                                                              \
    do {                                                                                          \
        T *d = dst;                                                                               \
        T s = *(const T *)src;                                                                    \
        switch (red) {                                                                            \
        case AIE_SR_ADD: *d = (T)(*d + s); break;                                                 \
        case AIE_SR_MUL: *d = (T)(*d * s); break;                                                 \
        case AIE_SR_MAX: if (s > *d) *d = s; break;                                               \
        case AIE_SR_MIN: if (s < *d) *d = s; break;                                               \
        default: break;                                                                           \
        }                                                                                         \
    } while (0)

/* dst <- dst (red) src for one element. */
static int scatter_one(void *dst, const void *src, int64_t dt, int64_t red, size_t es) {
    if (red == AIE_SR_NONE) {
        memcpy(dst, src, es);
        return AIE_OK;
    }
    switch (dt) {
    case AIE_DT_F32: REDUCE_AS(float); break;
    case AIE_DT_F64: REDUCE_AS(double); break;
    case AIE_DT_I32: REDUCE_AS(int32_t); break;
    case AIE_DT_I64: REDUCE_AS(int64_t); break;
    default: return aie_fail(AIE_EINVAL, "scatter reduction on dtype %lld", (long long)dt);
    }
    return AIE_OK;
}

int aie_x_scatter_elements(const aie_step_args *a) {
    const aie_scatter_elements_step *sp = (const aie_scatter_elements_step *)(const void *)a->ip;
    size_t es = (size_t)sp->esize;
    int64_t dt = sp->dtype, red = sp->reduction;
    aie_elements_walk w;
    if (aie_elements_walk_init(&w, sp->rank, sp->dims, sp->dims + sp->rank, sp->axis, sp->idx_dtype))
        return aie_fail(AIE_EINVAL, "scatter_elements: bad rank %lld", (long long)sp->rank);
    char *out = a->t[0];
    const char *upd = a->t[2];
    for (int64_t i = 0; i < w.n; i++) {
        int64_t off = aie_elements_walk_next(&w, a->t[1], i);
        if (off < 0)
            return aie_fail(AIE_EINVAL, "scatter_elements index %lld out of range for axis of %lld",
                            (long long)aie_load_index(a->t[1], w.idt, i), (long long)w.dshape[w.axis]);
        int rc = scatter_one(out + (size_t)off * es, upd + (size_t)i * es, dt, red, es);
        if (rc != AIE_OK) return rc;
    }
    return AIE_OK;
}

int aie_x_scatter_nd(const aie_step_args *a) {
    const aie_scatter_nd_step *sp = (const aie_scatter_nd_step *)(const void *)a->ip;
    size_t es = (size_t)sp->esize;
    int64_t dt = sp->dtype, red = sp->reduction, nt = sp->n_tuples, k = sp->k, r = sp->rank;
    if (r < 1 || r > AIE_MAX_DIMS || k < 1 || k > r) return aie_fail(AIE_EINVAL, "scatter_nd: bad rank/k");
    const int64_t *dshape = sp->dims;
    int64_t slice = 1;
    for (int64_t d = k; d < r; d++) slice *= dshape[d];
    char *out = a->t[0];
    const int64_t *idx = a->t[1];
    const char *upd = a->t[2];
    for (int64_t t = 0; t < nt; t++) {
        int64_t off = 0;
        for (int64_t d = 0; d < k; d++) {
            int64_t v = idx[t * k + d];
            if (v < 0) v += dshape[d];
            if (v < 0 || v >= dshape[d])
                return aie_fail(AIE_EINVAL, "scatter_nd index %lld out of range for dim %lld of %lld",
                                (long long)idx[t * k + d], (long long)d, (long long)dshape[d]);
            off = off * dshape[d] + v;
        }
        for (int64_t e = 0; e < slice; e++) {
            int rc = scatter_one(out + (size_t)(off * slice + e) * es, upd + (size_t)(t * slice + e) * es, dt, red, es);
            if (rc != AIE_OK) return rc;
        }
    }
    return AIE_OK;
}

int aie_x_gather_nd(const aie_step_args *a) {
    const aie_gather_nd_step *sp = (const aie_gather_nd_step *)(const void *)a->ip;
    size_t es = (size_t)sp->esize;
    int64_t nb = sp->n_batch, per = sp->per_batch, k = sp->k, bstride = sp->batch_stride, slice = sp->slice;
    if (k < 0 || k > AIE_MAX_DIMS) return aie_fail(AIE_EINVAL, "gather_nd: bad index depth");
    const int64_t *dims = sp->dims;
    char *out = a->t[0];
    const char *data = a->t[1];
    const int64_t *idx = a->t[2];
    for (int64_t b = 0; b < nb; b++)
        for (int64_t t = 0; t < per; t++) {
            const int64_t *tup = idx + (b * per + t) * k;
            int64_t off = 0;
            for (int64_t d = 0; d < k; d++) {
                int64_t v = tup[d];
                if (v < 0) v += dims[d];
                if (v < 0 || v >= dims[d])
                    return aie_fail(AIE_EINVAL, "gather_nd index %lld out of range for dim of %lld",
                                    (long long)tup[d], (long long)dims[d]);
                off = off * dims[d] + v;
            }
            memcpy(out + (size_t)((b * per + t) * slice) * es, data + (size_t)(b * bstride + off * slice) * es,
                   (size_t)slice * es);
        }
    return AIE_OK;
}
