/*
 * SIMD inner loops of the binary, compare, reduction and normalisation
 * kernels, written once with GCC vector extensions over the ISA's vf type
 * and instantiated per ISA: avx2/vmath_avx2.c (vf_avx2.h, 8 lanes) and
 * avx512/vmath_avx512.c (vf_avx512.h, 16 lanes) include their vf header,
 * define VM_TABLE (the aie_vm_table to define) and include this file. The
 * unary ops and their math are vmath_unary_body.h / vmath_fn.h, shared with
 * the scalar table and the GEMM/conv epilogues.
 */
#include <math.h>
#include <string.h>

#include "aie_eltwise.h"
#include "vmath.h"

#define VW VL
typedef int32_t vi __attribute__((vector_size(VW * 4)));
typedef uint32_t vu __attribute__((vector_size(VW * 4)));
typedef int8_t vs8 __attribute__((vector_size(VW)));

static inline vf vload(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline void vstore(float *p, vf v) { memcpy(p, &v, sizeof v); }
static inline vf vset1(float x) { return (vf){0} + x; }
/* Partial load of m < VW elements, the other lanes set to `fill`. */
static inline vf vload_n(const float *p, int64_t m, float fill) {
    float t[VW];
    for (int k = 0; k < VW; k++) t[k] = fill;
    memcpy(t, p, (size_t)m * sizeof(float));
    return vload(t);
}
static inline void vstore_n(float *p, vf v, int64_t m) {
    float t[VW];
    vstore(t, v);
    memcpy(p, t, (size_t)m * sizeof(float));
}
static inline vf vsel(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }
static inline vf vabs(vf x) { return (vf)((vu)x & 0x7fffffffu); }
static inline vf vmaxn(vf a, vf b) { return vsel((a > b) | (a != a), a, b); } /* NaN-propagating */
static inline vf vminn(vf a, vf b) { return vsel((a < b) | (a != a), a, b); }

#include "vmath_unary_body.h"

/* ---- binary and compare --------------------------------------------- */

/* y = EXPR(u, w) over a (stride sa: 0 broadcasts a[0]) and b (sb); STORE
 * writes a result vector's first cnt lanes. Tail lanes past n read as PAD
 * (1 for the arithmetic: no spurious division by zero). sa/sb are
 * loop-invariant: -O3 unswitches the loop into the three cases. */
#define DEFINE_PAIRWISE(NAME, YT, EXPR, STORE, PAD)                                                \
    static void NAME(const float *a, int64_t sa, const float *b, int64_t sb, YT *y, int64_t n) {   \
        if (n <= 0) return;                                                                        \
        vf ka = vset1(a[0]), kb = vset1(b[0]);                                                     \
        int64_t i = 0;                                                                             \
        for (; i + VW <= n; i += VW) {                                                             \
            vf u = sa ? vload(a + i) : ka, w = sb ? vload(b + i) : kb;                             \
            STORE(y + i, (EXPR), VW);                                                              \
        }                                                                                          \
        if (i < n) {                                                                               \
            vf u = sa ? vload_n(a + i, n - i, PAD) : ka, w = sb ? vload_n(b + i, n - i, PAD) : kb; \
            STORE(y + i, (EXPR), n - i);                                                           \
        }                                                                                          \
    }

/* cnt is the constant VW in the loop body: the branch folds away there. */
static inline void store_floats(float *y, vf v, int64_t cnt) {
    if (cnt == VW)
        vstore(y, v);
    else
        vstore_n(y, v, cnt);
}

static inline void store_mask(uint8_t *y, vi m, int64_t cnt) {
    vs8 bytes = __builtin_convertvector(m, vs8) & 1;
    memcpy(y, &bytes, (size_t)cnt);
}

#define DEFINE_BINARY(NAME, EXPR) DEFINE_PAIRWISE(NAME, float, EXPR, store_floats, 1.0f)
#define DEFINE_COMPARE(NAME, EXPR) DEFINE_PAIRWISE(NAME, uint8_t, EXPR, store_mask, 0.0f)

DEFINE_BINARY(b_add, u + w)
DEFINE_BINARY(b_sub, u - w)
DEFINE_BINARY(b_mul, u * w)
DEFINE_BINARY(b_div, u / w)
DEFINE_BINARY(b_max, vmaxn(u, w))
DEFINE_BINARY(b_min, vminn(u, w))

/* pow with a scalar exponent the driver checked is one of these. */
static void b_pow(const float *a, int64_t sa, const float *b, int64_t sb, float *y, int64_t n) {
    float e = b[0];
    if (e == 2.0f) b_mul(a, 1, a, 1, y, n);
    else if (e == 1.0f) memmove(y, a, (size_t)n * sizeof(float));
    else if (e == 0.5f) u_SQRT(a, y, n, 0, 0);
    else if (e == -1.0f) u_RECIPROCAL(a, y, n, 0, 0);
    else if (e == 3.0f) { b_mul(a, 1, a, 1, y, n); b_mul(y, 1, a, 1, y, n); }
    else for (int64_t i = 0; i < n; i++) y[i] = 1.0f; /* e == 0: pow(x, 0) = 1, even NaN */
}

typedef void (*binary_fn)(const float *, int64_t, const float *, int64_t, float *, int64_t);
static const binary_fn binary_table[] = {
    [AIE_BINARY_ADD] = b_add, [AIE_BINARY_SUB] = b_sub, [AIE_BINARY_MUL] = b_mul,
    [AIE_BINARY_DIV] = b_div, [AIE_BINARY_POW] = b_pow, [AIE_BINARY_MAX] = b_max,
    [AIE_BINARY_MIN] = b_min,
};

static void vm_binary(int op, const float *a, int64_t sa, const float *b, int64_t sb, float *y, int64_t n) {
    binary_table[op](a, sa, b, sb, y, n);
}

DEFINE_COMPARE(c_eq, u == w)
DEFINE_COMPARE(c_ne, u != w)
DEFINE_COMPARE(c_lt, u < w)
DEFINE_COMPARE(c_le, u <= w)
DEFINE_COMPARE(c_gt, u > w)
DEFINE_COMPARE(c_ge, u >= w)

typedef void (*compare_fn)(const float *, int64_t, const float *, int64_t, uint8_t *, int64_t);
static const compare_fn compare_table[AIE_CMP_COUNT] = {
    [AIE_CMP_EQ] = c_eq, [AIE_CMP_NE] = c_ne, [AIE_CMP_LT] = c_lt,
    [AIE_CMP_LE] = c_le, [AIE_CMP_GT] = c_gt, [AIE_CMP_GE] = c_ge,
};

static void vm_compare(int op, const float *a, int64_t sa, const float *b, int64_t sb, uint8_t *y, int64_t n) {
    compare_table[op](a, sa, b, sb, y, n);
}

/* ---- reductions ------------------------------------------------------ */

/* Four independent accumulators (latency hiding), folded in a fixed order;
 * the tail is a partial vector filled with the op's identity. */
#define DEFINE_ROW_REDUCE(NAME, IDENT, MAP, COMB)                                  \
    static float NAME(const float *x, int64_t n, float c) {                        \
        vf a0 = vset1(IDENT), a1 = a0, a2 = a0, a3 = a0, vc = vset1(c);            \
        (void)vc;                                                                  \
        int64_t i = 0;                                                             \
        for (; i + 4 * VW <= n; i += 4 * VW) {                                     \
            vf u;                                                                  \
            u = vload(x + i); a0 = COMB(a0, MAP);                                  \
            u = vload(x + i + VW); a1 = COMB(a1, MAP);                             \
            u = vload(x + i + 2 * VW); a2 = COMB(a2, MAP);                         \
            u = vload(x + i + 3 * VW); a3 = COMB(a3, MAP);                         \
        }                                                                          \
        for (; i + VW <= n; i += VW) { vf u = vload(x + i); a0 = COMB(a0, MAP); }  \
        if (i < n) {                                                               \
            vf u = vload_n(x + i, n - i, 0.0f);                                    \
            vf m = MAP;                                                            \
            vi live = __builtin_convertvector(lane_ids(), vi) < (int32_t)(n - i);  \
            a1 = COMB(a1, vsel(live, m, vset1(IDENT)));                            \
        }                                                                          \
        a0 = COMB(COMB(a0, a1), COMB(a2, a3));                                     \
        float t[VW];                                                               \
        vstore(t, a0);                                                             \
        float r = t[0];                                                            \
        for (int k = 1; k < VW; k++) {                                             \
            vf rv = vset1(r), tv = vset1(t[k]);                                    \
            r = COMB(rv, tv)[0];                                                   \
        }                                                                          \
        return r;                                                                  \
    }

static inline vf lane_ids(void) {
    float t[VW];
    for (int k = 0; k < VW; k++) t[k] = (float)k;
    return vload(t);
}
#define ADDV(a, b) ((a) + (b))
DEFINE_ROW_REDUCE(r_sum, 0.0f, u, ADDV)
DEFINE_ROW_REDUCE(r_sumsq, 0.0f, (u - vc) * (u - vc), ADDV)
DEFINE_ROW_REDUCE(r_abssum, 0.0f, vabs(u), ADDV)
DEFINE_ROW_REDUCE(r_max, -INFINITY, u, vmaxn)
DEFINE_ROW_REDUCE(r_min, INFINITY, u, vminn)

static float vm_row_reduce(int op, const float *x, int64_t n, float c) {
    switch (op) {
    case AIE_VR_SUM: return r_sum(x, n, c);
    case AIE_VR_SUMSQ: return r_sumsq(x, n, c);
    case AIE_VR_ABSSUM: return r_abssum(x, n, c);
    case AIE_VR_MAX: return r_max(x, n, c);
    default: return r_min(x, n, c);
    }
}

#define DEFINE_COL_ACC(NAME, MAP, COMB)                                              \
    static void NAME(float *acc, const float *x, int64_t n) {                        \
        int64_t i = 0;                                                               \
        for (; i + VW <= n; i += VW) {                                               \
            vf u = vload(x + i);                                                     \
            vstore(acc + i, COMB(vload(acc + i), MAP));                              \
        }                                                                            \
        if (i < n) {                                                                 \
            vf u = vload_n(x + i, n - i, 0.0f);                                      \
            vstore_n(acc + i, COMB(vload_n(acc + i, n - i, 0.0f), MAP), n - i);      \
        }                                                                            \
    }

DEFINE_COL_ACC(a_sum, u, ADDV)
DEFINE_COL_ACC(a_sumsq, u * u, ADDV)
DEFINE_COL_ACC(a_abssum, vabs(u), ADDV)
DEFINE_COL_ACC(a_max, u, vmaxn)
DEFINE_COL_ACC(a_min, u, vminn)

static void vm_col_accumulate(int op, float *acc, const float *x, int64_t n) {
    switch (op) {
    case AIE_VR_SUM: a_sum(acc, x, n); break;
    case AIE_VR_SUMSQ: a_sumsq(acc, x, n); break;
    case AIE_VR_ABSSUM: a_abssum(acc, x, n); break;
    case AIE_VR_MAX: a_max(acc, x, n); break;
    default: a_min(acc, x, n); break;
    }
}

static void vm_exp_shift(const float *x, const float *m, int64_t sm, float *y, int64_t n) {
    vf km = vset1(m[0]);
    int64_t i = 0;
    for (; i + VW <= n; i += VW) vstore(y + i, vmf_exp(vload(x + i) - (sm ? vload(m + i) : km)));
    if (i < n) vstore_n(y + i, vmf_exp(vload_n(x + i, n - i, 0.0f) - (sm ? vload_n(m + i, n - i, 0.0f) : km)), n - i);
}

static void vm_softmax_scaled(float *s, int64_t n, float scale, const float *mask) {
    if (n <= 0) return;
    const vf vs = vset1(scale), ninf = vset1(-INFINITY), zero = vset1(0.0f);
    const vi live = __builtin_convertvector(lane_ids(), vi) < (int32_t)(n % VW); /* the tail's lanes */
    vf mx = ninf, acc = zero;
    int64_t i = 0;
    for (; i + VW <= n; i += VW) {
        vf t = vload(s + i) * vs + (mask ? vload(mask + i) : zero);
        vstore(s + i, t);
        mx = vmaxn(mx, t);
    }
    if (i < n) {
        vf t = vload_n(s + i, n - i, 0.0f) * vs + (mask ? vload_n(mask + i, n - i, 0.0f) : zero);
        vstore_n(s + i, t, n - i);
        mx = vmaxn(mx, vsel(live, t, ninf));
    }
    float t[VW], m;
    vstore(t, mx);
    m = t[0];
    for (int k = 1; k < VW; k++) m = (t[k] > m || t[k] != t[k]) ? t[k] : m; /* NaN-propagating */
    const vf vmax = vset1(m);
    for (i = 0; i + VW <= n; i += VW) {
        vf e = vmf_exp(vload(s + i) - vmax);
        vstore(s + i, e);
        acc += e;
    }
    if (i < n) {
        vf e = vmf_exp(vload_n(s + i, n - i, 0.0f) - vmax);
        vstore_n(s + i, e, n - i);
        acc += vsel(live, e, zero);
    }
    vstore(t, acc);
    float sum = 0.0f;
    for (int k = 0; k < VW; k++) sum += t[k];
    const vf r = vset1(1.0f / sum);
    for (i = 0; i + VW <= n; i += VW) vstore(s + i, vload(s + i) * r);
    if (i < n) vstore_n(s + i, vload_n(s + i, n - i, 0.0f) * r, n - i);
}

static void vm_norm_apply(const float *x, float *y, int64_t n, float mean, float invstd,
                          const float *scale, const float *bias) {
    vf vmean = vset1(mean), vs = vset1(invstd), zero = vset1(0.0f);
    int64_t i = 0;
    for (; i + VW <= n; i += VW) {
        vf t = (vload(x + i) - vmean) * vs * vload(scale + i);
        vstore(y + i, t + (bias ? vload(bias + i) : zero));
    }
    if (i < n) {
        int64_t m = n - i;
        vf t = (vload_n(x + i, m, 0.0f) - vmean) * vs * vload_n(scale + i, m, 0.0f);
        vstore_n(y + i, t + (bias ? vload_n(bias + i, m, 0.0f) : zero), m);
    }
}

const aie_vm_table VM_TABLE = AIE_VM_TABLE_OF_VM_FUNCTIONS;
