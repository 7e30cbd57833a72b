/* Element-wise executor ops: strided copy, fill, unary, binary (with
 * broadcasting through zero strides), cast and where. Integer division and
 * modulo by zero yield 0 instead of trapping (the converter cannot rule it
 * out and a SIGFPE would take the whole server down). */
#include "nd_iter.h"

#include <math.h>
#include <string.h>

/* ---- copy / fill ------------------------------------------------------ */

typedef struct {
    aie_nd nd;
    size_t esize;
    char *out;
    const char *in;
} copy_ctx;

static void copy_task(void *vctx, int64_t task, int64_t ntasks) {
    const copy_ctx *c = vctx;
    const aie_nd *nd = &c->nd;
    int64_t rows = aie_nd_rows(nd), n = nd->shape[nd->rank - 1], lo, hi, off[4], cnt[AIE_MAX_DIMS];
    int64_t so = nd->st[0][nd->rank - 1], si = nd->st[1][nd->rank - 1];
    int64_t es = (int64_t)c->esize;
    int outer = nd->rank - 1;
    aie_chunk(rows, task, ntasks, &lo, &hi);
    if (lo >= hi) return;
    /* The row index is decomposed once; later rows step an odometer. A
     * Concat slab's rows are short (16 floats for the detector's CSP blocks)
     * and a division per row cost as much as the copy. */
    aie_nd_row_offsets(nd, lo, off);
    for (int64_t d = outer - 1, r = lo; d >= 0; d--) {
        cnt[d] = r % nd->shape[d];
        r /= nd->shape[d];
    }
    int64_t o0 = off[0], i0 = off[1];
    size_t bytes = (size_t)(n * es);
    for (int64_t r = lo; r < hi; r++) {
        char *o = c->out + o0 * es;
        const char *i = c->in + i0 * es;
        if (so == 1 && si == 1) {
            memcpy(o, i, bytes);
        } else if (es == 4) {
            for (int64_t k = 0; k < n; k++) memcpy(o + 4 * k * so, i + 4 * k * si, 4);
        } else if (es == 8) {
            for (int64_t k = 0; k < n; k++) memcpy(o + 8 * k * so, i + 8 * k * si, 8);
        } else {
            for (int64_t k = 0; k < n; k++) memcpy(o + es * k * so, i + es * k * si, (size_t)es);
        }
        for (int d = outer - 1; d >= 0; d--) {
            o0 += nd->st[0][d];
            i0 += nd->st[1][d];
            if (++cnt[d] < nd->shape[d]) break;
            cnt[d] = 0;
            o0 -= nd->st[0][d] * nd->shape[d];
            i0 -= nd->st[1][d] * nd->shape[d];
        }
    }
}

int aie_x_copy(const aie_step_args *a) {
    const aie_copy_step *sp = (const aie_copy_step *)(const void *)a->ip;
    copy_ctx c;
    c.esize = (size_t)sp->esize;
    if (aie_nd_parse(&c.nd, sp->rank, sp->dims, 2) < 0)
        return aie_fail(AIE_EINVAL, "bad rank %lld", (long long)sp->rank);
    c.out = a->t[0];
    c.in = a->t[1];
    /* A contiguous destination is the library's blocked strided copy
     * (transposes walk both sides in cache tiles); a strided one (a Concat
     * slab, a Split piece) stays on the row loop below. */
    int contiguous = 1;
    int64_t acc = 1;
    for (int d = c.nd.rank - 1; d >= 0; d--) {
        if (c.nd.shape[d] != 1 && c.nd.st[0][d] != acc) contiguous = 0;
        acc *= c.nd.shape[d];
    }
    if (contiguous && (c.esize == 1 || c.esize == 2 || c.esize == 4 || c.esize == 8))
        return aie_copy_strided(c.esize, c.nd.rank, c.nd.shape, c.in, c.nd.st[1], c.out, a->nthreads);
    int64_t rows = aie_nd_rows(&c.nd);
    aie_parallel_for(aie_tasks_for(aie_nd_numel(&c.nd), rows, a->nthreads), a->nthreads, copy_task, &c);
    return AIE_OK;
}

int aie_x_fill(const aie_step_args *a) {
    const aie_fill_step *sp = (const aie_fill_step *)(const void *)a->ip;
    size_t es = (size_t)sp->esize;
    char *o = a->t[0];
    if (es > 8) return aie_fail(AIE_EINVAL, "fill element size %zu > 8", es);
    for (int64_t i = 0; i < sp->n; i++) memcpy(o + es * (size_t)i, &sp->value, es);
    return AIE_OK;
}

