/*
 * Strided copies: the engine of transpose, expand (broadcast_to), tile and
 * slice (core/slice_pad.c).
 * The output is contiguous; the input is read through strides. After
 * dropping size-1 dims and merging dims that are contiguous in the input:
 *  - innermost input stride 1: whole rows are memcpy'd;
 *  - a 2-D transpose at the core (input stride 1 on the second-to-last
 *    output dim): 32 x 32 element tiles, so both the rows read and the rows
 *    written stay in L1 (32 * 32 * 8 B = 8 KiB) instead of striding memory;
 *  - the same with a short innermost output dim (< 8, e.g. NCHW -> NHWC of
 *    an RGB image): blocks of SHORT_BLOCK output rows, one pass per output
 *    column reading the input contiguously (no per-row index arithmetic);
 *  - anything else: element loops along the innermost dim.
 */
#include <stdint.h>
#include <string.h>

#include "transpose.h"

#include "aie_layout.h"
#include "aie_eltwise.h"
#include "vmath.h"

#define TILE 32
#define SHORT_BLOCK 256
#define CP_MAX_DIMS (2 * AIE_MAX_DIMS) /* tile views each dim as (reps, size) */

typedef struct {
    int nd;
    int64_t sh[CP_MAX_DIMS], st[CP_MAX_DIMS];
    size_t es;
    const char *x;
    char *y;
    int64_t units, ntasks, nb;
    int mode; /* 0 rows, 1 tiles, 2 short rows */
} cp_ctx;

static inline void copy_elems(char *d, const char *s, int64_t n, int64_t sstride, size_t es) {
    switch (es) {
    case 1: for (int64_t j = 0; j < n; j++) d[j] = s[j * sstride]; break;
    case 2: for (int64_t j = 0; j < n; j++) memcpy(d + 2 * j, s + 2 * j * sstride, 2); break;
    case 4: for (int64_t j = 0; j < n; j++) memcpy(d + 4 * j, s + 4 * j * sstride, 4); break;
    default: for (int64_t j = 0; j < n; j++) memcpy(d + 8 * j, s + 8 * j * sstride, 8); break;
    }
}

/* d[i * n] = s[i] for i < count: one output column from a contiguous input run */
static inline void copy_column(char *d, int64_t n, const char *s, int64_t count, size_t es) {
    switch (es) {
    case 1: for (int64_t i = 0; i < count; i++) d[i * n] = s[i]; break;
    case 2: for (int64_t i = 0; i < count; i++) memcpy(d + 2 * i * n, s + 2 * i, 2); break;
    case 4: for (int64_t i = 0; i < count; i++) memcpy(d + 4 * i * n, s + 4 * i, 4); break;
    default: for (int64_t i = 0; i < count; i++) memcpy(d + 8 * i * n, s + 8 * i, 8); break;
    }
}

/* d[3i + j] = plane_j[i]: three 4-byte planes interleaved (NCHW -> NHWC of
 * an RGB image). Written in output order so the stores are sequential and
 * gcc can vectorise the loop with permutes; one pass per output column
 * instead stored every third element three times over. */
static void interleave3_4(char *d, const char *s, int64_t sl, int64_t count) {
    uint32_t *restrict y = (uint32_t *)(void *)d;
    const uint32_t *restrict a = (const uint32_t *)(const void *)s;
    const uint32_t *restrict b = a + sl, *restrict c = a + 2 * sl;
    for (int64_t i = 0; i < count; i++) {
        y[3 * i] = a[i];
        y[3 * i + 1] = b[i];
        y[3 * i + 2] = c[i];
    }
}

/* input element offset of row `r` over dims [0, nd) */
static int64_t row_offset(const cp_ctx *c, int64_t r, int nd) {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += (r % c->sh[d]) * c->st[d];
        r /= c->sh[d];
    }
    return off;
}

