/*
 * Independent naive references for the C tests (kernels/ref/, linked into
 * the test binaries only, never into the library): plain loops in double
 * with libm, sharing no code with the kernels they check.
 */
#ifndef AIE_REF_H
#define AIE_REF_H

#include <stdint.h>

#include "aie_kernels.h"

/* One epilogue activation (an AIE_U_* code with AIE_UF_EPI, parameters p0/p1 as aie_epilogue)
 * in double: gelu through erfc, hardswish/hardsigmoid on alpha x + beta. */
double aie_ref_act(int act, double x, double p0, double p1);

/* The aie_sgemm contract as three loops with double accumulation (no
 * blocking, packing or workspace); the activation through aie_ref_act. */
int aie_sgemm_naive(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                    int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                    const aie_epilogue *ep);

/* aie_conv2d's contract (NHWC x, OIHW w, groups, bias b, residual res or
 * NULL, the activation act with p0/p1) as loops over every output and tap.
 * scale[o] = sum |x w| + |b| + |res| + 1e-30: the size of what was summed,
 * so an error divided by it is relative to the work, not to a cancelled
 * result. P x Q: the output size. */
void aie_ref_conv2d(const aie_conv2d_params *p, int64_t P, int64_t Q, const float *x, const float *w,
                    const float *b, const float *res, int act, double p0, double p1, double *y, double *scale);
/* aie_conv_transpose2d's (w: C x K/groups x R x S), scale as above. */
void aie_ref_conv_transpose2d(const aie_conv2d_params *p, int64_t P, int64_t Q, const float *x, const float *w,
                              const float *b, double *y, double *scale);

/* aie_pool2d's contract (kind AIE_POOL_MAX or AIE_POOL_AVG), P x Q outputs. */
void aie_ref_pool2d(int kind, const aie_pool2d_params *p, int64_t P, int64_t Q, const float *x, double *y);
/* aie_global_pool's: N x HW x C -> N x C. */
void aie_ref_global_pool(int kind, int64_t N, int64_t HW, int64_t C, const float *x, double *y);

#endif /* AIE_REF_H */
