/* Indexing executor ops: Gather, GatherElements, Pad. Indices are checked
 * against the data shape at run time: an out-of-range index is an error, not
 * an out-of-bounds read. */
#include "nd_iter.h"

#include <string.h>

int aie_x_gather(const aie_step_args *a) {
    const aie_gather_step *sp = (const aie_gather_step *)(const void *)a->ip;
    size_t es = (size_t)sp->esize;
    int64_t outer = sp->outer, axis_dim = sp->axis_dim, inner = sp->inner, nidx = sp->nidx, idt = sp->idx_dtype;
    char *o = a->t[0];
    const char *d = a->t[1];
    const void *idx = a->t[2];
    size_t row = (size_t)inner * es;
    for (int64_t j = 0; j < nidx; j++) {
        int64_t k = aie_load_index(idx, idt, j);
        if (k < 0) k += axis_dim;
        if (k < 0 || k >= axis_dim)
            return aie_fail(AIE_EINVAL, "gather index %lld out of range [-%lld, %lld)",
                            (long long)aie_load_index(idx, idt, j), (long long)axis_dim, (long long)axis_dim);
    }
    for (int64_t ou = 0; ou < outer; ou++)
        for (int64_t j = 0; j < nidx; j++) {
            int64_t k = aie_load_index(idx, idt, j);
            if (k < 0) k += axis_dim;
            memcpy(o + ((size_t)(ou * nidx + j)) * row, d + ((size_t)(ou * axis_dim + k)) * row, row);
        }
    return AIE_OK;
}

int aie_x_gather_elements(const aie_step_args *a) {
    const aie_gather_elements_step *sp = (const aie_gather_elements_step *)(const void *)a->ip;
    size_t es = (size_t)sp->esize;
    aie_elements_walk w; /* the output has the index tensor's shape */
    if (aie_elements_walk_init(&w, sp->rank, sp->dims, sp->dims + sp->rank, sp->axis, sp->idx_dtype))
        return aie_fail(AIE_EINVAL, "bad rank %lld", (long long)sp->rank);
    char *o = a->t[0];
    const char *src = a->t[1];
    for (int64_t i = 0; i < w.n; i++) {
        int64_t off = aie_elements_walk_next(&w, a->t[2], i);
        if (off < 0) return aie_fail(AIE_EINVAL, "gather_elements index out of range");
        memcpy(o + (size_t)i * es, src + (size_t)off * es, es);
    }
    return AIE_OK;
}

/* Source index of output coordinate i along a padded dim, or -1 for "fill". */
static int64_t pad_src(int64_t i, int64_t begin, int64_t n, int64_t mode) {
    int64_t s = i - begin;
    if (s >= 0 && s < n) return s;
    if (mode == 0) return -1;
    if (mode == 2) return s < 0 ? 0 : n - 1;
    if (n == 1) return 0;
    /* reflect without repeating the edge: period 2(n-1) */
    int64_t p = 2 * (n - 1);
    s %= p;
    if (s < 0) s += p;
    return s < n ? s : p - s;
}

int aie_x_pad(const aie_step_args *a) {
    const aie_pad_step *sp = (const aie_pad_step *)(const void *)a->ip;
    size_t es = (size_t)sp->esize;
    int64_t r = sp->rank;
    if (r < 1 || r > AIE_MAX_DIMS) return aie_fail(AIE_EINVAL, "bad rank %lld", (long long)r);
    const int64_t *ishape = sp->dims, *oshape = sp->dims + r, *begin = sp->dims + 2 * r;
    int64_t mode = sp->mode;
    const int64_t *value = &sp->value;
    int64_t istr[AIE_MAX_DIMS], cnt[AIE_MAX_DIMS] = {0}, n = aie_shape_numel(r, oshape);
    aie_row_major_strides(r, ishape, istr);
    char *o = a->t[0];
    const char *x = a->t[1];
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int64_t d = 0; d < r && off >= 0; d++) {
            int64_t s = pad_src(cnt[d], begin[d], ishape[d], mode);
            off = s < 0 ? -1 : off + s * istr[d];
        }
        memcpy(o + (size_t)i * es, off < 0 ? (const char *)value : x + (size_t)off * es, es);
        aie_coord_next(r, oshape, cnt);
    }
    return AIE_OK;
}
