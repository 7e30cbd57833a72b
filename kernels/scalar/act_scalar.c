/* The epilogue activations (core/vmath_fn.h) at one lane, for the scalar
 * depthwise kernel (not a vf_* instantiation itself). */
#include "conv_kernels.h"
#include "vf_scalar.h"

void aie_act_row_scalar(float *v, const float *residual, int64_t n, const aie_epilogue *ep) {
    if (residual)
        for (int64_t i = 0; i < n; i++) v[i] += residual[i];
    act_row(v, n, ep->act, ep->p0, ep->p1);
}
