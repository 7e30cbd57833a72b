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

#endif /* AIE_REF_H */