/* ---- unary ------------------------------------------------------------ */

static double u_apply(int64_t op, double x, double al, double be) {
    switch (op) {
    case AIE_U_IDENTITY: return x;
    case AIE_U_RELU: return x > 0 ? x : 0 * x; /* 0*x keeps NaN */
    case AIE_U_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case AIE_U_TANH: return tanh(x);
    case AIE_U_EXP: return exp(x);
    case AIE_U_LOG: return log(x);
    case AIE_U_SQRT: return sqrt(x);
    case AIE_U_RECIPROCAL: return 1.0 / x;
    case AIE_U_NEG: return -x;
    case AIE_U_ABS: return fabs(x);
    case AIE_U_ERF: return erf(x);
    case AIE_U_CEIL: return ceil(x);
    case AIE_U_FLOOR: return floor(x);
    case AIE_U_ROUND: return nearbyint(x); /* ONNX Round: half to even */
    case AIE_U_SIN: return sin(x);
    case AIE_U_COS: return cos(x);
    case AIE_U_TAN: return tan(x);
    case AIE_U_ASIN: return asin(x);
    case AIE_U_ACOS: return acos(x);
    case AIE_U_ATAN: return atan(x);
    case AIE_U_SINH: return sinh(x);
    case AIE_U_COSH: return cosh(x);
    case AIE_U_ASINH: return asinh(x);
    case AIE_U_ACOSH: return acosh(x);
    case AIE_U_ATANH: return atanh(x);
    case AIE_U_SIGN: return x > 0 ? 1.0 : (x < 0 ? -1.0 : x);
    case AIE_U_CLIP: return isnan(x) ? x : fmin(fmax(x, al), be); /* ONNX: min(max(x, lo), hi) */
    case AIE_U_LEAKY_RELU: return x >= 0 ? x : al * x;
    case AIE_U_ELU: return x >= 0 ? x : al * (exp(x) - 1.0);
    case AIE_U_SELU: return x > 0 ? be * x : be * (al * exp(x) - al);
    case AIE_U_HARDSIGMOID: { double v = al * x + be; return v < 0 ? 0 : (v > 1 ? 1 : v); }
    case AIE_U_HARDSWISH: { double v = x / 6.0 + 0.5; return x * (v < 0 ? 0 : (v > 1 ? 1 : v)); }
    case AIE_U_SOFTPLUS: return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
    case AIE_U_SOFTSIGN: return x / (1.0 + fabs(x));
    case AIE_U_GELU: return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
    case AIE_U_GELU_TANH: return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
    case AIE_U_CELU: return (x > 0 ? x : 0) + fmin(0.0, al * (exp(x / al) - 1.0));
    case AIE_U_THRESHOLDED_RELU: return x > al ? x : 0;
    case AIE_U_MISH: return x * tanh(x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)));
    case AIE_U_SILU: return x / (1.0 + exp(-x));
    default: return NAN;
    }
}

typedef struct {
    int64_t op, dtype, n;
    void *o;
    const void *x;
    double al, be;
} unary_ctx;

static void unary_task(void *vctx, int64_t task, int64_t ntasks) {
    const unary_ctx *c = vctx;
    int64_t lo, hi;
    aie_chunk(c->n, task, ntasks, &lo, &hi);
    if (c->dtype == AIE_DT_F32) {
        float *o = c->o;
        const float *x = c->x;
        for (int64_t i = lo; i < hi; i++) o[i] = (float)u_apply(c->op, x[i], c->al, c->be);
    } else if (c->dtype == AIE_DT_F64) {
        double *o = c->o;
        const double *x = c->x;
        for (int64_t i = lo; i < hi; i++) o[i] = u_apply(c->op, x[i], c->al, c->be);
    }
}