static void copy_task(void *vctx, int64_t t, int64_t nt) {
    const cp_ctx *c = vctx;
    int64_t lo, hi, es = (int64_t)c->es;
    aie_ops_chunk(c->units, t, c->ntasks, &lo, &hi);
    int last = c->nd - 1;
    int64_t n = c->sh[last], sl = c->st[last];
    if (c->mode == 0) {
        for (int64_t r = lo; r < hi; r++) {
            const char *src = c->x + row_offset(c, r, last) * es;
            char *dst = c->y + r * n * es;
            if (sl == 1) memcpy(dst, src, (size_t)(n * es));
            else copy_elems(dst, src, n, sl, c->es);
        }
        return;
    }
    int64_t p = c->sh[last - 1]; /* the dim read with stride 1 */
    if (c->mode == 2) {
        for (int64_t u = lo; u < hi; u++) {
            int64_t o = u / c->nb, i0 = (u % c->nb) * SHORT_BLOCK, i1 = i0 + SHORT_BLOCK < p ? i0 + SHORT_BLOCK : p;
            const char *src = c->x + row_offset(c, o, last - 1) * es;
            char *dst = c->y + o * p * n * es;
            if (n == 3 && es == 4) {
                interleave3_4(dst + i0 * n * es, src + i0 * es, sl, i1 - i0);
                continue;
            }
            for (int64_t j = 0; j < n; j++)
                copy_column(dst + (i0 * n + j) * es, n, src + (i0 + j * sl) * es, i1 - i0, c->es);
        }
        return;
    }
    for (int64_t u = lo; u < hi; u++) {
        int64_t o = u / c->nb, i0 = (u % c->nb) * TILE, i1 = i0 + TILE < p ? i0 + TILE : p;
        const char *src = c->x + row_offset(c, o, last - 1) * es;
        char *dst = c->y + o * p * n * es;
        for (int64_t j0 = 0; j0 < n; j0 += TILE) {
            int64_t j1 = j0 + TILE < n ? j0 + TILE : n;
            for (int64_t i = i0; i < i1; i++)
                copy_elems(dst + (i * n + j0) * es, src + (i + j0 * sl) * es, j1 - j0, sl, c->es);
        }
    }
}

int aie_copy_nd(size_t es, int ndim, const int64_t *shape, const void *x, const int64_t *xst, void *y,
                   int nthreads, const char *what) {
    aie_ensure_init();
    if (es != 1 && es != 2 && es != 4 && es != 8)
        return aie_fail(AIE_EINVAL, "%s: element size %zu (expected 1, 2, 4 or 8)", what, es);
    cp_ctx c;
    memset(&c, 0, sizeof c);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return aie_fail(AIE_EINVAL, "%s: dim %d has negative size %lld", what, d, (long long)shape[d]);
        numel *= shape[d];
    }
    if (numel == 0) return AIE_OK;
    if (!x || !y) return aie_fail(AIE_EINVAL, "%s: NULL tensor pointer", what);
    for (int d = 0; d < ndim; d++) { /* drop 1s, merge input-contiguous neighbours */
        if (shape[d] == 1) continue;
        if (c.nd > 0 && c.st[c.nd - 1] == xst[d] * shape[d]) {
            c.sh[c.nd - 1] *= shape[d];
            c.st[c.nd - 1] = xst[d];
        } else {
            c.sh[c.nd] = shape[d];
            c.st[c.nd++] = xst[d];
        }
    }
    if (c.nd == 0) c.sh[c.nd] = 1, c.st[c.nd++] = 1;
    c.es = es;
    c.x = x;
    c.y = y;
    int last = c.nd - 1;
    if (c.nd >= 2 && c.st[last] != 1 && c.st[last - 1] == 1 && c.sh[last] >= TILE / 4) {
        c.mode = 1;
        c.nb = (c.sh[last - 1] + TILE - 1) / TILE;
        c.units = numel / (c.sh[last] * c.sh[last - 1]) * c.nb;
        c.ntasks = aie_ops_tasks(c.units, TILE * c.sh[last], nthreads);
    } else if (c.nd >= 2 && c.st[last] != 1 && c.st[last - 1] == 1) {
        c.mode = 2;
        c.nb = (c.sh[last - 1] + SHORT_BLOCK - 1) / SHORT_BLOCK;
        c.units = numel / (c.sh[last] * c.sh[last - 1]) * c.nb;
        c.ntasks = aie_ops_tasks(c.units, SHORT_BLOCK * c.sh[last], nthreads);
    } else {
        c.units = numel / c.sh[last];
        c.ntasks = aie_ops_tasks(c.units, c.sh[last], nthreads);
    }
    aie_parallel_for(c.ntasks, aie_ops_threads(nthreads), copy_task, &c);
    return AIE_OK;
}

