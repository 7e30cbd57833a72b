/* Extension element-wise ops: BitShift (broadcasting) and CumProd.
 * Scalar loops: these are rare ops, correctness first. */
#include "exec_ops.h"
#include "nd_iter.h"

/* T: the element type, U: its unsigned twin. As the ONNX reference: a shift
 * count outside [0, bits) gives 0 (-1 for a negative value shifted right);
 * right shifts of signed values are arithmetic; left shifts work on the bits
 * (through U, so a signed overflow is defined). */
/* A value as int64 (a function, so that the range checks below compile for
 * every element type without type-limits warnings; a uint64 count >= 2^63
 * comes out negative, which is out of range as it should be). */
static inline int64_t shift_count(int64_t v) { return v; }

#define SHIFT_LOOP(T, U, BITS, SIGNED)                                                                    \
    do {                                                                                          \
        for (int64_t row = 0; row < rows; row++) {                                                \
            int64_t off[3];                                                                       \
            aie_nd_row_offsets(&nd, row, off);                                                    \
            T *o = (T *)a->t[0] + off[0];                                                         \
            const T *x = (const T *)a->t[1] + off[1], *y = (const T *)a->t[2] + off[2];           \
            for (int64_t i = 0; i < inner; i++) {                                                 \
                T v = x[i * nd.st[1][last]], s = y[i * nd.st[2][last]];                           \
                T r;                                                                              \
                int64_t cnt = shift_count(s);                                                     \
                if (cnt < 0 || cnt >= (BITS))                                                     \
                    r = (right && (SIGNED) && shift_count(v) < 0) ? (T)-1 : (T)0;                 \
                else if (right)                                                                   \
                    r = (T)(v >> s);                                                              \
                else                                                                              \
                    r = (T)((U)v << (U)s);                                                        \
                o[i * nd.st[0][last]] = r;                                                        \
            }                                                                                     \
        }                                                                                         \
    } while (0)

int aie_x_bitshift(const aie_step_args *a) {
    const aie_bitshift_step *sp = (const aie_bitshift_step *)(const void *)a->ip;
    int64_t dt = sp->dtype, right = sp->right;
    aie_nd nd;
    if (aie_nd_parse(&nd, sp->rank, sp->dims, 3) < 0) return aie_fail(AIE_EINVAL, "bitshift: bad rank");
    int64_t rows = aie_nd_rows(&nd), last = nd.rank - 1, inner = nd.shape[last];
    switch (dt) {
    case AIE_DT_U8: SHIFT_LOOP(uint8_t, uint8_t, 8, 0); break;
    case AIE_DT_U16: SHIFT_LOOP(uint16_t, uint16_t, 16, 0); break;
    case AIE_DT_U32: SHIFT_LOOP(uint32_t, uint32_t, 32, 0); break;
    case AIE_DT_U64: SHIFT_LOOP(uint64_t, uint64_t, 64, 0); break;
    case AIE_DT_I8: SHIFT_LOOP(int8_t, uint8_t, 8, 1); break;
    case AIE_DT_I16: SHIFT_LOOP(int16_t, uint16_t, 16, 1); break;
    case AIE_DT_I32: SHIFT_LOOP(int32_t, uint32_t, 32, 1); break;
    case AIE_DT_I64: SHIFT_LOOP(int64_t, uint64_t, 64, 1); break;
    default: return aie_fail(AIE_EINVAL, "bitshift: dtype %lld", (long long)dt);
    }
    return AIE_OK;
}

/* U: the accumulator type; unsigned for integers so overflow wraps (as
 * numpy) instead of being undefined. */
#define CUMPROD_LOOP(T, U)                                                                           \
    do {                                                                                          \
        const T *x = a->t[1];                                                                     \
        T *y = a->t[0];                                                                           \
        for (int64_t o = 0; o < outer; o++)                                                       \
            for (int64_t j = 0; j < inner; j++) {                                                 \
                U acc = (U)1;                                                                     \
                for (int64_t s = 0; s < n; s++) {                                                 \
                    int64_t i = reverse ? n - 1 - s : s;                                          \
                    int64_t at = (o * n + i) * inner + j;                                         \
                    if (exclusive) {                                                              \
                        y[at] = (T)acc;                                                           \
                        acc = (U)(acc * (U)x[at]);                                                             \
                    } else {                                                                      \
                        acc = (U)(acc * (U)x[at]);                                                \
                        y[at] = (T)acc;                                                              \
                    }                                                                             \
                }                                                                                 \
            }                                                                                     \
    } while (0)

int aie_x_cumprod(const aie_step_args *a) {
    const aie_axis_step *sp = (const aie_axis_step *)(const void *)a->ip;
    int64_t dt = sp->dtype, outer = sp->outer, n = sp->n, inner = sp->inner;
    int64_t exclusive = sp->flag0, reverse = sp->flag1;
    switch (dt) {
    case AIE_DT_F32: CUMPROD_LOOP(float, float); break;
    case AIE_DT_F64: CUMPROD_LOOP(double, double); break;
    case AIE_DT_I32: CUMPROD_LOOP(int32_t, uint32_t); break;
    case AIE_DT_I64: CUMPROD_LOOP(int64_t, uint64_t); break;
    case AIE_DT_U32: CUMPROD_LOOP(uint32_t, uint32_t); break;
    case AIE_DT_U64: CUMPROD_LOOP(uint64_t, uint64_t); break;
    default: return aie_fail(AIE_EINVAL, "cumprod: dtype %lld", (long long)dt);
    }
    return AIE_OK;
}
