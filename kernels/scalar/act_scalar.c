/* The epilogue activations (core/vmath_fn.h) at one lane, for the callers
 * that are not a vf_* instantiation themselves: the scalar depthwise kernel
 * and the naive GEMM reference. */
#include "conv_kernels.h"
#include "gemm_internal.h"
#include "vf_scalar.h"

void aie_act_row_scalar(float *v, const float *residual, int64_t n, const aie_epilogue *ep) {
    if (residual)
        for (int64_t i = 0; i < n; i++) v[i] += residual[i];
    act_row(v, n, ep->act, ep->p0, ep->p1);
}

float aie_act_scalar(int act, float x, float p0, float p1) { return vmf_act(act, x, p0, p1); }
