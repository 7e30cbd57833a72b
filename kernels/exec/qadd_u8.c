/* QADD_U8: the QDQ form of a residual Add (engine/passes/qdq_fuse.py),
 * DequantizeLinear(a), DequantizeLinear(b) -> Add [-> Relu] ->
 * QuantizeLinear, all uint8 per tensor, in one pass without the three fp32
 * tensors. t: y (u8), a (u8), b (u8), same element count. The fp32
 * operations are those of the DEQUANTIZE, BINARY, UNARY and QUANTIZE steps
 * (exec/qlinear.c), in their order, so the bytes are theirs. */
#include "exec_ops.h"

#define QROUND_MAGIC 12582912.0f /* 1.5 * 2^23: rounds |y| < 2^22 half to even */

__attribute__((optimize("no-trapping-math"))) int aie_x_qadd_u8(const aie_step_args *a) {
    const aie_qadd_u8_step *sp = (const aie_qadd_u8_step *)(const void *)a->ip;
    uint8_t *restrict y = a->t[0];
    const uint8_t *restrict xa = a->t[1], *restrict xb = a->t[2];
    const float sa = (float)a->fp[0], sb = (float)a->fp[1], sy = (float)a->fp[2];
    const float za = (float)sp->a_zero, zb = (float)sp->b_zero, zy = (float)sp->y_zero;
    const float lo = sp->relu ? 0.0f : -3.0e38f;
    const int64_t n = sp->n;
    for (int64_t i = 0; i < n; i++) {
        float v = ((float)xa[i] - za) * sa + ((float)xb[i] - zb) * sb;
        v = v > lo ? v : lo; /* Relu: max(v, 0); without one, a no-op (v is finite) */
        float q = v / sy;
        q = q < 2147483648.0f ? q : -512.0f; /* as QUANTIZE: past int32, the low end */
        q = q > 512.0f ? 512.0f : q; /* past +-512 every zero point saturates */
        q = q < -512.0f ? -512.0f : q;
        float t = ((q + QROUND_MAGIC) - QROUND_MAGIC) + zy;
        t = t >= 0.0f ? t : 0.0f;
        y[i] = (uint8_t)(t > 255.0f ? 255.0f : t);
    }
    return AIE_OK;
}
