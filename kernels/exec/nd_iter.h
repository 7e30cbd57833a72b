/* Internal: row-wise walk over an N-d index space for up to four strided
 * operands. The converter collapses mergeable dims first, so the innermost
 * dim is long and the per-row index arithmetic is amortised. */
#ifndef AIE_ND_ITER_H
#define AIE_ND_ITER_H

#include "exec_ops.h"

typedef struct {
    int rank;
    int nops;
    int64_t shape[AIE_MAX_DIMS];
    int64_t st[4][AIE_MAX_DIMS]; /* element strides per operand */
} aie_nd;

/* Read a step's tail `shape[r], strides[nops][r]` (aie_ops.def); 0, or -1
 * when the rank is out of range. */
static inline int aie_nd_parse(aie_nd *nd, int64_t r, const int64_t *dims, int nops) {
    if (r < 1 || r > AIE_MAX_DIMS) return -1;
    nd->rank = (int)r;
    nd->nops = nops;
    for (int d = 0; d < r; d++) nd->shape[d] = dims[d];
    for (int o = 0; o < nops; o++)
        for (int d = 0; d < r; d++) nd->st[o][d] = dims[r * (1 + o) + d];
    return 0;
}

static inline int64_t aie_nd_rows(const aie_nd *nd) {
    int64_t rows = 1;
    for (int d = 0; d < nd->rank - 1; d++) rows *= nd->shape[d];
    return rows;
}

static inline int64_t aie_nd_numel(const aie_nd *nd) { return aie_nd_rows(nd) * nd->shape[nd->rank - 1]; }

/* Element offsets of row `row` (the index over every dim but the last). */
static inline void aie_nd_row_offsets(const aie_nd *nd, int64_t row, int64_t *off) {
    for (int o = 0; o < nd->nops; o++) off[o] = 0;
    for (int d = nd->rank - 2; d >= 0; d--) {
        int64_t i = row % nd->shape[d];
        row /= nd->shape[d];
        for (int o = 0; o < nd->nops; o++) off[o] += i * nd->st[o][d];
    }
}

/* Element-at-a-time walks (pad, gather/scatter by element): a coordinate
 * counter over a shape, and row-major strides. */
static inline int64_t aie_shape_numel(int64_t r, const int64_t *shape) {
    int64_t n = 1;
    for (int64_t d = 0; d < r; d++) n *= shape[d];
    return n;
}

static inline void aie_row_major_strides(int64_t r, const int64_t *shape, int64_t *str) {
    str[r - 1] = 1;
    for (int64_t d = r - 2; d >= 0; d--) str[d] = str[d + 1] * shape[d + 1];
}

/* Advance cnt to the next row-major coordinate of shape (after the last it
 * wraps to all zeros). */
static inline void aie_coord_next(int64_t r, const int64_t *shape, int64_t *cnt) {
    for (int64_t d = r - 1; d >= 0; d--) {
        if (++cnt[d] < shape[d]) return;
        cnt[d] = 0;
    }
}

/* GatherElements / ScatterElements: the index tensor (shape ishape) walked
 * in row-major order; each index (negative counts from the end) replaces its
 * coordinate's `axis` component to address the data tensor (dshape). */
typedef struct {
    int64_t rank, axis, idt, n;
    const int64_t *ishape, *dshape;
    int64_t dstr[AIE_MAX_DIMS], cnt[AIE_MAX_DIMS];
} aie_elements_walk;

/* 0, or -1 when the rank is out of range. */
static inline int aie_elements_walk_init(aie_elements_walk *w, int64_t r, const int64_t *ishape,
                                         const int64_t *dshape, int64_t axis, int64_t idt) {
    if (r < 1 || r > AIE_MAX_DIMS) return -1;
    w->rank = r, w->axis = axis, w->idt = idt, w->ishape = ishape, w->dshape = dshape;
    w->n = aie_shape_numel(r, ishape);
    aie_row_major_strides(r, dshape, w->dstr);
    for (int64_t d = 0; d < r; d++) w->cnt[d] = 0;
    return 0;
}

/* The data offset for index element i, the walk's next coordinate (the walk
 * then steps past it); -1 when the index is out of range. */
static inline int64_t aie_elements_walk_next(aie_elements_walk *w, const void *idx, int64_t i) {
    int64_t k = aie_load_index(idx, w->idt, i), len = w->dshape[w->axis], off = 0;
    if (k < 0) k += len;
    if (k < 0 || k >= len) return -1;
    for (int64_t d = 0; d < w->rank; d++) off += (d == w->axis ? k : w->cnt[d]) * w->dstr[d];
    aie_coord_next(w->rank, w->ishape, w->cnt);
    return off;
}

/* Split [0, n) into contiguous chunks for parallel_for task `task`. */
static inline void aie_chunk(int64_t n, int64_t task, int64_t ntasks, int64_t *lo, int64_t *hi) {
    *lo = n * task / ntasks;
    *hi = n * (task + 1) / ntasks;
}

/* Tasks worth running for `work` elements: small tensors stay on one thread
 * (a pool wake-up costs more than ~32 K simple element ops). */
static inline int64_t aie_tasks_for(int64_t work, int64_t rows, int nthreads) {
    int64_t t = nthreads > 0 ? nthreads : aie_threads_get();
    if (work < 32768) t = 1;
    if (t > rows) t = rows;
    return t < 1 ? 1 : t;
}

#endif
