/*
 * Binary arithmetic, comparisons and where() with numpy broadcasting.
 *
 * The output is walked as flat element ranges (one per task) cut into row
 * segments by the broadcast odometer (eltwise_nd.h). A float32 segment whose
 * operands are contiguous or broadcast scalars (strides 0/1) runs on the
 * selected ISA's vector loop; other strides run on the scalar reference
 * loop (any stride), so results never depend on the task split.
 * Integer ops are plain C: they serve shape arithmetic, not bulk compute.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "aie_eltwise.h"
#include "eltwise_nd.h"
#include "vmath.h"

typedef struct {
    aie_nd nd;
    int op, dtype;
    const char *a, *b, *c; /* c: where's condition */
    char *y;
    size_t esize;
    int64_t ntasks;
    _Atomic int64_t bad; /* lowest output index that failed (INT64_MAX: none) */
} bin_ctx;

static size_t dtype_size(int dtype) {
    switch (dtype) {
    case AIE_DT_F32: case AIE_DT_I32: return 4;
    case AIE_DT_I64: return 8;
    case AIE_DT_U8: case AIE_DT_BOOL: return 1;
    default: return 0;
    }
}

static void note_bad(bin_ctx *c, int64_t at) {
    int64_t cur = atomic_load(&c->bad);
    while (at < cur && !atomic_compare_exchange_weak(&c->bad, &cur, at)) {
    }
}

/* Calls seg(c, row_offsets, column, count, output_index) for every row segment
 * of elements [lo, hi). */
typedef void (*segment_fn)(bin_ctx *c, const int64_t *off, int64_t col, int64_t cnt, int64_t at);

static void for_segments(bin_ctx *c, int64_t task, segment_fn seg) {
    int64_t lo, hi;
    aie_ops_chunk(c->nd.numel, task, c->ntasks, &lo, &hi);
    if (lo >= hi) return;
    int64_t n = c->nd.n, col = lo % n;
    aie_nd_pos p;
    aie_nd_seek(&c->nd, &p, lo / n);
    while (lo < hi) {
        int64_t cnt = n - col < hi - lo ? n - col : hi - lo;
        seg(c, p.off, col, cnt, lo);
        lo += cnt;
        col = 0;
        if (lo < hi) aie_nd_next_row(&c->nd, &p);
    }
}

static void run(bin_ctx *c, aie_task_fn fn, int nthreads) {
    c->ntasks = aie_ops_tasks(c->nd.numel, 1, nthreads);
    atomic_store(&c->bad, INT64_MAX);
    if (c->ntasks > 0) aie_parallel_for(c->ntasks, aie_ops_threads(nthreads), fn, c);
}

/* ---- binary ---------------------------------------------------------- */

static int pow_is_vector_exact(float e) {
    return e == 0.0f || e == 0.5f || e == 1.0f || e == 2.0f || e == 3.0f || e == -1.0f;
}

/* Rows shorter than a vector (the detector's [anchors, 8] class scores by
 * their [anchors, 1] objectness) paid more for the ISA dispatch than for the
 * arithmetic: these four ops run inline, rounding exactly as the vector
 * loops do (one correctly rounded operation each). */
#define SHORT_ROW 16
#define SHORT_LOOP(expr) for (int64_t i = 0; i < n; i++) { float u = a[i * sa], w = b[i * sb]; y[i] = (expr); }

static int seg_f32_short(int op, const float *a, int64_t sa, const float *b, int64_t sb, float *y, int64_t n) {
    switch (op) {
    case AIE_BINARY_ADD: SHORT_LOOP(u + w); return 1;
    case AIE_BINARY_SUB: SHORT_LOOP(u - w); return 1;
    case AIE_BINARY_MUL: SHORT_LOOP(u * w); return 1;
    case AIE_BINARY_DIV: SHORT_LOOP(u / w); return 1;
    default: return 0;
    }
}

static void seg_f32(bin_ctx *c, const float *a, int64_t sa, const float *b, int64_t sb, float *y, int64_t n) {
    if (n <= SHORT_ROW && seg_f32_short(c->op, a, sa, b, sb, y, n)) return;
    int vec = (sa == 0 || sa == 1) && (sb == 0 || sb == 1);
    if (c->op == AIE_BINARY_POW) vec = vec && sb == 0 && sa == 1 && pow_is_vector_exact(b[0]);
    (vec ? aie_vm() : &aie_vm_scalar)->binary(c->op, a, sa, b, sb, y, n);
}