#define INT_UNARY(T)                                                                          \
    do {                                                                                      \
        T *o = a->t[0];                                                                       \
        const T *x = a->t[1];                                                                 \
        for (int64_t i = 0; i < n; i++) {                                                     \
            T v = x[i];                                                                       \
            switch (op) {                                                                     \
            case AIE_U_NEG: o[i] = (T)(0 - v); break;                                         \
            case AIE_U_ABS: o[i] = v < 0 ? (T)(0 - v) : v; break;                             \
            case AIE_U_SIGN: o[i] = (T)(v > 0 ? 1 : (v < 0 ? -1 : 0)); break;                 \
            case AIE_U_RELU: o[i] = v > 0 ? v : 0; break;                                     \
            case AIE_U_IDENTITY: o[i] = v; break;                                             \
            case AIE_U_CLIP: v = (double)v < lo ? (T)lo : v; o[i] = (double)v > hi ? (T)hi : v; break; \
            default: return aie_fail(AIE_EINVAL, "unary op %lld not defined on integers", (long long)op); \
            }                                                                                 \
        }                                                                                     \
    } while (0)

int aie_x_unary(const aie_step_args *a) {
    const aie_unary_step *sp = (const aie_unary_step *)(const void *)a->ip;
    int64_t op = sp->op, dt = sp->dtype, n = sp->n;
    double lo = a->nf > 0 ? a->fp[0] : 0, hi = a->nf > 1 ? a->fp[1] : 0;
    if (op >= AIE_U_ISNAN && op <= AIE_U_ISINF) {
        uint8_t *o = a->t[0];
        for (int64_t i = 0; i < n; i++) {
            double v = dt == AIE_DT_F32 ? ((const float *)a->t[1])[i] : ((const double *)a->t[1])[i];
            o[i] = op == AIE_U_ISNAN ? isnan(v) : op == AIE_U_ISINF ? isinf(v)
                 : op == AIE_U_ISINF_POS ? (isinf(v) && v > 0) : (isinf(v) && v < 0);
        }
        return AIE_OK;
    }
    if (dt == AIE_DT_F32 && op == AIE_U_IDENTITY) {
        if (a->t[0] != a->t[1]) memmove(a->t[0], a->t[1], (size_t)n * sizeof(float));
        return AIE_OK;
    }
    /* lo > hi: ONNX Clip gives hi (min(max(x, lo), hi)); the library's clip
     * selects lo there, so that corner stays on u_apply. */
    /* Ops without the vector library's flag run through u_apply in double. */
    if (dt == AIE_DT_F32 && (aie_unary_flags(op) & AIE_UF_VEC) && !(op == AIE_U_CLIP && lo > hi)) {
        /* SELU: the executor passes (alpha, gamma), the library (p0 alpha, p1 gamma) too. */
        return aie_unary((int)op, a->t[1], a->t[0], n, (float)lo, (float)hi, a->nthreads);
    }
    switch (dt) {
    case AIE_DT_F32:
    case AIE_DT_F64: {
        unary_ctx c = {op, dt, n, a->t[0], a->t[1], lo, hi};
        aie_parallel_for(aie_tasks_for(n * 8, n, a->nthreads), a->nthreads, unary_task, &c);
        return AIE_OK;
    }
    case AIE_DT_BOOL: {
        if (op != AIE_U_NOT && op != AIE_U_IDENTITY) return aie_fail(AIE_EINVAL, "unary op %lld not defined on bool", (long long)op);
        uint8_t *o = a->t[0];
        const uint8_t *x = a->t[1];
        for (int64_t i = 0; i < n; i++) o[i] = op == AIE_U_NOT ? !x[i] : x[i];
        return AIE_OK;
    }
    case AIE_DT_I64: INT_UNARY(int64_t); return AIE_OK;
    case AIE_DT_I32: INT_UNARY(int32_t); return AIE_OK;
    case AIE_DT_I8: INT_UNARY(int8_t); return AIE_OK;
    case AIE_DT_I16: INT_UNARY(int16_t); return AIE_OK;
    default: return aie_fail(AIE_EINVAL, "unary op on dtype %lld", (long long)dt);
    }
}

/* ---- binary ----------------------------------------------------------- */

typedef struct {
    aie_nd nd;
    int64_t op, dt;
    char *o;
    const char *x, *y;
} binary_ctx;

static inline int64_t imod(int64_t x, int64_t y) {
    if (y == 0) return 0;
    int64_t r = x % y;
    return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
}

/* One row: n elements, operand element strides sx/sy. The three stride
 * patterns that cover almost every real broadcast get their own loop so the
 * compiler vectorises them. */
