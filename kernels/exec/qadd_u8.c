/* QADD_U8: the QDQ form of a residual Add (engine/passes/qdq_fuse.py),
 * DequantizeLinear(a), DequantizeLinear(b) -> Add [-> Relu] ->
 * QuantizeLinear, all uint8 per tensor, in one pass without the three fp32
 * tensors, and com.microsoft QLinearAdd (engine/ops/qoperator.py).
 * t: y (u8), a (u8), b (u8); a and b each either whole, or a trailing block
 * repeated (a bias row), or one byte.
 * form 0: the fp32 operations of the DEQUANTIZE, BINARY, UNARY and QUANTIZE
 * steps (exec/qlinear.c), in their order, so the bytes are theirs.
 * form 1: onnxruntime's QLinearAdd (MLAS), which onnxruntime also runs for
 * the QDQ group: y = rint(fma(a, sa/sy, fma(b, sb/sy, fixed))) with
 * fixed = zy - fma(sa/sy, za, sb/sy * zb), and for a one-byte operand its
 * term folded into fixed first (a multiply and an add). It rounds once
 * where form 0 rounds three times, so the two differ by one step on ties
 * (a residual Add whose scales are equal lands on ties often).
 * Chunks of the tensor go to the thread pool. */
#include <math.h>

#include "exec_ops.h"
#include "threadpool.h"

#define QROUND_MAGIC 12582912.0f /* 1.5 * 2^23: rounds |y| < 2^22 half to even */
#define CHUNK 16384

typedef struct {
    uint8_t *y;
    const uint8_t *a, *b;
    float sa, sb, sy, za, zb, zy, lo;
    float rac, rbc, fixed; /* form 1 */
    int64_t n, pa, pb;
    int form;
} qadd_job;

__attribute__((always_inline)) static inline float qadd_steps(const qadd_job *j, float a, float b) {
    float v = (a - j->za) * j->sa + (b - j->zb) * j->sb;
    v = v > j->lo ? v : j->lo; /* Relu: max(v, 0); without one, a no-op (v is finite) */
    float q = v / j->sy;
    q = q < 2147483648.0f ? q : -512.0f; /* as QUANTIZE: past int32, the low end */
    q = q > 512.0f ? 512.0f : q;         /* past +-512 every zero point saturates */
    q = q < -512.0f ? -512.0f : q;
    return ((q + QROUND_MAGIC) - QROUND_MAGIC) + j->zy;
}

/* One rounding, half to even, of |v| < 2^22 (v is clamped to +-512 first, where every zero point
 * saturates): the magic-number add is nearbyintf without a libm call. */
static inline float qround(float v) {
    v = v > 512.0f ? 512.0f : v;
    v = v < -512.0f ? -512.0f : v;
    return (v + QROUND_MAGIC) - QROUND_MAGIC;
}

static inline uint8_t qsat(float r) {
    r = r >= 0.0f ? r : 0.0f;
    return (uint8_t)(r > 255.0f ? 255.0f : r);
}

/* One run of len outputs whose operands advance together (an operand of one byte stays put): straight
 * loops the compiler vectorises. `always_inline` so that the fma-target copy below gets vfmadd for
 * fmaf (the generic copy calls libm's: the same correctly rounded result). */
__attribute__((always_inline)) static inline void qadd_run(const qadd_job *j, uint8_t *restrict y,
                                                           const uint8_t *restrict xa, const uint8_t *restrict xb,
                                                           int64_t len) {
    /* locals: y's bytes may alias *j, which would reload every field per element and stop vectorising */
    const float rac = j->rac, rbc = j->rbc, fixed = j->fixed, za = j->za, zb = j->zb, zy = j->zy;
    const int64_t sa = j->pa == 1 ? 0 : 1, sb = j->pb == 1 ? 0 : 1;
    if (j->form == 0)
        for (int64_t i = 0; i < len; i++)
            y[i] = qsat(qadd_steps(j, (float)xa[i * sa], (float)xb[i * sb]));
    else if (j->form == 2) /* QLinearMul: (a - za)(b - zb), exact, times m, plus zy: two roundings */
        for (int64_t i = 0; i < len; i++) {
            const float p = ((float)xa[i * sa] - za) * ((float)xb[i * sb] - zb);
            y[i] = qsat(qround(p * rac + zy));
        }
    else if (j->pa == 1) /* onnxruntime's one-element A: fixed + a * rac was formed once (below) */
        for (int64_t i = 0; i < len; i++)
            y[i] = qsat(qround(fmaf((float)xb[i], rbc, fixed)));
    else if (j->pb == 1)
        for (int64_t i = 0; i < len; i++)
            y[i] = qsat(qround(fmaf((float)xa[i], rac, fixed)));
    else
        for (int64_t i = 0; i < len; i++)
            y[i] = qsat(qround(fmaf((float)xa[i], rac, fmaf((float)xb[i], rbc, fixed))));
}

