/*
 * Unary float32 math, logical not and dtype casts over contiguous arrays,
 * split into equal element ranges across the pool (elementwise: the split
 * cannot change any result).
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "aie_eltwise.h"
#include "vmath.h"

typedef struct {
    int op, src, dst;
    const void *x;
    void *y;
    int64_t n, ntasks;
    float p0, p1;
    const aie_vm_table *vm;
    _Atomic int64_t bad;
} unary_ctx;

static void unary_task(void *vctx, int64_t t, int64_t nt) {
    unary_ctx *c = vctx;
    int64_t lo, hi;
    aie_ops_chunk(c->n, t, c->ntasks, &lo, &hi);
    if (lo < hi) c->vm->unary(c->op, (const float *)c->x + lo, (float *)c->y + lo, hi - lo, c->p0, c->p1);
}

int aie_unary(int op, const float *x, float *y, int64_t n, float p0, float p1, int nthreads) {
    aie_ensure_init();
    if (!(aie_unary_flags(op) & AIE_UF_VEC)) return aie_fail(AIE_EINVAL, "unary: unknown op %d", op);
    if (n < 0) return aie_fail(AIE_EINVAL, "unary: negative element count %lld", (long long)n);
    if (n > 0 && (!x || !y)) return aie_fail(AIE_EINVAL, "unary: NULL tensor pointer");
    unary_ctx c = {.op = op, .x = x, .y = y, .n = n, .p0 = p0, .p1 = p1, .vm = aie_vm()};
    /* transcendental ops cost ~10x a copy per element: split them sooner */
    int cheap = op == AIE_U_RELU || op == AIE_U_ABS || op == AIE_U_NEG || op == AIE_U_CLIP;
    c.ntasks = aie_ops_tasks(n, cheap ? 1 : 8, nthreads);
    if (c.ntasks > 0) aie_parallel_for(c.ntasks, aie_ops_threads(nthreads), unary_task, &c);
    return AIE_OK;
}

static void not_task(void *vctx, int64_t t, int64_t nt) {
    unary_ctx *c = vctx;
    int64_t lo, hi;
    aie_ops_chunk(c->n, t, c->ntasks, &lo, &hi);
    const uint8_t *x = c->x;
    uint8_t *y = c->y;
    for (int64_t i = lo; i < hi; i++) y[i] = x[i] == 0;
}

int aie_logical_not(const uint8_t *x, uint8_t *y, int64_t n, int nthreads) {
    aie_ensure_init();
    if (n < 0) return aie_fail(AIE_EINVAL, "logical_not: negative element count %lld", (long long)n);
    if (n > 0 && (!x || !y)) return aie_fail(AIE_EINVAL, "logical_not: NULL tensor pointer");
    unary_ctx c = {.x = x, .y = y, .n = n};
    c.ntasks = aie_ops_tasks(n, 1, nthreads);
    if (c.ntasks > 0) aie_parallel_for(c.ntasks, aie_ops_threads(nthreads), not_task, &c);
    return AIE_OK;
}

/* ---- cast --------------------------------------------------------------- */

static double load_as_double(int dt, const void *x, int64_t i) {
    switch (dt) {
    case AIE_DT_F32: return ((const float *)x)[i];
    case AIE_DT_I32: return ((const int32_t *)x)[i];
    case AIE_DT_U8: case AIE_DT_BOOL: return ((const uint8_t *)x)[i];
    default: return (double)((const int64_t *)x)[i];
    }
}

static void note_bad(unary_ctx *c, int64_t at) {
    int64_t cur = atomic_load(&c->bad);
    while (at < cur && !atomic_compare_exchange_weak(&c->bad, &cur, at)) {
    }
}

/* Float -> int: truncate toward zero; NaN/Inf/out of range is an error
 * (C leaves it undefined; ONNX does not define it either). */
#define F2I(T, LO, HI)                                                          \
    for (int64_t i = lo; i < hi; i++) {                                          \
        float v = xf[i];                                                         \
        if (!(v > (LO) && v < (HI))) { note_bad(c, i); return; }                 \
        ((T *)c->y)[i] = (T)v;                                                   \
    }