#define ROW3(T, TO, EXPR)                                                               \
    do {                                                                                \
        const T *X = (const T *)xp, *Y = (const T *)yp;                                 \
        TO *O = (TO *)op_;                                                              \
        if (sx == 1 && sy == 1) {                                                       \
            for (int64_t i = 0; i < n; i++) { T x = X[i], y = Y[i]; O[i] = (TO)(EXPR); } \
        } else if (sx == 1 && sy == 0) {                                                \
            T y = Y[0];                                                                 \
            for (int64_t i = 0; i < n; i++) { T x = X[i]; O[i] = (TO)(EXPR); }          \
        } else if (sx == 0 && sy == 1) {                                                \
            T x = X[0];                                                                 \
            for (int64_t i = 0; i < n; i++) { T y = Y[i]; O[i] = (TO)(EXPR); }          \
        } else {                                                                        \
            for (int64_t i = 0; i < n; i++) { T x = X[i * sx], y = Y[i * sy]; O[i] = (TO)(EXPR); } \
        }                                                                               \
    } while (0)

#define FLOAT_OPS(T, POW, FMOD)                                                      \
    switch (op) {                                                                    \
    case AIE_B_ADD: ROW3(T, T, x + y); return 0;                                     \
    case AIE_B_SUB: ROW3(T, T, x - y); return 0;                                     \
    case AIE_B_MUL: ROW3(T, T, x * y); return 0;                                     \
    case AIE_B_DIV: ROW3(T, T, x / y); return 0;                                     \
    case AIE_B_POW: ROW3(T, T, POW(x, y)); return 0;                                 \
    case AIE_B_MAX: ROW3(T, T, (isnan(x) || x > y) ? x : y); return 0;               \
    case AIE_B_MIN: ROW3(T, T, (isnan(x) || x < y) ? x : y); return 0;               \
    case AIE_B_FMOD: ROW3(T, T, FMOD(x, y)); return 0;                               \
    case AIE_B_MOD: ROW3(T, T, (FMOD(x, y) != 0 && ((FMOD(x, y) < 0) != (y < 0))) ? FMOD(x, y) + y : FMOD(x, y)); return 0; \
    case AIE_B_PRELU: ROW3(T, T, x < 0 ? x * y : x); return 0;                       \
    case AIE_B_EQUAL: ROW3(T, uint8_t, x == y); return 0;                            \
    case AIE_B_LESS: ROW3(T, uint8_t, x < y); return 0;                              \
    case AIE_B_LESS_EQUAL: ROW3(T, uint8_t, x <= y); return 0;                       \
    case AIE_B_GREATER: ROW3(T, uint8_t, x > y); return 0;                           \
    case AIE_B_GREATER_EQUAL: ROW3(T, uint8_t, x >= y); return 0;                    \
    default: return -1;                                                              \
    }

/* Integer ops; signed types compute MOD with the divisor's sign (ONNX fmod=0). */
#define INT_OPS(T, DIV, FMOD_, PRELU)                                                \
    switch (op) {                                                                    \
    case AIE_B_ADD: ROW3(T, T, (T)((uint64_t)x + (uint64_t)y)); return 0;            \
    case AIE_B_SUB: ROW3(T, T, (T)((uint64_t)x - (uint64_t)y)); return 0;            \
    case AIE_B_MUL: ROW3(T, T, (T)((uint64_t)x * (uint64_t)y)); return 0;            \
    case AIE_B_DIV: ROW3(T, T, DIV); return 0;                                       \
    case AIE_B_POW: ROW3(T, T, (T)pow((double)x, (double)y)); return 0;              \
    case AIE_B_MAX: ROW3(T, T, x > y ? x : y); return 0;                             \
    case AIE_B_MIN: ROW3(T, T, x < y ? x : y); return 0;                             \
    case AIE_B_MOD: ROW3(T, T, (T)imod((int64_t)x, (int64_t)y)); return 0;           \
    case AIE_B_FMOD: ROW3(T, T, FMOD_); return 0;                                    \
    case AIE_B_PRELU: ROW3(T, T, PRELU); return 0;                                   \
    case AIE_B_EQUAL: ROW3(T, uint8_t, x == y); return 0;                            \
    case AIE_B_LESS: ROW3(T, uint8_t, x < y); return 0;                              \
    case AIE_B_LESS_EQUAL: ROW3(T, uint8_t, x <= y); return 0;                       \
    case AIE_B_GREATER: ROW3(T, uint8_t, x > y); return 0;                           \
    case AIE_B_GREATER_EQUAL: ROW3(T, uint8_t, x >= y); return 0;                    \
    case AIE_B_AND: ROW3(T, uint8_t, x && y); return 0;                              \
    case AIE_B_OR: ROW3(T, uint8_t, x || y); return 0;                               \
    case AIE_B_XOR: ROW3(T, uint8_t, (!x) != (!y)); return 0;                        \
    case AIE_B_BITAND: ROW3(T, T, x & y); return 0;                                  \
    case AIE_B_BITOR: ROW3(T, T, x | y); return 0;                                   \
    case AIE_B_BITXOR: ROW3(T, T, x ^ y); return 0;                                  \
    default: return -1;                                                              \
    }

