/* Low-precision convolution executor ops: thin adapters from step
 * parameters to the library's kernels (aie_conv_lowp.h). The converter packs
 * a CONV_BF16 node's weights once (their bf16 layout is the same on every
 * level), so there is no packing step here.
 *
 * CONV_BF16 reads an aie_conv_step, with CONV's operands; CONV_BF16_IO an
 * aie_conv_bf16_io_step. */
#include "exec_ops.h"

/* t: y, x, packed weights, bias, residual, workspace. fp: p0, p1. */
int aie_x_conv_bf16(const aie_step_args *a) {
    const aie_conv_step *sp = (const aie_conv_step *)(const void *)a->ip;
    aie_epilogue ep = {NULL, AIE_BIAS_NONE, (int)sp->act, (float)a->fp[0], (float)a->fp[1]};
    return aie_conv2d_bf16(&sp->conv, a->t[1], a->t[2], a->t[3], a->t[4], &ep, a->t[0], a->t[5],
                           (size_t)sp->workspace_bytes, a->nthreads);
}

/* CONV_BF16_IO: the same operands, some in bf16 (aie_conv_bf16_io_step.io). */
int aie_x_conv_bf16_io(const aie_step_args *a) {
    const aie_conv_bf16_io_step *sp = (const aie_conv_bf16_io_step *)(const void *)a->ip;
    aie_epilogue ep = {NULL, AIE_BIAS_NONE, (int)sp->act, (float)a->fp[0], (float)a->fp[1]};
    return aie_conv2d_bf16_io(&sp->conv, a->t[1], a->t[2], a->t[3], a->t[4], &ep, a->t[0], a->t[5],
                              (size_t)sp->workspace_bytes, a->nthreads, (int)sp->io);
}
