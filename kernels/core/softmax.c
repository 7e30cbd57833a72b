/*
 * Softmax / log-softmax along the middle dim of [outer, axis_len, inner].
 * inner == 1: each row is contiguous (max, exp-shift, sum, scale).
 * inner > 1: columns are processed in chunks of SOFTMAX_CHUNK, with the
 * running max and sum for the chunk in stack arrays (no allocation), so the
 * axis is walked row by row with unit-stride vector loops.
 */
#include <math.h>

#include "aie_norm.h"
#include "aie_eltwise.h"
#include "vmath.h"

/* 256 floats x 2 = 2 KiB of stack: one L1-resident chunk of maxes and sums. */
#define SOFTMAX_CHUNK 256

typedef struct {
    const float *x;
    float *y;
    int64_t outer, axis, inner, nchunks, ntasks;
    int log;
    const aie_vm_table *vm;
} softmax_ctx;

static void softmax_row(const softmax_ctx *c, const float *x, float *y) {
    const aie_vm_table *vm = c->vm;
    int64_t n = c->axis;
    float m = vm->row_reduce(AIE_VR_MAX, x, n, 0.0f);
    vm->exp_shift(x, &m, 0, y, n);
    float s = vm->row_reduce(AIE_VR_SUM, y, n, 0.0f);
    if (c->log) {
        float ls = logf(s);
        vm->binary(AIE_BINARY_SUB, x, 1, &m, 0, y, n);  /* x - max first: exact for nearby values */
        vm->binary(AIE_BINARY_SUB, y, 1, &ls, 0, y, n);
    } else {
        vm->binary(AIE_BINARY_DIV, y, 1, &s, 0, y, n);
    }
}

static void softmax_cols(const softmax_ctx *c, int64_t o, int64_t j0, int64_t w) {
    const aie_vm_table *vm = c->vm;
    float m[SOFTMAX_CHUNK], s[SOFTMAX_CHUNK];
    const float *x = c->x + o * c->axis * c->inner + j0;
    float *y = c->y + o * c->axis * c->inner + j0;
    for (int64_t j = 0; j < w; j++) m[j] = x[j], s[j] = 0.0f;
    for (int64_t k = 1; k < c->axis; k++) vm->col_accumulate(AIE_VR_MAX, m, x + k * c->inner, w);
    for (int64_t k = 0; k < c->axis; k++) {
        vm->exp_shift(x + k * c->inner, m, 1, y + k * c->inner, w);
        vm->col_accumulate(AIE_VR_SUM, s, y + k * c->inner, w);
    }
    if (c->log) {
        vm->unary(AIE_U_LOG, s, s, w, 0.0f, 0.0f);
        for (int64_t k = 0; k < c->axis; k++) {
            vm->binary(AIE_BINARY_SUB, x + k * c->inner, 1, m, 1, y + k * c->inner, w);
            vm->binary(AIE_BINARY_SUB, y + k * c->inner, 1, s, 1, y + k * c->inner, w);
        }
    } else {
        for (int64_t k = 0; k < c->axis; k++) vm->binary(AIE_BINARY_DIV, y + k * c->inner, 1, s, 1, y + k * c->inner, w);
    }
}

static void softmax_task(void *vctx, int64_t t, int64_t nt) {
    const softmax_ctx *c = vctx;
    int64_t lo, hi;
    aie_ops_chunk(c->outer * c->nchunks, t, c->ntasks, &lo, &hi);
    for (int64_t u = lo; u < hi; u++) {
        int64_t o = u / c->nchunks, ch = u % c->nchunks;
        if (c->inner == 1) {
            softmax_row(c, c->x + o * c->axis, c->y + o * c->axis);
        } else {
            int64_t j0 = ch * SOFTMAX_CHUNK, w = c->inner - j0 < SOFTMAX_CHUNK ? c->inner - j0 : SOFTMAX_CHUNK;
            softmax_cols(c, o, j0, w);
        }
    }
}

int aie_softmax(const float *x, float *y, int64_t outer, int64_t axis_len, int64_t inner, int log_softmax,
                int nthreads) {
    aie_ensure_init();
    if (outer < 0 || axis_len < 0 || inner < 0)
        return aie_fail(AIE_EINVAL, "softmax: negative dims [%lld, %lld, %lld]", (long long)outer,
                        (long long)axis_len, (long long)inner);
    if (outer == 0 || axis_len == 0 || inner == 0) return AIE_OK;
    if (!x || !y) return aie_fail(AIE_EINVAL, "softmax: NULL tensor pointer");
    softmax_ctx c = {.x = x, .y = y, .outer = outer, .axis = axis_len, .inner = inner, .log = log_softmax != 0,
                     .vm = aie_vm()};
    c.nchunks = inner == 1 ? 1 : (inner + SOFTMAX_CHUNK - 1) / SOFTMAX_CHUNK;
    int64_t units = outer * c.nchunks;
    c.ntasks = aie_ops_tasks(units, axis_len * (inner < SOFTMAX_CHUNK ? inner : SOFTMAX_CHUNK) * 8, nthreads);
    aie_parallel_for(c.ntasks, aie_ops_threads(nthreads), softmax_task, &c);
    return AIE_OK;
}