/* Signed division: y == 0 gives 0, y == -1 negates with wrap-around (MIN / -1
 * traps on x86). */
#define SDIV (y == 0 ? 0 : y == -1 ? (__typeof__(x))(0 - (uint64_t)x) : x / y)
#define SFMOD (y == 0 || y == -1 ? 0 : x % y)
#define SPRELU (x < 0 ? x * y : x)
#define UDIV (y == 0 ? 0 : x / y)
#define UFMOD (y == 0 ? 0 : x % y)
#define UPRELU ((void)y, x)

static int binary_row(int64_t op, int64_t dt, char *op_, const char *xp, const char *yp, int64_t n,
                      int64_t sx, int64_t sy) {
    switch (dt) {
    case AIE_DT_F32: FLOAT_OPS(float, powf, fmodf)
    case AIE_DT_F64: FLOAT_OPS(double, pow, fmod)
    case AIE_DT_I64: INT_OPS(int64_t, SDIV, SFMOD, SPRELU)
    case AIE_DT_I32: INT_OPS(int32_t, SDIV, SFMOD, SPRELU)
    case AIE_DT_I16: INT_OPS(int16_t, SDIV, SFMOD, SPRELU)
    case AIE_DT_I8: INT_OPS(int8_t, SDIV, SFMOD, SPRELU)
    case AIE_DT_U8: INT_OPS(uint8_t, UDIV, UFMOD, UPRELU)
    case AIE_DT_U16: INT_OPS(uint16_t, UDIV, UFMOD, UPRELU)
    case AIE_DT_U32: INT_OPS(uint32_t, UDIV, UFMOD, UPRELU)
    case AIE_DT_U64: INT_OPS(uint64_t, UDIV, UFMOD, UPRELU)
    case AIE_DT_BOOL: INT_OPS(uint8_t, UDIV, UFMOD, UPRELU)
    default: return -1;
    }
}

static void binary_task(void *vctx, int64_t task, int64_t ntasks) {
    const binary_ctx *c = vctx;
    const aie_nd *nd = &c->nd;
    int64_t rows = aie_nd_rows(nd), n = nd->shape[nd->rank - 1], lo, hi, off[4];
    size_t es = aie_dtype_size(c->dt);
    int cmp = c->op >= AIE_B_EQUAL && c->op <= AIE_B_XOR;
    size_t eo = cmp ? 1 : es;
    aie_chunk(rows, task, ntasks, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        aie_nd_row_offsets(nd, r, off);
        binary_row(c->op, c->dt, c->o + (size_t)(r * n) * eo, c->x + off[0] * (int64_t)es,
                   c->y + off[1] * (int64_t)es, n, nd->st[0][nd->rank - 1], nd->st[1][nd->rank - 1]);
    }
}

/* The library's arithmetic (aie_binary: float32 all, int32/int64 except
 * division, whose divide-by-zero is an error there and 0 here, and pow) and
 * comparisons (aie_compare); -1 when the case stays in binary_row. */
static int lib_binary(int64_t op, int64_t dt) {
    int f = dt == AIE_DT_F32, i = dt == AIE_DT_I32 || dt == AIE_DT_I64;
    switch (op) {
    case AIE_B_ADD: return f || i ? AIE_BINARY_ADD : -1;
    case AIE_B_SUB: return f || i ? AIE_BINARY_SUB : -1;
    case AIE_B_MUL: return f || i ? AIE_BINARY_MUL : -1;
    case AIE_B_DIV: return f ? AIE_BINARY_DIV : -1;
    case AIE_B_POW: return f ? AIE_BINARY_POW : -1;
    case AIE_B_MAX: return f || i ? AIE_BINARY_MAX : -1;
    case AIE_B_MIN: return f || i ? AIE_BINARY_MIN : -1;
    case AIE_B_AND: return dt == AIE_DT_BOOL ? AIE_BINARY_AND : -1;
    case AIE_B_OR: return dt == AIE_DT_BOOL ? AIE_BINARY_OR : -1;
    case AIE_B_XOR: return dt == AIE_DT_BOOL ? AIE_BINARY_XOR : -1;
    default: return -1;
    }
}

