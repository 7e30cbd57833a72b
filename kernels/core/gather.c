/* Gather along an axis: row copies of inner * elem_size bytes. */
#include <string.h>

#include "aie_layout.h"
#include "vmath.h"

typedef struct {
    const char *x;
    char *y;
    const int64_t *idx;
    int64_t outer, axis, inner, nidx, ntasks;
    size_t es;
} gather_ctx;

static void gather_task(void *vctx, int64_t t, int64_t nt) {
    const gather_ctx *c = vctx;
    int64_t lo, hi;
    size_t row = (size_t)c->inner * c->es;
    aie_ops_chunk(c->outer * c->nidx, t, c->ntasks, &lo, &hi);
    for (int64_t u = lo; u < hi; u++) {
        int64_t o = u / c->nidx, j = u % c->nidx, k = c->idx[j] < 0 ? c->idx[j] + c->axis : c->idx[j];
        memcpy(c->y + (size_t)u * row, c->x + (size_t)(o * c->axis + k) * row, row);
    }
}

int aie_gather(size_t elem_size, const void *x, int64_t outer, int64_t axis_len, int64_t inner,
               const int64_t *indices, int64_t nidx, void *y, int nthreads) {
    aie_ensure_init();
    if (elem_size == 0 || elem_size > 8) return aie_fail(AIE_EINVAL, "gather: element size %zu (expected 1..8)", elem_size);
    if (outer < 0 || axis_len < 0 || inner < 0 || nidx < 0) return aie_fail(AIE_EINVAL, "gather: negative dims");
    if (nidx && !indices) return aie_fail(AIE_EINVAL, "gather: NULL indices");
    /* every index is checked before anything is written: no half-done output */
    for (int64_t j = 0; j < nidx; j++)
        if (indices[j] < -axis_len || indices[j] >= axis_len)
            return aie_fail(AIE_EINVAL, "gather: index %lld at position %lld is outside [-%lld, %lld)",
                            (long long)indices[j], (long long)j, (long long)axis_len, (long long)axis_len);
    if (outer * nidx * inner == 0) return AIE_OK;
    if (!x || !y) return aie_fail(AIE_EINVAL, "gather: NULL tensor pointer");
    gather_ctx c = {.x = x, .y = y, .idx = indices, .outer = outer, .axis = axis_len, .inner = inner, .nidx = nidx,
                    .es = elem_size};
    c.ntasks = aie_ops_tasks(outer * nidx, inner * (int64_t)elem_size / 4 + 1, nthreads);
    aie_parallel_for(c.ntasks, aie_ops_threads(nthreads), gather_task, &c);
    return AIE_OK;
}
