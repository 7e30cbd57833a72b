/* AIE_X_RMS_NORM: the fused RMSNorm chain (engine.passes.fuse_rmsnorm) on
 * the aie_rms_norm kernel. t: y, x, scale (cols). ip: rows, cols. fp: eps. */
#include "aie_norm.h"
#include "exec_ops.h"

int aie_x_rms_norm(const aie_step_args *a) {
    return aie_rms_norm(a->t[1], a->t[2], a->t[0], a->ip[0], a->ip[1], (float)a->fp[0], a->nthreads);
}
