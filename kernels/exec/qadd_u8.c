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

static inline float qadd_steps(const qadd_job *j, float a, float b) {
    float v = (a - j->za) * j->sa + (b - j->zb) * j->sb;
    v = v > j->lo ? v : j->lo; /* Relu: max(v, 0); without one, a no-op (v is finite) */
    float q = v / j->sy;
    q = q < 2147483648.0f ? q : -512.0f; /* as QUANTIZE: past int32, the low end */
    q = q > 512.0f ? 512.0f : q;         /* past +-512 every zero point saturates */
    q = q < -512.0f ? -512.0f : q;
    return ((q + QROUND_MAGIC) - QROUND_MAGIC) + j->zy;
}

static inline float qadd_ort(const qadd_job *j, float a, float b) {
    if (j->pa == 1) /* onnxruntime's scalar A: fixed + a * rac was formed once (below) */
        return nearbyintf(fmaf(b, j->rbc, j->fixed));
    if (j->pb == 1)
        return nearbyintf(fmaf(a, j->rac, j->fixed));
    return nearbyintf(fmaf(a, j->rac, fmaf(b, j->rbc, j->fixed)));
}

__attribute__((optimize("no-trapping-math"))) static void qadd_chunk(void *ctx, int64_t t, int worker) {
    (void)worker;
    const qadd_job *j = ctx;
    const int64_t i0 = t * CHUNK, i1 = i0 + CHUNK < j->n ? i0 + CHUNK : j->n;
    uint8_t *restrict y = j->y;
    const uint8_t *restrict xa = j->a, *restrict xb = j->b;
    if (j->form == 0 && j->pa == j->n && j->pb == j->n) { /* the common residual Add: straight loop */
        for (int64_t i = i0; i < i1; i++) {
            float r = qadd_steps(j, (float)xa[i], (float)xb[i]);
            r = r >= 0.0f ? r : 0.0f;
            y[i] = (uint8_t)(r > 255.0f ? 255.0f : r);
        }
        return;
    }
    for (int64_t i = i0; i < i1; i++) {
        const float a = (float)xa[i % j->pa], b = (float)xb[i % j->pb];
        float r = j->form ? qadd_ort(j, a, b) : qadd_steps(j, a, b);
        r = r >= 0.0f ? r : 0.0f;
        y[i] = (uint8_t)(r > 255.0f ? 255.0f : r);
    }
}

int aie_x_qadd_u8(const aie_step_args *a) {
    const aie_qadd_u8_step *sp = (const aie_qadd_u8_step *)(const void *)a->ip;
    if (sp->a_period < 1 || sp->b_period < 1 || sp->n % sp->a_period || sp->n % sp->b_period ||
        (sp->form && sp->relu))
        return AIE_EINVAL;
    qadd_job j = {a->t[0], a->t[1], a->t[2], (float)a->fp[0], (float)a->fp[1], (float)a->fp[2],
                  (float)sp->a_zero, (float)sp->b_zero, (float)sp->y_zero, sp->relu ? 0.0f : -3.0e38f,
                  0.0f, 0.0f, 0.0f, sp->n, sp->a_period, sp->b_period, (int)sp->form};
    if (sp->form) {
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
    aie_parallel_dynamic((sp->n + CHUNK - 1) / CHUNK, a->nthreads, qadd_chunk, &j);
    return AIE_OK;
}
