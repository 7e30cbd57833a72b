/* Convolution and pooling executor ops: thin adapters from step parameters
 * to the library's NHWC kernels (aie_conv.h, aie_pool.h). The converter lays
 * conv/pool chains out in NHWC and packs constant weights once; a weight
 * computed at run time is packed by a CONV_PACK step into the arena first.
 *
 * Step parameters are read through their aie_*_step structs (aie_ops.def);
 * the conv family's starts with aie_conv2d_params itself. */
#include "exec_ops.h"

int aie_x_conv(const aie_step_args *a) {
    const aie_conv_step *sp = (const aie_conv_step *)(const void *)a->ip;
    const aie_conv2d_params p = sp->conv;
    const size_t wss = (size_t)sp->workspace_bytes;
    aie_epilogue ep = {NULL, AIE_BIAS_NONE, (int)sp->act, (float)a->fp[0], (float)a->fp[1]};
    const float *x = a->t[1], *res = a->t[4];
    float *y = a->t[0];
    int rc = aie_conv2d(&p, x, a->t[2], a->t[3], res, &ep, y, a->t[5], wss, a->nthreads);
    if (rc != AIE_ENOMEM || p.N == 1) return rc;
    /* Workaround: aie_conv2d sizes its per-tile GEMM workspace for a full
     * im2col tile, but aie_sgemm_workspace_size is not monotonic in M, so the
     * last, shorter tile can need more (e.g. N=3, 16x16x32 -> 64, 3x3, pad 1,
     * 1 thread: M=313 needs 185536 bytes, 174016 given). Image by image the
     * tiling differs; the residual is never y here (the planner gives y its
     * own buffer), so recomputing from scratch is exact. */
    int64_t P, Q;
    if (aie_conv2d_output_shape(&p, &P, &Q) != AIE_OK) return rc;
    aie_conv2d_params one = p;
    one.N = 1;
    const int64_t xs = p.H * p.W * p.C, ys = P * Q * p.K;
    for (int64_t n = 0; n < p.N; n++) {
        rc = aie_conv2d(&one, x + n * xs, a->t[2], a->t[3], res ? res + n * ys : NULL, &ep, y + n * ys, a->t[5],
                        wss, a->nthreads);
        if (rc != AIE_OK) return rc;
    }
    return AIE_OK;
}

/* t: y, x, dw packed, dw bias, pw packed, pw bias, residual, workspace, ex packed, ex bias. */
int aie_x_conv_dw_pw(const aie_step_args *a) {
    const aie_conv_dw_pw_step *sp = (const aie_conv_dw_pw_step *)(const void *)a->ip;
    aie_epilogue de = {NULL, AIE_BIAS_NONE, (int)sp->dw_act, (float)a->fp[0], (float)a->fp[1]};
    aie_epilogue pe = {NULL, AIE_BIAS_NONE, (int)sp->pw_act, (float)a->fp[2], (float)a->fp[3]};
    aie_epilogue xe = {NULL, AIE_BIAS_NONE, (int)sp->ex_act, (float)a->fp[4], (float)a->fp[5]};
    const aie_conv_stage dw = {&sp->dw, a->t[2], a->t[3], &de}, pw = {&sp->pw, a->t[4], a->t[5], &pe};
    const aie_conv_stage ex = {&sp->ex, a->t[8], a->t[9], &xe};
    return aie_conv2d_dw_pw(sp->ex.K ? &ex : NULL, &dw, &pw, a->t[1], a->t[6], a->t[0], a->t[7],
                            (size_t)sp->workspace_bytes, a->nthreads);
}

int aie_x_conv_transpose(const aie_step_args *a) {
    const aie_conv_step *sp = (const aie_conv_step *)(const void *)a->ip;
    aie_epilogue ep = {NULL, AIE_BIAS_NONE, (int)sp->act, (float)a->fp[0], (float)a->fp[1]};
    return aie_conv_transpose2d(&sp->conv, a->t[1], a->t[2], a->t[3], &ep, a->t[0], a->t[4],
                                (size_t)sp->workspace_bytes, a->nthreads);
}

/* t: packed (out), w. Packing may allocate a temporary: this step only exists for weights that
 * are not constants (never on a converted zoo model's path). */
int aie_x_conv_pack(const aie_step_args *a) {
    const aie_conv_pack_step *sp = (const aie_conv_pack_step *)(const void *)a->ip;
    if (sp->transposed) return aie_conv_transpose2d_pack_weights(&sp->conv, a->t[1], a->t[0], (size_t)sp->packed_bytes);
    return aie_conv2d_pack_weights(&sp->conv, a->t[1], a->t[0], (size_t)sp->packed_bytes);
}

/* t: y, x. */
int aie_x_pool(const aie_step_args *a) {
    const aie_pool_step *sp = (const aie_pool_step *)(const void *)a->ip;
    return aie_pool2d((int)sp->kind, &sp->pool, a->t[1], a->t[0], a->nthreads);
}

/* t: y [N, C], x [N, HW, C]. ip: aie_global_pool_step. */
int aie_x_global_pool(const aie_step_args *a) {
    const aie_global_pool_step *sp = (const aie_global_pool_step *)(const void *)a->ip;
    return aie_global_pool((int)sp->kind, sp->N, sp->HW, sp->C, a->t[1], a->t[0], a->nthreads);
}