static int lib_compare(int64_t op, int64_t dt) {
    if (dt != AIE_DT_F32 && dt != AIE_DT_I32 && dt != AIE_DT_I64 && dt != AIE_DT_U8 && dt != AIE_DT_BOOL) return -1;
    switch (op) {
    case AIE_B_EQUAL: return AIE_CMP_EQ;
    case AIE_B_LESS: return AIE_CMP_LT;
    case AIE_B_LESS_EQUAL: return AIE_CMP_LE;
    case AIE_B_GREATER: return AIE_CMP_GT;
    case AIE_B_GREATER_EQUAL: return AIE_CMP_GE;
    default: return -1;
    }
}

int aie_x_binary(const aie_step_args *a) {
    const aie_binary_step *sp = (const aie_binary_step *)(const void *)a->ip;
    binary_ctx c;
    c.op = sp->op;
    c.dt = sp->dtype;
    if (aie_nd_parse(&c.nd, sp->rank, sp->dims, 2) < 0)
        return aie_fail(AIE_EINVAL, "bad rank %lld", (long long)sp->rank);
    int lop = lib_binary(c.op, c.dt);
    if (lop >= 0)
        return aie_binary(lop, (int)c.dt, c.nd.rank, c.nd.shape, a->t[1], c.nd.st[0], a->t[2], c.nd.st[1], a->t[0],
                          a->nthreads);
    lop = lib_compare(c.op, c.dt);
    if (lop >= 0)
        return aie_compare(lop, (int)c.dt, c.nd.rank, c.nd.shape, a->t[1], c.nd.st[0], a->t[2], c.nd.st[1], a->t[0],
                           a->nthreads);
    if (aie_dtype_size(c.dt) == 0) return aie_fail(AIE_EINVAL, "binary op on dtype %lld", (long long)c.dt);
    /* Validate the (op, dtype) pair once, on an empty row, before any work. */
    char dummy[8] = {0};
    if (binary_row(c.op, c.dt, dummy, dummy, dummy, 0, 1, 1) != 0)
        return aie_fail(AIE_EINVAL, "binary op %lld not defined on dtype %lld", (long long)c.op, (long long)c.dt);
    c.o = a->t[0];
    c.x = a->t[1];
    c.y = a->t[2];
    aie_parallel_for(aie_tasks_for(aie_nd_numel(&c.nd), aie_nd_rows(&c.nd), a->nthreads), a->nthreads,
                     binary_task, &c);
    return AIE_OK;
}

/* ---- cast ------------------------------------------------------------- */

static float half_to_float(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0) {
        if (m == 0) { bits = s; }
        else { /* subnormal: normalise */
            e = 127 - 15 + 1;
            while (!(m & 0x400)) { m <<= 1; e--; }
            m &= 0x3ff;
            bits = s | (e << 23) | (m << 13);
        }
    } else if (e == 31) {
        bits = s | 0x7f800000u | (m << 13);
    } else {
        bits = s | ((e + 127 - 15) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t s = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff;
    if (e == 255) return (uint16_t)(s | 0x7c00 | (m ? 0x200 : 0));
    int32_t ee = (int32_t)e - 127 + 15;
    if (ee >= 31) return (uint16_t)(s | 0x7c00);
    if (ee <= 0) {
        if (ee < -10) return (uint16_t)s;
        m |= 0x800000;
        uint32_t shift = (uint32_t)(14 - ee);
        uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (hm & 1))) hm++;
        return (uint16_t)(s | hm);
    }
    uint32_t hm = m >> 13, rem = m & 0x1fff;
    uint32_t out = s | ((uint32_t)ee << 10) | hm;
    if (rem > 0x1000 || (rem == 0x1000 && (hm & 1))) out++; /* may carry into the exponent: correct */
    return (uint16_t)out;
}

static int is_float_dt(int64_t dt) { return dt == AIE_DT_F32 || dt == AIE_DT_F64 || dt == AIE_DT_F16; }

