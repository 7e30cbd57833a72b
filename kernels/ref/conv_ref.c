/*
 * Naive convolution references (ref.h): the aie_conv2d and
 * aie_conv_transpose2d contracts as plain loops over every output and tap in
 * double, NHWC, with the weights in ONNX's layouts; test_conv.c checks every
 * algorithm (GEMM, direct, Winograd, depthwise) on every ISA against them.
 */
#include <math.h>

#include "ref.h"

void aie_ref_conv2d(const aie_conv2d_params *p, int64_t P, int64_t Q, const float *x, const float *w,
                    const float *b, const float *res, int act, double p0, double p1, double *y, double *scale) {
    const int64_t Cg = p->C / p->groups, Kg = p->K / p->groups;
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t pp = 0; pp < P; pp++)
            for (int64_t q = 0; q < Q; q++)
                for (int64_t k = 0; k < p->K; k++) {
                    const int64_t g = k / Kg, o = ((n * P + pp) * Q + q) * p->K + k;
                    double acc = b[k], sc = fabs(b[k]);
                    for (int64_t r = 0; r < p->R; r++)
                        for (int64_t s = 0; s < p->S; s++) {
                            int64_t h = pp * p->stride_h - p->pad_top + r * p->dil_h;
                            int64_t wc = q * p->stride_w - p->pad_left + s * p->dil_w;
                            if (h < 0 || h >= p->H || wc < 0 || wc >= p->W) continue;
                            for (int64_t c = 0; c < Cg; c++) {
                                double xv = x[((n * p->H + h) * p->W + wc) * p->C + g * Cg + c];
                                double wv = w[((k * Cg + c) * p->R + r) * p->S + s];
                                acc += xv * wv;
                                sc += fabs(xv * wv);
                            }
                        }
                    if (res) {
                        acc += res[o];
                        sc += fabs(res[o]);
                    }
                    y[o] = aie_ref_act(act, acc, p0, p1);
                    scale[o] = sc + 1e-30;
                }
}

void aie_ref_conv_transpose2d(const aie_conv2d_params *p, int64_t P, int64_t Q, const float *x, const float *w,
                              const float *b, double *y, double *scale) {
    const int64_t Cg = p->C / p->groups, Kg = p->K / p->groups, ny = p->N * P * Q * p->K;
    for (int64_t o = 0; o < ny; o++) {
        y[o] = b[o % p->K];
        scale[o] = fabs(b[o % p->K]) + 1e-30;
    }
    /* every input pixel scatters into the outputs its taps reach */
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t h = 0; h < p->H; h++)
            for (int64_t wc = 0; wc < p->W; wc++)
                for (int64_t c = 0; c < p->C; c++)
                    for (int64_t k = 0; k < Kg; k++)
                        for (int64_t r = 0; r < p->R; r++)
                            for (int64_t s = 0; s < p->S; s++) {
                                int64_t oh = h * p->stride_h - p->pad_top + r * p->dil_h;
                                int64_t ow = wc * p->stride_w - p->pad_left + s * p->dil_w;
                                if (oh < 0 || oh >= P || ow < 0 || ow >= Q) continue;
                                double v = (double)x[((n * p->H + h) * p->W + wc) * p->C + c] *
                                           w[((c * Kg + k) * p->R + r) * p->S + s];
                                int64_t o = ((n * P + oh) * Q + ow) * p->K + c / Cg * Kg + k;
                                y[o] += v;
                                scale[o] += fabs(v);
                            }
}
