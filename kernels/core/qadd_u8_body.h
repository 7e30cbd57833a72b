/* QADD_U8's task (core/qlinear_u8_kernels.h; the forms: exec/qadd_u8.c),
 * compiled per ISA by scalar/ and avx2/ qlinear_u8_*.c: elements
 * task * AIE_QADD_CHUNK onwards, as runs whose operands advance together.
 * The includer defines QADD_CHUNK_TASK (the name). The helpers are static
 * and always inlined, so each ISA's object has its own vectorised copy (and
 * the avx2 one vfmadd for fmaf; the scalar one calls libm's: the same
 * correctly rounded result). Built with -fno-trapping-math (kernels/Makefile)
 * so that the clamps if-convert and the loops vectorise. */
#include <math.h>

#include "qlinear_u8_kernels.h"

/* Form 0: the DEQUANTIZE, BINARY, UNARY and QUANTIZE steps' float32 operations in their order. */
__attribute__((always_inline)) static inline float qadd_steps(const aie_qadd_job *j, float a, float b) {
    float v = (a - j->za) * j->sa + (b - j->zb) * j->sb;
    v = v > j->lo ? v : j->lo; /* Relu: max(v, 0); without one, a no-op (v is finite) */
    float q = v / j->sy;
    q = q < 2147483648.0f ? q : -512.0f; /* as QUANTIZE: past int32, the low end */
    q = q > 512.0f ? 512.0f : q;         /* past +-512 every zero point saturates */
    q = q < -512.0f ? -512.0f : q;
    return ((q + AIE_QROUND_MAGIC) - AIE_QROUND_MAGIC) + j->zy;
}

/* One rounding, half to even, of v clamped to +-512 (where every zero point saturates). */
__attribute__((always_inline)) static inline float qround(float v) {
    v = v > 512.0f ? 512.0f : v;
    v = v < -512.0f ? -512.0f : v;
    return (v + AIE_QROUND_MAGIC) - AIE_QROUND_MAGIC;
}

__attribute__((always_inline)) static inline uint8_t qsat(float r) {
    r = r >= 0.0f ? r : 0.0f;
    return (uint8_t)(r > 255.0f ? 255.0f : r);
}

/* One run of len outputs whose operands advance together (an operand of one byte stays put). */
__attribute__((always_inline)) static inline void qadd_run(const aie_qadd_job *j, uint8_t *restrict y,
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
    else if (j->pa == 1) /* onnxruntime's one-element A: fixed + a * rac was formed once (the driver) */
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
static void QADD_CHUNK_TASK(void *ctx, int64_t t, int worker) {
    (void)worker;
    const aie_qadd_job *j = ctx;
    const int64_t i0 = t * AIE_QADD_CHUNK, i1 = i0 + AIE_QADD_CHUNK < j->n ? i0 + AIE_QADD_CHUNK : j->n;
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
