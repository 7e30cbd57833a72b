/*
 * Naive bf16 convolution reference (conv_bf16_ref.h): the definition of a
 * convolution as seven loops, in double, with its own spelling of the bf16
 * rounding (mantissa arithmetic, not the kernels' bit trick).
 */
#include <math.h>

#include "conv_bf16_ref.h"

/* Nearest-even rounding to 8 significant bits, by frexp/ldexp (finite x). */
static double bf16_value(float x) {
    if (x == 0.0f || !isfinite(x)) return x;
    int e;
    double m = frexp((double)x, &e); /* x = m * 2^e, 0.5 <= |m| < 1 */
    return ldexp(nearbyint(ldexp(m, 8)), e - 8); /* nearbyint: the FPU's half-to-even */
}

int aie_conv2d_bf16_naive(const aie_conv2d_params *p, const float *x, const float *w, const float *bias,
                          const float *residual, int act, double p0, double p1, double *rounded, double *exact,
                          double *mag) {
    if (p->groups != 1 || p->stride_h < 1 || p->stride_w < 1 || p->dil_h < 1 || p->dil_w < 1) return AIE_EINVAL;
    const int64_t P = (p->H + p->pad_top + p->pad_bottom - (p->R - 1) * p->dil_h - 1) / p->stride_h + 1;
    const int64_t Q = (p->W + p->pad_left + p->pad_right - (p->S - 1) * p->dil_w - 1) / p->stride_w + 1;
    if (P < 1 || Q < 1) return AIE_EINVAL;
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t oh = 0; oh < P; oh++)
            for (int64_t ow = 0; ow < Q; ow++)
                for (int64_t k = 0; k < p->K; k++) {
                    double sr = 0, se = 0, sm = 0;
                    for (int64_t r = 0; r < p->R; r++)
                        for (int64_t s = 0; s < p->S; s++) {
                            const int64_t ih = oh * p->stride_h - p->pad_top + r * p->dil_h;
                            const int64_t iw = ow * p->stride_w - p->pad_left + s * p->dil_w;
                            if (ih < 0 || ih >= p->H || iw < 0 || iw >= p->W) continue;
                            for (int64_t c = 0; c < p->C; c++) {
                                const float xv = x[((n * p->H + ih) * p->W + iw) * p->C + c];
                                const float wv = w[((k * p->C + c) * p->R + r) * p->S + s];
                                sr += bf16_value(xv) * bf16_value(wv);
                                se += (double)xv * (double)wv;
                                sm += fabs((double)xv * (double)wv);
                            }
                        }
                    const int64_t o = ((n * P + oh) * Q + ow) * p->K + k;
                    const double add = (residual ? (double)residual[o] : 0.0) + (bias ? (double)bias[k] : 0.0);
                    sm += (residual ? fabs((double)residual[o]) : 0.0) + (bias ? fabs((double)bias[k]) : 0.0);
                    if (rounded) rounded[o] = aie_ref_act(act, sr + add, p0, p1);
                    if (exact) exact[o] = aie_ref_act(act, se + add, p0, p1);
                    if (mag) mag[o] = sm;
                }
    return AIE_OK;
}
