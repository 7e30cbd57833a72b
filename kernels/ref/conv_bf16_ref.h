/*
 * Naive reference of the bf16 convolution (aie_conv_lowp.h) for the C tests
 * (kernels/ref/: linked into the tests only). Plain loops in double sharing
 * no code with the kernel.
 */
#ifndef AIE_CONV_BF16_REF_H
#define AIE_CONV_BF16_REF_H

#include "ref.h"

/* For every output (n, p, q, k) of NHWC x and OIHW w (groups 1), as doubles
 * at y[((n * P + p) * Q + q) * K + k]:
 *   rounded: sum over the window of bf16(x) * bf16(w) (each input rounded to
 *            bf16, nearest even), + residual + bias, then the activation;
 *   exact:   the same with the fp32 inputs as they are;
 *   mag:     sum |x w| + |residual| + |bias| (what the error bounds scale).
 * act/p0/p1 as aie_epilogue (through aie_ref_act); bias and residual may be
 * NULL, and so may any output. AIE_OK, or AIE_EINVAL on bad params. */
int aie_conv2d_bf16_naive(const aie_conv2d_params *p, const float *x, const float *w, const float *bias,
                          const float *residual, int act, double p0, double p1, double *rounded, double *exact,
                          double *mag);

#endif /* AIE_CONV_BF16_REF_H */
