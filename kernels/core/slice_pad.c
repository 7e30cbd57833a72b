/*
 * Slice (a strided copy with an offset) and Pad.
 *
 * Pad (constant / reflect / edge / wrap). Each output row (all dims but the
 * last) maps to one input row, or to "constant" when any outer index falls
 * in the padding; inside a row the middle is one memcpy and only the padded
 * ends map element by element. reflect and wrap use numpy's rules, so pads
 * wider than the dim reflect/wrap again.
 */
#include <string.h>

#include "aie_layout.h"
#include "transpose.h"
#include "aie_eltwise.h"
#include "vmath.h"

typedef struct {
    int nd, mode;
    int64_t in[AIE_MAX_DIMS], out[AIE_MAX_DIMS], pb[AIE_MAX_DIMS], xst[AIE_MAX_DIMS];
    const char *x, *value;
    char *y;
    size_t es;
    int64_t rows, ntasks;
} pad_ctx;

/* source index of output index i in a dim of n elements; -1: the constant */
static int64_t src_index(int64_t i, int64_t pb, int64_t n, int mode) {
    int64_t s = i - pb;
    if (s >= 0 && s < n) return s;
    switch (mode) {
    case AIE_PAD_EDGE: return s < 0 ? 0 : n - 1;
    case AIE_PAD_WRAP: return ((s % n) + n) % n;
    case AIE_PAD_REFLECT: {
        if (n == 1) return 0;
        int64_t period = 2 * (n - 1), r = ((s % period) + period) % period;
        return r < n ? r : period - r;
    }
    default: return -1;
    }
}

static void pad_task(void *vctx, int64_t t, int64_t nt) {
    const pad_ctx *c = vctx;
    int64_t lo, hi, es = (int64_t)c->es;
    int last = c->nd - 1;
    int64_t n = c->in[last], on = c->out[last], pb = c->pb[last];
    aie_ops_chunk(c->rows, t, c->ntasks, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        char *dst = c->y + r * on * es;
        int64_t off = 0, rem = r;
        int constant = 0;
        for (int d = last - 1; d >= 0; d--) {
            int64_t s = src_index(rem % c->out[d], c->pb[d], c->in[d], c->mode);
            rem /= c->out[d];
            if (s < 0) constant = 1;
            else off += s * c->xst[d];
        }
        if (constant || n == 0) {
            for (int64_t j = 0; j < on; j++) memcpy(dst + j * es, c->value, c->es);
            continue;
        }
        const char *src = c->x + off * es;
        for (int64_t j = 0; j < on; j++) {
            if (j == pb) { /* the in-range middle */
                memcpy(dst + j * es, src, (size_t)(n * es));
                j += n - 1;
                continue;
            }
            int64_t s = src_index(j, pb, n, c->mode);
            memcpy(dst + j * es, s < 0 ? c->value : src + s * es, c->es);
        }
    }
}

int aie_pad(size_t elem_size, int ndim, const int64_t *shape, const void *x, const int64_t *pads, int mode,
            const void *value, void *y, int nthreads) {
    aie_ensure_init();
    if (elem_size == 0 || elem_size > 8) return aie_fail(AIE_EINVAL, "pad: element size %zu (expected 1..8)", elem_size);
    if (ndim < 1 || ndim > AIE_MAX_DIMS) return aie_fail(AIE_EINVAL, "pad: ndim %d outside [1, %d]", ndim, AIE_MAX_DIMS);
    if (mode < AIE_PAD_CONSTANT || mode > AIE_PAD_WRAP) return aie_fail(AIE_EINVAL, "pad: unknown mode %d", mode);
    if (mode == AIE_PAD_CONSTANT && !value) return aie_fail(AIE_EINVAL, "pad: constant mode needs a value");
    pad_ctx c;
    memset(&c, 0, sizeof c);
    int64_t numel = 1, s = 1;
    for (int d = ndim - 1; d >= 0; d--) c.xst[d] = s, s *= shape[d];
    for (int d = 0; d < ndim; d++) {
        int64_t b = pads[d], e = pads[ndim + d];
        if (b < 0 || e < 0)
            return aie_fail(AIE_EINVAL, "pad: dim %d has negative pads (%lld, %lld); slice first", d, (long long)b, (long long)e);
        if (shape[d] < 0) return aie_fail(AIE_EINVAL, "pad: dim %d has negative size", d);
        if (mode != AIE_PAD_CONSTANT && shape[d] == 0 && b + e > 0)
            return aie_fail(AIE_EINVAL, "pad: dim %d is empty: nothing to %s from", d,
                            mode == AIE_PAD_EDGE ? "repeat" : mode == AIE_PAD_WRAP ? "wrap" : "reflect");
        c.in[d] = shape[d];
        c.pb[d] = b;
        c.out[d] = shape[d] + b + e;
        numel *= c.out[d];
    }
    if (numel == 0) return AIE_OK;
    if (!y || (!x && s > 0)) return aie_fail(AIE_EINVAL, "pad: NULL tensor pointer");
    c.nd = ndim;
    c.mode = mode;
    c.x = x;
    c.y = y;
    c.value = value;
    c.es = elem_size;
    c.rows = numel / c.out[ndim - 1];
    c.ntasks = aie_ops_tasks(c.rows, c.out[ndim - 1], nthreads);
    aie_parallel_for(c.ntasks, aie_ops_threads(nthreads), pad_task, &c);
    return AIE_OK;
}

int aie_slice(size_t elem_size, int ndim, const int64_t *shape, const void *x, const int64_t *starts,
              const int64_t *steps, const int64_t *out_shape, void *y, int nthreads) {
    if (ndim < 0 || ndim > AIE_MAX_DIMS)
        return aie_fail(AIE_EINVAL, "slice: ndim %d outside [0, %d]", ndim, AIE_MAX_DIMS);
    int64_t xst[AIE_MAX_DIMS], st[AIE_MAX_DIMS], off = 0;
    int empty = 0;
    aie_contiguous_strides(ndim, shape, xst);
    for (int d = 0; d < ndim; d++) empty |= out_shape[d] == 0;
    for (int d = 0; d < ndim && !empty; d++) {
        if (steps[d] == 0) return aie_fail(AIE_EINVAL, "slice: step of dim %d is 0", d);
        int64_t first = starts[d], last = starts[d] + (out_shape[d] - 1) * steps[d];
        if (first < 0 || first >= shape[d] || last < 0 || last >= shape[d])
            return aie_fail(AIE_EINVAL, "slice: dim %d reads indices %lld..%lld outside [0, %lld)", d,
                            (long long)first, (long long)last, (long long)shape[d]);
        off += first * xst[d];
        st[d] = xst[d] * steps[d];
    }
    if (empty) return AIE_OK;
    return aie_copy_nd(elem_size, ndim, out_shape, (const char *)x + off * (int64_t)elem_size, st, y, nthreads, "slice");
}
