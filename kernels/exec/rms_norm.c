/* AIE_X_RMS_NORM: the fused RMSNorm chain (engine.passes.fuse_rmsnorm) on
 * the aie_rms_norm kernel. t: y, x, scale (cols). ip: aie_norm_step. fp: eps. */
#include "aie_norm.h"
#include "exec_ops.h"

int aie_x_rms_norm(const aie_step_args *a) {
    const aie_norm_step *sp = (const aie_norm_step *)(const void *)a->ip;
    return aie_rms_norm(a->t[1], a->t[2], a->t[0], sp->rows, sp->cols, (float)a->fp[0], a->nthreads);
}
