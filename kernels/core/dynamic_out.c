/* Ops whose output shape depends on the input values (NonZero, Compress,
 * Unique, NonMaxSuppression). Each writes into a bounded output the planner
 * sized from the input shape and stores the produced count; the executor's
 * caller (engine.plan_segments) reads the count and plans what follows for
 * that concrete shape. Outputs are written packed for the produced count
 * (a [rank, count] NonZero is rank * count contiguous words), so the caller
 * takes a prefix view instead of copying. */
#include "../exec/exec_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* An element is "nonzero" as numpy says: -0.0 is zero, NaN is not. */
static int elem_nonzero(const char *p, int64_t dt, int64_t i) {
    switch (dt) {
    case AIE_DT_F32: return ((const float *)p)[i] != 0.0f;
    case AIE_DT_F64: return ((const double *)p)[i] != 0.0;
    case AIE_DT_I32: return ((const int32_t *)p)[i] != 0;
    case AIE_DT_I64: return ((const int64_t *)p)[i] != 0;
    case AIE_DT_U8:
    case AIE_DT_I8:
    case AIE_DT_BOOL: return ((const uint8_t *)p)[i] != 0;
    case AIE_DT_I16:
    case AIE_DT_U16: return ((const uint16_t *)p)[i] != 0;
    default: return 0;
    }
}

int aie_x_nonzero(const aie_step_args *a) {
    const aie_nonzero_step *sp = (const aie_nonzero_step *)(const void *)a->ip;
    int64_t dt = sp->dtype, rank = sp->rank;
    if (!aie_dtype_size(dt) || dt == AIE_DT_F16 || dt == AIE_DT_U32 || dt == AIE_DT_U64)
        return aie_fail(AIE_EINVAL, "nonzero: dtype %lld", (long long)dt);
    if (rank < 0 || rank > AIE_MAX_DIMS) return aie_fail(AIE_EINVAL, "nonzero: rank %lld", (long long)rank);
    int64_t *y = a->t[0], *count = a->t[1];
    const char *x = a->t[2];
    int64_t numel = 1;
    for (int64_t d = 0; d < rank; d++) numel *= sp->dims[d];
    /* First pass counts, so the second writes [rank, c] packed. */
    int64_t c = 0;
    for (int64_t i = 0; i < numel; i++) c += elem_nonzero(x, dt, i);
    int64_t j = 0;
    for (int64_t i = 0; i < numel && j < c; i++) {
        if (!elem_nonzero(x, dt, i)) continue;
        int64_t rest = i;
        for (int64_t d = rank - 1; d >= 0; d--) {
            y[d * c + j] = rest % sp->dims[d];
            rest /= sp->dims[d];
        }
        j++;
    }
    *count = c;
    return AIE_OK;
}

int aie_x_compress(const aie_step_args *a) {
    const aie_compress_step *sp = (const aie_compress_step *)(const void *)a->ip;
    int64_t es = sp->esize, outer = sp->outer, n = sp->n, inner = sp->inner, m = sp->m;
    if (es <= 0 || m < 0 || m > n) return aie_fail(AIE_EINVAL, "compress: condition length %lld for an axis of %lld",
                                                   (long long)m, (long long)n);
    char *y = a->t[0];
    int64_t *count = a->t[1];
    const char *x = a->t[2];
    const uint8_t *cond = a->t[3];
    int64_t c = 0;
    for (int64_t i = 0; i < m; i++) c += cond[i] != 0;
    size_t row = (size_t)(inner * es);
    for (int64_t o = 0; o < outer; o++) {
        int64_t k = 0;
        for (int64_t i = 0; i < m; i++)
            if (cond[i]) memcpy(y + (size_t)(o * c + k++) * row, x + (size_t)(o * n + i) * row, row);
    }
    *count = c;
    return AIE_OK;
}

/* ---- Unique: slices compared lexicographically in (outer, inner) order ---- */

typedef struct {
    const char *x;
    int64_t dt, outer, n, inner;
} unique_ctx;

