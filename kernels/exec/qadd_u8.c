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
 * fixed = zy - fma(sa/sy, za, sb/sy * zb) (a and b swapped for a one-byte a,
 * as onnxruntime passes it), and for a one-byte operand its term folded into
 * fixed first (a multiply and an add). It rounds once
 * where form 0 rounds three times, so the two differ by one step on ties
 * (a residual Add whose scales are equal lands on ties often).
 * Chunks of the tensor go to the thread pool, each run by the selected
 * level's loop (core/qadd_u8_body.h compiled per ISA; the dispatch table's q8). */
#include <math.h>

#include "exec_ops.h"
#include "kernel_table.h"
#include "threadpool.h"

int aie_x_qadd_u8(const aie_step_args *a) {
    const aie_qadd_u8_step *sp = (const aie_qadd_u8_step *)(const void *)a->ip;
    if (sp->a_period < 1 || sp->b_period < 1 || sp->n % sp->a_period || sp->n % sp->b_period ||
        (sp->form && sp->relu) || sp->form < 0 || sp->form > 2)
        return AIE_EINVAL;
    aie_qadd_job j = {a->t[0], a->t[1], a->t[2], (float)a->fp[0], (float)a->fp[1], (float)a->fp[2],
                      (float)sp->a_zero, (float)sp->b_zero, (float)sp->y_zero, sp->relu ? 0.0f : -3.0e38f,
                      0.0f, 0.0f, 0.0f, sp->n, sp->a_period, sp->b_period, (int)sp->form};
    if (sp->form == 2) {
        volatile float sab = j.sa * j.sb;
        j.rac = sab / j.sy;
    } else if (sp->form) {
        volatile float rac = j.sa / j.sy, rbc = j.sb / j.sy; /* volatile: no contraction into an fma */
        j.rac = rac;
        j.rbc = rbc;
        /* MLAS's zy - (rac * za + rbc * zb), contracted as its build does. onnxruntime passes a one-byte A
         * to MLAS as B (the add commutes: MLAS only has a one-byte-B form), so there the terms swap roles. */
        if (j.pa == 1 && j.pb != 1) {
            volatile float za = rac * j.za;
            j.fixed = j.zy - fmaf(rbc, j.zb, za);
        } else {
            volatile float zb = rbc * j.zb;
            j.fixed = j.zy - fmaf(rac, j.za, zb);
        }
        if (j.pa == 1) {
            volatile float ta = (float)j.a[0] * j.rac;
            j.fixed = j.fixed + ta;
        } else if (j.pb == 1) {
            volatile float tb = (float)j.b[0] * j.rbc;
            j.fixed = j.fixed + tb;
        }
    }
    aie_parallel_dynamic((sp->n + AIE_QADD_CHUNK - 1) / AIE_QADD_CHUNK, a->nthreads, aie_kernels()->q8->qadd_chunk,
                         &j);
    return AIE_OK;
}