int aie_copy_strided(size_t elem_size, int ndim, const int64_t *shape, const void *x, const int64_t *x_strides,
                     void *y, int nthreads) {
    if (ndim < 0 || ndim > AIE_MAX_DIMS)
        return aie_fail(AIE_EINVAL, "copy_strided: ndim %d outside [0, %d]", ndim, AIE_MAX_DIMS);
    return aie_copy_nd(elem_size, ndim, shape, x, x_strides, y, nthreads, "copy_strided");
}

void aie_contiguous_strides(int ndim, const int64_t *shape, int64_t *st) {
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) st[d] = s, s *= shape[d];
}

int aie_transpose(size_t elem_size, int ndim, const int64_t *shape, const int64_t *perm, const void *x, void *y,
                  int nthreads) {
    if (ndim < 0 || ndim > AIE_MAX_DIMS)
        return aie_fail(AIE_EINVAL, "transpose: ndim %d outside [0, %d]", ndim, AIE_MAX_DIMS);
    int64_t xst[AIE_MAX_DIMS], osh[AIE_MAX_DIMS], ost[AIE_MAX_DIMS];
    int seen[AIE_MAX_DIMS] = {0};
    aie_contiguous_strides(ndim, shape, xst);
    for (int d = 0; d < ndim; d++) {
        if (perm[d] < 0 || perm[d] >= ndim || seen[perm[d]]++)
            return aie_fail(AIE_EINVAL, "transpose: perm[%d] = %lld: not a permutation of 0..%d", d,
                            (long long)perm[d], ndim - 1);
        osh[d] = shape[perm[d]];
        ost[d] = xst[perm[d]];
    }
    return aie_copy_nd(elem_size, ndim, osh, x, ost, y, nthreads, "transpose");
}

int aie_expand(size_t elem_size, int ndim, const int64_t *out_shape, int x_ndim, const int64_t *x_shape,
               const void *x, void *y, int nthreads) {
    if (ndim < 0 || ndim > AIE_MAX_DIMS || x_ndim < 0 || x_ndim > ndim)
        return aie_fail(AIE_EINVAL, "expand: ranks %d -> %d (need input rank <= output rank <= %d)", x_ndim, ndim,
                        AIE_MAX_DIMS);
    int64_t xst[AIE_MAX_DIMS], st[AIE_MAX_DIMS];
    aie_contiguous_strides(x_ndim, x_shape, xst);
    for (int d = 0; d < ndim; d++) {
        int xd = d - (ndim - x_ndim);
        if (xd < 0) { st[d] = 0; continue; }
        if (x_shape[xd] == out_shape[d]) st[d] = xst[xd];
        else if (x_shape[xd] == 1) st[d] = 0;
        else
            return aie_fail(AIE_EINVAL, "expand: input dim %d (size %lld) cannot broadcast to output dim %d (size %lld)",
                            xd, (long long)x_shape[xd], d, (long long)out_shape[d]);
    }
    return aie_copy_nd(elem_size, ndim, out_shape, x, st, y, nthreads, "expand");
}

int aie_tile(size_t elem_size, int ndim, const int64_t *shape, const int64_t *reps, const void *x, void *y,
             int nthreads) {
    if (ndim < 0 || ndim > AIE_MAX_DIMS)
        return aie_fail(AIE_EINVAL, "tile: ndim %d outside [0, %d]", ndim, AIE_MAX_DIMS);
    int64_t xst[AIE_MAX_DIMS], sh[CP_MAX_DIMS], st[CP_MAX_DIMS];
    aie_contiguous_strides(ndim, shape, xst);
    for (int d = 0; d < ndim; d++) {
        if (reps[d] < 0) return aie_fail(AIE_EINVAL, "tile: reps[%d] = %lld is negative", d, (long long)reps[d]);
        /* output dim d of size reps*n indexed r*n + i is the pair (r, i), row-major */
        sh[2 * d] = reps[d], st[2 * d] = 0;
        sh[2 * d + 1] = shape[d], st[2 * d + 1] = xst[d];
    }
    return aie_copy_nd(elem_size, 2 * ndim, sh, x, st, y, nthreads, "tile");
}
