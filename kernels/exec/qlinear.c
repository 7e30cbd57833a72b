/* int8 executor ops: the fused QDQ groups (engine/passes/qdq_fuse.py) on the
 * int8 GEMM and convolution (aie_gemm_lowp.h, aie_conv_s8.h).
 * t: y, x (u8), packed weights, w_scale (f32, one per output channel), bias
 * (NULL, or f32 for F32 outputs, int32 for U8 outputs), workspace. */
#include "exec_ops.h"

static aie_qepilogue qepilogue(int64_t out, int64_t y_zero, int64_t act, const aie_step_args *a,
                               aie_epilogue *ep) {
    *ep = (aie_epilogue){out == AIE_QOUT_F32 ? a->t[4] : NULL, out == AIE_QOUT_F32 && a->t[4] ? AIE_BIAS_COL
                                                                                               : AIE_BIAS_NONE,
                         (int)act, (float)a->fp[2], (float)a->fp[3]};
    return (aie_qepilogue){.out = (int32_t)out, .a_scale = (float)a->fp[0], .b_scale = a->t[3],
                           .y_scale = (float)a->fp[1], .y_zero = (int32_t)y_zero,
                           .bias_s32 = out == AIE_QOUT_U8 ? a->t[4] : NULL, .ep = ep};
}

int aie_x_gemm_u8s8_packed(const aie_step_args *a) {
    const aie_gemm_u8s8_step *sp = (const aie_gemm_u8s8_step *)(const void *)a->ip;
    aie_epilogue ep;
    aie_qepilogue q = qepilogue(sp->out, sp->y_zero, sp->act, a, &ep);
    return aie_gemm_u8s8(sp->M, sp->N, sp->K, a->t[1], sp->K, (int32_t)sp->a_zero, a->t[2], a->t[0], sp->N, &q,
                         a->t[5], (size_t)sp->workspace_bytes, a->nthreads);
}

int aie_x_conv_u8s8(const aie_step_args *a) {
    const aie_conv_u8s8_step *sp = (const aie_conv_u8s8_step *)(const void *)a->ip;
    aie_epilogue ep;
    aie_qepilogue q = qepilogue(sp->out, sp->y_zero, sp->act, a, &ep);
    return aie_conv2d_u8s8(&sp->conv, a->t[1], (int32_t)sp->x_zero, a->t[2], a->t[0], &q, a->t[5],
                           (size_t)sp->workspace_bytes, a->nthreads);
}
