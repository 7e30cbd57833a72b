/*
 * Naive pooling references (ref.h): every output's window walked tap by tap
 * in double, with onnxruntime's rules (ceil-mode windows, padding counted
 * only when count_include_pad, NaN propagated); test_pool.c checks every ISA
 * against them.
 */
#include <math.h>

#include "ref.h"

void aie_ref_pool2d(int kind, const aie_pool2d_params *p, int64_t P, int64_t Q, const float *x, double *y) {
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t i = 0; i < P; i++)
            for (int64_t j = 0; j < Q; j++)
                for (int64_t c = 0; c < p->C; c++) {
                    double acc = kind == AIE_POOL_MAX ? -INFINITY : 0;
                    int64_t in = 0, all = 0;
                    for (int64_t a = 0; a < p->kh; a++)
                        for (int64_t b = 0; b < p->kw; b++) {
                            int64_t h = i * p->stride_h - p->pad_top + a * p->dil_h;
                            int64_t w = j * p->stride_w - p->pad_left + b * p->dil_w;
                            if (h < p->H + p->pad_bottom && w < p->W + p->pad_right) all++;
                            if (h < 0 || h >= p->H || w < 0 || w >= p->W) continue;
                            double v = x[((n * p->H + h) * p->W + w) * p->C + c];
                            in++;
                            if (kind == AIE_POOL_MAX)
                                acc = (v > acc || v != v) ? v : acc;
                            else
                                acc += v;
                        }
                    if (kind == AIE_POOL_AVG) acc /= (double)(p->count_include_pad ? all : in);
                    y[((n * P + i) * Q + j) * p->C + c] = acc;
                }
}

void aie_ref_global_pool(int kind, int64_t N, int64_t HW, int64_t C, const float *x, double *y) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            double acc = kind == AIE_POOL_MAX ? -INFINITY : 0;
            for (int64_t i = 0; i < HW; i++) {
                double v = x[(n * HW + i) * C + c];
                acc = kind == AIE_POOL_MAX ? ((v > acc || v != v) ? v : acc) : acc + v;
            }
            if (kind == AIE_POOL_AVG) acc /= (double)HW;
            y[n * C + c] = acc;
        }
}