/* Elements i0..i1 as runs that end where a repeated operand wraps. */
__attribute__((always_inline)) static inline void qadd_body(const qadd_job *j, int64_t i0, int64_t i1) {
    int64_t ia = i0 % j->pa, ib = i0 % j->pb;
    for (int64_t i = i0; i < i1;) {
        int64_t len = i1 - i;
        if (j->pa > 1 && j->pa - ia < len)
            len = j->pa - ia;
        if (j->pb > 1 && j->pb - ib < len)
            len = j->pb - ib;
        qadd_run(j, j->y + i, j->a + ia, j->b + ib, len);
        i += len;
        ia = j->pa == 1 ? 0 : (ia + len) % j->pa;
        ib = j->pb == 1 ? 0 : (ib + len) % j->pb;
    }
}

__attribute__((optimize("no-trapping-math"))) static void qadd_chunk(void *ctx, int64_t t, int worker) {
    (void)worker;
    const qadd_job *j = ctx;
    const int64_t i0 = t * CHUNK, i1 = i0 + CHUNK < j->n ? i0 + CHUNK : j->n;
    qadd_body(j, i0, i1);
}

#if defined(__x86_64__)
__attribute__((target("fma"), optimize("no-trapping-math"))) static void qadd_chunk_fma(void *ctx, int64_t t,
                                                                                         int worker) {
    (void)worker;
    const qadd_job *j = ctx;
    const int64_t i0 = t * CHUNK, i1 = i0 + CHUNK < j->n ? i0 + CHUNK : j->n;
    qadd_body(j, i0, i1);
}
#endif

int aie_x_qadd_u8(const aie_step_args *a) {
    const aie_qadd_u8_step *sp = (const aie_qadd_u8_step *)(const void *)a->ip;
    if (sp->a_period < 1 || sp->b_period < 1 || sp->n % sp->a_period || sp->n % sp->b_period ||
        (sp->form && sp->relu) || sp->form < 0 || sp->form > 2)
        return AIE_EINVAL;
    qadd_job j = {a->t[0], a->t[1], a->t[2], (float)a->fp[0], (float)a->fp[1], (float)a->fp[2],
                  (float)sp->a_zero, (float)sp->b_zero, (float)sp->y_zero, sp->relu ? 0.0f : -3.0e38f,
                  0.0f, 0.0f, 0.0f, sp->n, sp->a_period, sp->b_period, (int)sp->form};
    if (sp->form == 2) {
        volatile float sab = j.sa * j.sb;
        j.rac = sab / j.sy;
    } else if (sp->form) {
        volatile float rac = j.sa / j.sy, rbc = j.sb / j.sy; /* volatile: no contraction into an fma */
        j.rac = rac;
        j.rbc = rbc;
        volatile float zb = rbc * j.zb; /* MLAS's zy - (rac * za + rbc * zb), contracted as its build does */
        j.fixed = j.zy - fmaf(rac, j.za, zb);
        if (j.pa == 1) {
            volatile float ta = (float)j.a[0] * j.rac;
            j.fixed = j.fixed + ta;
        } else if (j.pb == 1) {
            volatile float tb = (float)j.b[0] * j.rbc;
            j.fixed = j.fixed + tb;
        }
    }
    void (*chunk)(void *, int64_t, int) = qadd_chunk;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("fma"))
        chunk = qadd_chunk_fma;
#endif
    aie_parallel_dynamic((sp->n + CHUNK - 1) / CHUNK, a->nthreads, chunk, &j);
    return AIE_OK;
}