#define INT_BINARY(T, TMIN)                                                                    \
    static int seg_##T(int op, const T *a, int64_t sa, const T *b, int64_t sb, T *y, int64_t n, \
                       int64_t *bad) {                                                         \
        for (int64_t i = 0; i < n; i++) {                                                      \
            T u = a[i * sa], w = b[i * sb], r;                                                 \
            switch (op) {                                                                      \
            case AIE_BINARY_ADD: r = (T)((uint64_t)u + (uint64_t)w); break;                    \
            case AIE_BINARY_SUB: r = (T)((uint64_t)u - (uint64_t)w); break;                    \
            case AIE_BINARY_MUL: r = (T)((uint64_t)u * (uint64_t)w); break;                    \
            case AIE_BINARY_DIV:                                                               \
                if (w == 0) { *bad = i; return -1; }                                           \
                r = (u == TMIN && w == -1) ? u : u / w;                                        \
                break;                                                                         \
            case AIE_BINARY_POW: {                                                             \
                if (w < 0) { *bad = i; return -1; }                                            \
                uint64_t acc = 1, base = (uint64_t)u;                                          \
                for (T e = w; e > 0; e >>= 1, base *= base)                                    \
                    if (e & 1) acc *= base;                                                    \
                r = (T)acc;                                                                    \
                break;                                                                         \
            }                                                                                  \
            case AIE_BINARY_MAX: r = u > w ? u : w; break;                                     \
            default: r = u < w ? u : w; break;                                                 \
            }                                                                                  \
            y[i] = r;                                                                          \
        }                                                                                      \
        return 0;                                                                              \
    }
INT_BINARY(int64_t, INT64_MIN)
INT_BINARY(int32_t, INT32_MIN)

static void seg_binary(bin_ctx *c, const int64_t *off, int64_t col, int64_t cnt, int64_t at) {
    int64_t sa = c->nd.st[0][c->nd.ndim - 1], sb = c->nd.st[1][c->nd.ndim - 1];
    int64_t ao = off[0] + col * sa, bo = off[1] + col * sb, bad = -1;
    size_t es = c->esize;
    const char *a = c->a + ao * (int64_t)es, *b = c->b + bo * (int64_t)es;
    char *y = c->y + at * (int64_t)es;
    switch (c->dtype) {
    case AIE_DT_F32: seg_f32(c, (const float *)a, sa, (const float *)b, sb, (float *)y, cnt); break;
    case AIE_DT_I64:
        if (seg_int64_t(c->op, (const int64_t *)a, sa, (const int64_t *)b, sb, (int64_t *)y, cnt, &bad)) note_bad(c, at + bad);
        break;
    case AIE_DT_I32:
        if (seg_int32_t(c->op, (const int32_t *)a, sa, (const int32_t *)b, sb, (int32_t *)y, cnt, &bad)) note_bad(c, at + bad);
        break;
    default: { /* BOOL logic */
        const uint8_t *ua = (const uint8_t *)a, *ub = (const uint8_t *)b;
        uint8_t *uy = (uint8_t *)y;
        for (int64_t i = 0; i < cnt; i++) {
            int u = ua[i * sa] != 0, w = ub[i * sb] != 0;
            uy[i] = (uint8_t)(c->op == AIE_BINARY_AND ? (u & w) : c->op == AIE_BINARY_OR ? (u | w) : (u ^ w));
        }
    }
    }
}

static void binary_task(void *ctx, int64_t t, int64_t nt) { for_segments(ctx, t, seg_binary); }

int aie_binary(int op, int dtype, int ndim, const int64_t *shape, const void *a, const int64_t *a_strides,
               const void *b, const int64_t *b_strides, void *y, int nthreads) {
    aie_ensure_init();
    bin_ctx c;
    memset(&c, 0, sizeof c);
    if (op < 0 || op >= AIE_BINARY_COUNT) return aie_fail(AIE_EINVAL, "binary: unknown op %d", op);
    int logic = op == AIE_BINARY_AND || op == AIE_BINARY_OR || op == AIE_BINARY_XOR;
    int ok = logic ? dtype == AIE_DT_BOOL
                   : (dtype == AIE_DT_F32 || dtype == AIE_DT_I64 || dtype == AIE_DT_I32);
    if (!ok)
        return aie_fail(AIE_EINVAL, "binary op %d: dtype %d not supported (expected %s)", op, dtype,
                        logic ? "bool" : "float32, int64 or int32");
    const int64_t *st[2] = {a_strides, b_strides};
    int rc = aie_nd_init(&c.nd, "binary", ndim, shape, 2, st);
    if (rc) return rc;
    if (c.nd.numel && (!a || !b || !y)) return aie_fail(AIE_EINVAL, "binary: NULL tensor pointer");
    c.op = op;
    c.dtype = dtype;
    c.a = a;
    c.b = b;
    c.y = y;
    c.esize = dtype_size(dtype);
    run(&c, binary_task, nthreads);
    int64_t bad = atomic_load(&c.bad);
    if (bad != INT64_MAX)
        return aie_fail(AIE_EINVAL, "binary: integer %s at output element %lld",
                        op == AIE_BINARY_DIV ? "division by zero" : "pow with a negative exponent", (long long)bad);
    return AIE_OK;
}

/* ---- compare ---------------------------------------------------------- */

#define CMP_LOOP(T)                                                                      \
    do {                                                                                 \
        const T *ua = (const T *)a, *ub = (const T *)b;                                  \
        for (int64_t i = 0; i < cnt; i++) {                                              \
            T u = ua[i * sa], w = ub[i * sb];                                            \
            int r;                                                                       \
            switch (c->op) {                                                             \
            case AIE_CMP_EQ: r = u == w; break;                                          \
            case AIE_CMP_NE: r = u != w; break;                                          \
            case AIE_CMP_LT: r = u < w; break;                                           \
            case AIE_CMP_LE: r = u <= w; break;                                          \
            case AIE_CMP_GT: r = u > w; break;                                           \
            default: r = u >= w; break;                                                  \
            }                                                                            \
            y[i] = (uint8_t)r;                                                           \
        }                                                                                \
    } while (0)

