/* Broadcast iteration: shape simplification and the row odometer. */
#include "eltwise_nd.h"

#include "aie_internal.h"

int aie_nd_init(aie_nd *nd, const char *what, int ndim, const int64_t *shape, int nops,
                const int64_t *const *strides) {
    if (ndim < 0 || ndim > AIE_MAX_DIMS)
        return aie_fail(AIE_EINVAL, "%s: ndim %d outside [0, %d]", what, ndim, AIE_MAX_DIMS);
    if (ndim > 0 && !shape) return aie_fail(AIE_EINVAL, "%s: shape is NULL", what);
    nd->nops = nops;
    nd->numel = 1;
    int k = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return aie_fail(AIE_EINVAL, "%s: dim %d has negative size %lld", what, d, (long long)shape[d]);
        nd->numel *= shape[d];
        if (shape[d] == 1) continue; /* contributes no offset */
        nd->shape[k] = shape[d];
        for (int o = 0; o < nops; o++) nd->st[o][k] = strides[o] ? strides[o][d] : 0;
        k++;
    }
    if (k == 0) { /* scalar (or all-ones) output: one row of one element */
        nd->shape[0] = 1;
        for (int o = 0; o < nops; o++) nd->st[o][0] = 0;
        k = 1;
    }
    /* merge dim d into d+1 when contiguous for every operand (innermost first) */
    int m = k - 1;
    int64_t sh[AIE_MAX_DIMS], st[AIE_ND_MAX_OPS][AIE_MAX_DIMS];
    sh[m] = nd->shape[k - 1];
    for (int o = 0; o < nops; o++) st[o][m] = nd->st[o][k - 1];
    for (int d = k - 2; d >= 0; d--) {
        int ok = 1;
        for (int o = 0; o < nops; o++) ok &= nd->st[o][d] == st[o][m] * sh[m];
        if (ok) {
            sh[m] *= nd->shape[d];
        } else {
            m--;
            sh[m] = nd->shape[d];
            for (int o = 0; o < nops; o++) st[o][m] = nd->st[o][d];
        }
    }
    nd->ndim = k - m;
    nd->rows = 1;
    for (int d = 0; d < nd->ndim; d++) {
        nd->shape[d] = sh[m + d];
        for (int o = 0; o < nops; o++) nd->st[o][d] = st[o][m + d];
        if (d < nd->ndim - 1) nd->rows *= nd->shape[d];
    }
    nd->n = nd->shape[nd->ndim - 1];
    if (nd->numel == 0) nd->rows = 0;
    return AIE_OK;
}

void aie_nd_seek(const aie_nd *nd, aie_nd_pos *p, int64_t row) {
    for (int o = 0; o < nd->nops; o++) p->off[o] = 0;
    for (int d = nd->ndim - 2; d >= 0; d--) {
        p->idx[d] = row % nd->shape[d];
        row /= nd->shape[d];
        for (int o = 0; o < nd->nops; o++) p->off[o] += p->idx[d] * nd->st[o][d];
    }
}

void aie_nd_next_row(const aie_nd *nd, aie_nd_pos *p) {
    for (int d = nd->ndim - 2; d >= 0; d--) {
        p->idx[d]++;
        for (int o = 0; o < nd->nops; o++) p->off[o] += nd->st[o][d];
        if (p->idx[d] < nd->shape[d]) return;
        for (int o = 0; o < nd->nops; o++) p->off[o] -= nd->shape[d] * nd->st[o][d];
        p->idx[d] = 0;
    }
}
