/* QADD_U8: the QDQ form of a residual Add (engine/passes/qdq_fuse.py),
 * DequantizeLinear(a), DequantizeLinear(b) -> Add [-> Relu] ->
 * QuantizeLinear, all uint8 per tensor, in one pass without the three fp32
 * tensors. t: y (u8), a (u8), b (u8), same element count. The fp32
 * operations are those of the DEQUANTIZE, BINARY, UNARY and QUANTIZE steps
 * (exec/qlinear.c), in their order, so the bytes are theirs. Chunks of the
 * tensor go to the thread pool (the per-element division is the cost). */
#include "exec_ops.h"
#include "threadpool.h"

#define QROUND_MAGIC 12582912.0f /* 1.5 * 2^23: rounds |y| < 2^22 half to even */
#define CHUNK 16384

typedef struct {
    uint8_t *y;
    const uint8_t *a, *b;
    float sa, sb, sy, za, zb, zy, lo;
    int64_t n;
} qadd_job;

__attribute__((optimize("no-trapping-math"))) static void qadd_chunk(void *ctx, int64_t t, int worker) {
    (void)worker;
    const qadd_job *j = ctx;
    const int64_t i0 = t * CHUNK, i1 = i0 + CHUNK < j->n ? i0 + CHUNK : j->n;
    uint8_t *restrict y = j->y;
    const uint8_t *restrict xa = j->a, *restrict xb = j->b;
    const float sa = j->sa, sb = j->sb, sy = j->sy, za = j->za, zb = j->zb, zy = j->zy, lo = j->lo;
    for (int64_t i = i0; i < i1; i++) {
        float v = ((float)xa[i] - za) * sa + ((float)xb[i] - zb) * sb;
        v = v > lo ? v : lo; /* Relu: max(v, 0); without one, a no-op (v is finite) */
        float q = v / sy;
        q = q < 2147483648.0f ? q : -512.0f; /* as QUANTIZE: past int32, the low end */
        q = q > 512.0f ? 512.0f : q;         /* past +-512 every zero point saturates */
        q = q < -512.0f ? -512.0f : q;
        float r = ((q + QROUND_MAGIC) - QROUND_MAGIC) + zy;
        r = r >= 0.0f ? r : 0.0f;
        y[i] = (uint8_t)(r > 255.0f ? 255.0f : r);
    }
}

int aie_x_qadd_u8(const aie_step_args *a) {
    const aie_qadd_u8_step *sp = (const aie_qadd_u8_step *)(const void *)a->ip;
    qadd_job j = {a->t[0], a->t[1], a->t[2], (float)a->fp[0], (float)a->fp[1], (float)a->fp[2],
                  (float)sp->a_zero, (float)sp->b_zero, (float)sp->y_zero, sp->relu ? 0.0f : -3.0e38f, sp->n};
    aie_parallel_dynamic((sp->n + CHUNK - 1) / CHUNK, a->nthreads, qadd_chunk, &j);
    return AIE_OK;
}