static int cmp_elem(const unique_ctx *u, size_t at_a, size_t at_b) {
    switch (u->dt) {
    case AIE_DT_F32:
    case AIE_DT_F64: {
        double va = u->dt == AIE_DT_F32 ? ((const float *)u->x)[at_a] : ((const double *)u->x)[at_a];
        double vb = u->dt == AIE_DT_F32 ? ((const float *)u->x)[at_b] : ((const double *)u->x)[at_b];
        /* NaN after every number and equal to NaN (numpy's unique). */
        int na = va != va, nb = vb != vb;
        if (na || nb) return na - nb;
        return (va > vb) - (va < vb);
    }
    case AIE_DT_I64: {
        int64_t va = ((const int64_t *)u->x)[at_a], vb = ((const int64_t *)u->x)[at_b];
        return (va > vb) - (va < vb);
    }
    case AIE_DT_I32: {
        int32_t va = ((const int32_t *)u->x)[at_a], vb = ((const int32_t *)u->x)[at_b];
        return (va > vb) - (va < vb);
    }
    case AIE_DT_I8: {
        int8_t va = ((const int8_t *)u->x)[at_a], vb = ((const int8_t *)u->x)[at_b];
        return (va > vb) - (va < vb);
    }
    default: { /* U8, BOOL */
        uint8_t va = ((const uint8_t *)u->x)[at_a], vb = ((const uint8_t *)u->x)[at_b];
        return (va > vb) - (va < vb);
    }
    }
}

static int cmp_slices(const unique_ctx *u, int64_t ia, int64_t ib) {
    for (int64_t o = 0; o < u->outer; o++)
        for (int64_t j = 0; j < u->inner; j++) {
            int c = cmp_elem(u, (size_t)((o * u->n + ia) * u->inner + j), (size_t)((o * u->n + ib) * u->inner + j));
            if (c) return c;
        }
    return 0;
}

/* Ties by index: the sort is stable, so a group's first entry is its first
 * occurrence. */
static int unique_order_cmp(const void *pa, const void *pb, void *ctx) {
    int64_t ia = *(const int64_t *)pa, ib = *(const int64_t *)pb;
    int c = cmp_slices(ctx, ia, ib);
    return c ? c : (ia > ib) - (ia < ib);
}

static int first_index_cmp(const void *pa, const void *pb, void *ctx) {
    const int64_t *first = ctx;
    int64_t fa = first[*(const int64_t *)pa], fb = first[*(const int64_t *)pb];
    return (fa > fb) - (fa < fb);
}

int aie_x_unique(const aie_step_args *a) {
    const aie_unique_step *sp = (const aie_unique_step *)(const void *)a->ip;
    int64_t dt = sp->dtype, n = sp->n;
    if (!(dt == AIE_DT_F32 || dt == AIE_DT_F64 || dt == AIE_DT_I64 || dt == AIE_DT_I32 || dt == AIE_DT_I8 ||
          dt == AIE_DT_U8 || dt == AIE_DT_BOOL))
        return aie_fail(AIE_EINVAL, "unique: dtype %lld", (long long)dt);
    unique_ctx u = {a->t[5], dt, sp->outer, n, sp->inner};
    size_t es = aie_dtype_size(dt);
    char *y = a->t[0];
    int64_t *indices = a->t[1], *inverse = a->t[2], *counts = a->t[3], *count = a->t[4];
    int64_t *ws = a->t[6];
    int64_t *order = ws, *group = ws + n, *first = ws + 2 * n, *rank = ws + 3 * n;
    for (int64_t i = 0; i < n; i++) order[i] = i;
    if (n > 1) qsort_r(order, (size_t)n, sizeof *order, unique_order_cmp, &u);
    /* group[g] in sorted order: first[g] its first occurrence, counts later */
    int64_t groups = 0;
    for (int64_t s = 0; s < n; s++) {
        if (s == 0 || cmp_slices(&u, order[s - 1], order[s])) first[groups++] = order[s];
        inverse[order[s]] = groups - 1;
    }
    /* rank: sorted group -> output position; unsorted output is by first
     * occurrence. group[] is reused as the output -> sorted-group map. */
    for (int64_t g = 0; g < groups; g++) group[g] = g;
    if (!sp->sorted && groups > 1) qsort_r(group, (size_t)groups, sizeof *group, first_index_cmp, first);
    for (int64_t k = 0; k < groups; k++) rank[group[k]] = k;
    for (int64_t k = 0; k < groups; k++) {
        indices[k] = first[group[k]];
        counts[k] = 0;
    }
    for (int64_t i = 0; i < n; i++) {
        inverse[i] = rank[inverse[i]];
        counts[inverse[i]]++;
    }
    size_t row = (size_t)sp->inner * es;
    for (int64_t o = 0; o < sp->outer; o++)
        for (int64_t k = 0; k < groups; k++)
            memcpy(y + (size_t)(o * groups + k) * row, u.x + (size_t)(o * n + indices[k]) * row, row);
    *count = groups;
    return AIE_OK;
}

/* ---- NonMaxSuppression (onnxruntime's semantics) ---- */

typedef struct {
    float xmin, ymin, xmax, ymax;
} nms_box;