static double load_f(const void *p, int64_t dt, int64_t i) {
    switch (dt) {
    case AIE_DT_F32: return ((const float *)p)[i];
    case AIE_DT_F64: return ((const double *)p)[i];
    default: return half_to_float(((const uint16_t *)p)[i]);
    }
}

static int64_t load_i(const void *p, int64_t dt, int64_t i) {
    switch (dt) {
    case AIE_DT_U8: case AIE_DT_BOOL: return ((const uint8_t *)p)[i];
    case AIE_DT_I8: return ((const int8_t *)p)[i];
    case AIE_DT_U16: return ((const uint16_t *)p)[i];
    case AIE_DT_I16: return ((const int16_t *)p)[i];
    case AIE_DT_I32: return ((const int32_t *)p)[i];
    case AIE_DT_U32: return ((const uint32_t *)p)[i];
    case AIE_DT_U64: return (int64_t)((const uint64_t *)p)[i];
    default: return ((const int64_t *)p)[i];
    }
}

static void store_i(void *p, int64_t dt, int64_t i, int64_t v) {
    switch (dt) {
    case AIE_DT_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case AIE_DT_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case AIE_DT_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case AIE_DT_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case AIE_DT_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case AIE_DT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case AIE_DT_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case AIE_DT_U64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    default: ((int64_t *)p)[i] = v; break;
    }
}

/* float -> int: truncation toward zero as C and numpy; NaN and values out of
 * int64 range saturate instead of being undefined behaviour. */
static int64_t f2i(double v) {
    if (isnan(v)) return 0;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}

int aie_x_cast(const aie_step_args *a) {
    const aie_cast_step *sp = (const aie_cast_step *)(const void *)a->ip;
    int64_t to = sp->to_dtype, from = sp->from_dtype, n = sp->n;
    void *o = a->t[0];
    const void *x = a->t[1];
    if (!aie_dtype_size(to) || !aie_dtype_size(from))
        return aie_fail(AIE_EINVAL, "cast %lld -> %lld unsupported", (long long)from, (long long)to);
    if (from == AIE_DT_F32 && to == AIE_DT_F32) { memmove(o, x, (size_t)n * 4); return AIE_OK; }
    /* The library casts its dtypes; float -> integer stays here, where NaN and
     * out-of-range values saturate (the library rejects them). */
    int lib_from = from == AIE_DT_F32 || from == AIE_DT_U8 || from == AIE_DT_I32 || from == AIE_DT_I64 || from == AIE_DT_BOOL;
    int lib_to = to == AIE_DT_F32 || to == AIE_DT_U8 || to == AIE_DT_I32 || to == AIE_DT_I64 || to == AIE_DT_BOOL;
    if (lib_from && lib_to && !(from == AIE_DT_F32 && to != AIE_DT_F32 && to != AIE_DT_BOOL))
        return aie_cast((int)from, (int)to, x, o, n, a->nthreads);
    for (int64_t i = 0; i < n; i++) {
        if (is_float_dt(to)) {
            double v = is_float_dt(from) ? load_f(x, from, i)
                     : from == AIE_DT_U64 ? (double)((const uint64_t *)x)[i] : (double)load_i(x, from, i);
            if (to == AIE_DT_F32) ((float *)o)[i] = (float)v;
            else if (to == AIE_DT_F64) ((double *)o)[i] = v;
            else ((uint16_t *)o)[i] = float_to_half((float)v);
        } else if (is_float_dt(from)) {
            double v = load_f(x, from, i);
            if (to == AIE_DT_BOOL) ((uint8_t *)o)[i] = v != 0;
            else store_i(o, to, i, f2i(v));
        } else {
            store_i(o, to, i, load_i(x, from, i));
        }
    }
    return AIE_OK;
}

/* ---- where ------------------------------------------------------------ */

int aie_x_where(const aie_step_args *a) {
    const aie_where_step *sp = (const aie_where_step *)(const void *)a->ip;
    aie_nd nd;
    if (aie_nd_parse(&nd, sp->rank, sp->dims, 3) < 0) return aie_fail(AIE_EINVAL, "bad rank %lld", (long long)sp->rank);
    return aie_where((size_t)sp->esize, nd.rank, nd.shape, a->t[1], nd.st[0], a->t[2], nd.st[1], a->t[3], nd.st[2],
                     a->t[0], a->nthreads);
}
