/* Concat and split along an axis: row copies of len * inner * elem_size bytes. */
#include <string.h>

#include "aie_layout.h"
#include "vmath.h"

typedef struct {
    const char *const *xs;
    char *const *ys;
    const char *x;
    char *y;
    const int64_t *lens;
    int n;
    int64_t outer, inner, total, ntasks;
    size_t es;
} cat_ctx;

/* One unit = one outer index: its n pieces are copied in order. */
static void concat_task(void *vctx, int64_t t, int64_t nt) {
    const cat_ctx *c = vctx;
    int64_t lo, hi;
    size_t es = c->es;
    aie_ops_chunk(c->outer, t, c->ntasks, &lo, &hi);
    for (int64_t o = lo; o < hi; o++) {
        int64_t at = 0;
        for (int k = 0; k < c->n; k++) {
            size_t bytes = (size_t)(c->lens[k] * c->inner) * es;
            size_t pos = (size_t)((o * c->total + at) * c->inner) * es;
            if (c->y) memcpy(c->y + pos, c->xs[k] + (size_t)o * bytes, bytes);
            else memcpy(c->ys[k] + (size_t)o * bytes, c->x + pos, bytes);
            at += c->lens[k];
        }
    }
}

static int check_pieces(const char *what, size_t es, int n, const int64_t *lens, int64_t outer, int64_t inner,
                        int64_t *total) {
    if (es == 0 || es > 8) return aie_fail(AIE_EINVAL, "%s: element size %zu (expected 1..8)", what, es);
    if (n < 0 || outer < 0 || inner < 0) return aie_fail(AIE_EINVAL, "%s: negative count or dims", what);
    *total = 0;
    for (int k = 0; k < n; k++) {
        if (lens[k] < 0) return aie_fail(AIE_EINVAL, "%s: piece %d has negative length %lld", what, k, (long long)lens[k]);
        *total += lens[k];
    }
    return AIE_OK;
}

int aie_concat(size_t elem_size, int n, const void *const *xs, const int64_t *axis_lens, int64_t outer,
               int64_t inner, void *y, int nthreads) {
    aie_ensure_init();
    cat_ctx c = {.xs = (const char *const *)xs, .y = y, .lens = axis_lens, .n = n, .outer = outer, .inner = inner,
                 .es = elem_size};
    int rc = check_pieces("concat", elem_size, n, axis_lens, outer, inner, &c.total);
    if (rc) return rc;
    if (outer * c.total * inner == 0) return AIE_OK;
    for (int k = 0; k < n; k++)
        if (axis_lens[k] && !xs[k]) return aie_fail(AIE_EINVAL, "concat: input %d is NULL", k);
    if (!y) return aie_fail(AIE_EINVAL, "concat: NULL output");
    c.ntasks = aie_ops_tasks(outer, c.total * inner * (int64_t)elem_size / 4 + 1, nthreads);
    aie_parallel_for(c.ntasks, aie_ops_threads(nthreads), concat_task, &c);
    return AIE_OK;
}

int aie_split(size_t elem_size, const void *x, int64_t outer, int64_t inner, int n, const int64_t *axis_lens,
              void *const *ys, int nthreads) {
    aie_ensure_init();
    cat_ctx c = {.ys = (char *const *)ys, .x = x, .lens = axis_lens, .n = n, .outer = outer, .inner = inner,
                 .es = elem_size};
    int rc = check_pieces("split", elem_size, n, axis_lens, outer, inner, &c.total);
    if (rc) return rc;
    if (outer * c.total * inner == 0) return AIE_OK;
    for (int k = 0; k < n; k++)
        if (axis_lens[k] && !ys[k]) return aie_fail(AIE_EINVAL, "split: output %d is NULL", k);
    if (!x) return aie_fail(AIE_EINVAL, "split: NULL input");
    c.ntasks = aie_ops_tasks(outer, c.total * inner * (int64_t)elem_size / 4 + 1, nthreads);
    aie_parallel_for(c.ntasks, aie_ops_threads(nthreads), concat_task, &c);
    return AIE_OK;
}