static nms_box nms_corners(const float *b, int64_t center) {
    nms_box r;
    if (center) {
        float hw = b[2] / 2.0f, hh = b[3] / 2.0f;
        r.xmin = b[0] - hw;
        r.xmax = b[0] + hw;
        r.ymin = b[1] - hh;
        r.ymax = b[1] + hh;
    } else { /* [y1, x1, y2, x2], either corner first */
        r.ymin = fminf(b[0], b[2]);
        r.ymax = fmaxf(b[0], b[2]);
        r.xmin = fminf(b[1], b[3]);
        r.xmax = fmaxf(b[1], b[3]);
    }
    return r;
}

static int nms_suppresses(nms_box p, nms_box q, float iou_threshold) {
    float ixmin = fmaxf(p.xmin, q.xmin), iymin = fmaxf(p.ymin, q.ymin);
    float ixmax = fminf(p.xmax, q.xmax), iymax = fminf(p.ymax, q.ymax);
    if (ixmax <= ixmin || iymax <= iymin) return 0;
    float inter = (ixmax - ixmin) * (iymax - iymin);
    float area_p = (p.xmax - p.xmin) * (p.ymax - p.ymin), area_q = (q.xmax - q.xmin) * (q.ymax - q.ymin);
    float uni = area_p + area_q - inter;
    if (area_p <= 0.0f || area_q <= 0.0f || uni <= 0.0f) return 0;
    return inter / uni > iou_threshold;
}

/* Candidates come off a binary max-heap (higher score first, then the
 * lower index, as onnxruntime orders them): building it is linear and only
 * the boxes looked at until max_output are kept pay a log-time pop, where
 * sorting every candidate of a 6,300-anchor detector per class would not. */
static int nms_before(const float *s, int64_t a, int64_t b) {
    return s[a] > s[b] || (s[a] == s[b] && a < b);
}

static void nms_sift_down(int64_t *h, int64_t n, int64_t i, const float *s) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, top = i;
        if (l < n && nms_before(s, h[l], h[top])) top = l;
        if (r < n && nms_before(s, h[r], h[top])) top = r;
        if (top == i) return;
        int64_t t = h[i];
        h[i] = h[top];
        h[top] = t;
        i = top;
    }
}

int aie_x_nms(const aie_step_args *a) {
    const aie_nms_step *sp = (const aie_nms_step *)(const void *)a->ip;
    int64_t nb = sp->batches, nc = sp->classes, nbox = sp->boxes;
    int64_t *out = a->t[0], *count = a->t[1];
    const float *boxes = a->t[2], *scores = a->t[3];
    int64_t max_out = a->t[4] ? *(const int64_t *)a->t[4] : 0;
    float iou_threshold = a->t[5] ? *(const float *)a->t[5] : 0.0f;
    int has_score = a->t[6] != NULL;
    float score_threshold = has_score ? *(const float *)a->t[6] : 0.0f;
    int64_t *order = a->t[7], *chosen = order + nbox;
    if (iou_threshold < 0.0f || iou_threshold > 1.0f)
        return aie_fail(AIE_EINVAL, "nms: iou_threshold %g outside [0, 1]", (double)iou_threshold);
    if (max_out > nbox) max_out = nbox;
    int64_t total = 0;
    for (int64_t b = 0; b < nb && max_out > 0; b++)
        for (int64_t c = 0; c < nc; c++) {
            const float *s = scores + (size_t)((b * nc + c) * nbox);
            int64_t cand = 0;
            for (int64_t i = 0; i < nbox; i++)
                if (!has_score || s[i] > score_threshold) order[cand++] = i;
            for (int64_t i = cand / 2 - 1; i >= 0; i--) nms_sift_down(order, cand, i, s);
            int64_t kept = 0;
            while (cand > 0 && kept < max_out) {
                int64_t top = order[0];
                order[0] = order[--cand];
                nms_sift_down(order, cand, 0, s);
                nms_box p = nms_corners(boxes + (size_t)((b * nbox + top) * 4), sp->center_point_box);
                int keep = 1;
                for (int64_t q = 0; q < kept && keep; q++)
                    keep = !nms_suppresses(
                        p, nms_corners(boxes + (size_t)((b * nbox + chosen[q]) * 4), sp->center_point_box),
                        iou_threshold);
                if (!keep) continue;
                chosen[kept++] = top;
                out[total * 3] = b;
                out[total * 3 + 1] = c;
                out[total * 3 + 2] = top;
                total++;
            }
        }
    *count = total;
    return AIE_OK;
}