static void seg_compare(bin_ctx *c, const int64_t *off, int64_t col, int64_t cnt, int64_t at) {
    int64_t sa = c->nd.st[0][c->nd.ndim - 1], sb = c->nd.st[1][c->nd.ndim - 1];
    size_t es = c->esize;
    const char *a = c->a + (off[0] + col * sa) * (int64_t)es, *b = c->b + (off[1] + col * sb) * (int64_t)es;
    uint8_t *y = (uint8_t *)c->y + at;
    switch (c->dtype) {
    case AIE_DT_F32: {
        int vec = (sa == 0 || sa == 1) && (sb == 0 || sb == 1);
        (vec ? aie_vm() : &aie_vm_scalar)->compare(c->op, (const float *)a, sa, (const float *)b, sb, y, cnt);
        break;
    }
    case AIE_DT_I64: CMP_LOOP(int64_t); break;
    case AIE_DT_I32: CMP_LOOP(int32_t); break;
    default: CMP_LOOP(uint8_t); break;
    }
}

static void compare_task(void *ctx, int64_t t, int64_t nt) { for_segments(ctx, t, seg_compare); }

int aie_compare(int op, int dtype, int ndim, const int64_t *shape, const void *a, const int64_t *a_strides,
                const void *b, const int64_t *b_strides, uint8_t *y, int nthreads) {
    aie_ensure_init();
    bin_ctx c;
    memset(&c, 0, sizeof c);
    if (op < 0 || op >= AIE_CMP_COUNT) return aie_fail(AIE_EINVAL, "compare: unknown op %d", op);
    if (!dtype_size(dtype))
        return aie_fail(AIE_EINVAL, "compare: dtype %d not supported (expected float32, int64, int32, uint8 or bool)", dtype);
    const int64_t *st[2] = {a_strides, b_strides};
    int rc = aie_nd_init(&c.nd, "compare", ndim, shape, 2, st);
    if (rc) return rc;
    if (c.nd.numel && (!a || !b || !y)) return aie_fail(AIE_EINVAL, "compare: NULL tensor pointer");
    c.op = op;
    c.dtype = dtype;
    c.a = a;
    c.b = b;
    c.y = (char *)y;
    c.esize = dtype_size(dtype);
    run(&c, compare_task, nthreads);
    return AIE_OK;
}

/* ---- where ------------------------------------------------------------ */

#define WHERE_LOOP(T)                                                                       \
    do {                                                                                    \
        const T *ua = (const T *)a, *ub = (const T *)b;                                     \
        T *uy = (T *)y;                                                                     \
        for (int64_t i = 0; i < cnt; i++) uy[i] = cond[i * sc] ? ua[i * sa] : ub[i * sb];   \
    } while (0)

static void seg_where(bin_ctx *c, const int64_t *off, int64_t col, int64_t cnt, int64_t at) {
    int last = c->nd.ndim - 1;
    int64_t sa = c->nd.st[0][last], sb = c->nd.st[1][last], sc = c->nd.st[2][last];
    size_t es = c->esize;
    const char *a = c->a + (off[0] + col * sa) * (int64_t)es, *b = c->b + (off[1] + col * sb) * (int64_t)es;
    const uint8_t *cond = (const uint8_t *)c->c + off[2] + col * sc;
    char *y = c->y + at * (int64_t)es;
    switch (es) {
    case 1: WHERE_LOOP(uint8_t); break;
    case 2: WHERE_LOOP(uint16_t); break;
    case 4: WHERE_LOOP(uint32_t); break;
    default: WHERE_LOOP(uint64_t); break;
    }
}

static void where_task(void *ctx, int64_t t, int64_t nt) { for_segments(ctx, t, seg_where); }

int aie_where(size_t elem_size, int ndim, const int64_t *shape, const uint8_t *cond, const int64_t *cond_strides,
              const void *a, const int64_t *a_strides, const void *b, const int64_t *b_strides, void *y,
              int nthreads) {
    aie_ensure_init();
    bin_ctx c;
    memset(&c, 0, sizeof c);
    if (elem_size != 1 && elem_size != 2 && elem_size != 4 && elem_size != 8)
        return aie_fail(AIE_EINVAL, "where: element size %zu (expected 1, 2, 4 or 8)", elem_size);
    const int64_t *st[3] = {a_strides, b_strides, cond_strides};
    int rc = aie_nd_init(&c.nd, "where", ndim, shape, 3, st);
    if (rc) return rc;
    if (c.nd.numel && (!a || !b || !y || !cond)) return aie_fail(AIE_EINVAL, "where: NULL tensor pointer");
    c.a = a;
    c.b = b;
    c.c = (const char *)cond;
    c.y = y;
    c.esize = elem_size;
    run(&c, where_task, nthreads);
    return AIE_OK;
}