static void cast_task(void *vctx, int64_t t, int64_t nt) {
    unary_ctx *c = vctx;
    int64_t lo, hi;
    aie_ops_chunk(c->n, t, c->ntasks, &lo, &hi);
    const float *xf = c->x;
    if (c->src == AIE_DT_F32 && c->dst == AIE_DT_I64) {
        F2I(int64_t, -9223373136366403584.0f, 9223372036854775808.0f)
    } else if (c->src == AIE_DT_F32 && c->dst == AIE_DT_I32) {
        F2I(int32_t, -2147483904.0f, 2147483648.0f)
    } else if (c->src == AIE_DT_F32 && c->dst == AIE_DT_U8) {
        F2I(uint8_t, -1.0f, 256.0f)
    } else if (c->dst == AIE_DT_BOOL) {
        for (int64_t i = lo; i < hi; i++) ((uint8_t *)c->y)[i] = load_as_double(c->src, c->x, i) != 0.0;
    } else if (c->src == AIE_DT_I64 && c->dst != AIE_DT_F32) {
        /* integer narrowing wraps (two's complement), as numpy astype */
        const int64_t *xi = c->x;
        for (int64_t i = lo; i < hi; i++) {
            if (c->dst == AIE_DT_I32) ((int32_t *)c->y)[i] = (int32_t)(uint32_t)(uint64_t)xi[i];
            else if (c->dst == AIE_DT_U8) ((uint8_t *)c->y)[i] = (uint8_t)(uint64_t)xi[i];
            else ((int64_t *)c->y)[i] = xi[i];
        }
    } else {
        for (int64_t i = lo; i < hi; i++) {
            int64_t iv = c->src == AIE_DT_I32 ? ((const int32_t *)c->x)[i]
                         : (c->src == AIE_DT_U8 || c->src == AIE_DT_BOOL) ? ((const uint8_t *)c->x)[i]
                         : 0;
            switch (c->dst) {
            case AIE_DT_F32:
                ((float *)c->y)[i] = c->src == AIE_DT_F32 ? xf[i]
                                     : c->src == AIE_DT_I64 ? (float)((const int64_t *)c->x)[i]
                                                               : (float)iv;
                break;
            case AIE_DT_I64: ((int64_t *)c->y)[i] = iv; break;
            case AIE_DT_I32: ((int32_t *)c->y)[i] = (int32_t)iv; break;
            default: ((uint8_t *)c->y)[i] = (uint8_t)iv; break;
            }
        }
    }
}

static int dtype_known(int dt) {
    return dt == AIE_DT_F32 || dt == AIE_DT_I64 || dt == AIE_DT_I32 || dt == AIE_DT_U8 ||
           dt == AIE_DT_BOOL;
}

int aie_cast(int src_dtype, int dst_dtype, const void *x, void *y, int64_t n, int nthreads) {
    aie_ensure_init();
    if (!dtype_known(src_dtype) || !dtype_known(dst_dtype))
        return aie_fail(AIE_EINVAL, "cast: dtype %d -> %d not supported (float32, int64, int32, uint8, bool)",
                        src_dtype, dst_dtype);
    if (n < 0) return aie_fail(AIE_EINVAL, "cast: negative element count %lld", (long long)n);
    if (n > 0 && (!x || !y)) return aie_fail(AIE_EINVAL, "cast: NULL tensor pointer");
    unary_ctx c = {.src = src_dtype, .dst = dst_dtype, .x = x, .y = y, .n = n};
    atomic_store(&c.bad, INT64_MAX);
    c.ntasks = aie_ops_tasks(n, 1, nthreads);
    if (c.ntasks > 0) aie_parallel_for(c.ntasks, aie_ops_threads(nthreads), cast_task, &c);
    int64_t bad = atomic_load(&c.bad);
    if (bad != INT64_MAX)
        return aie_fail(AIE_EINVAL, "cast: element %lld = %g does not fit the integer type (NaN, inf or out of range)",
                        (long long)bad, (double)((const float *)x)[bad]);
    return AIE_OK;
}
