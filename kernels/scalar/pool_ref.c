/* Pooling, portable reference (NHWC). Window rules: aie_pool.h. */
#include "conv_kernels.h"

void aie_pool_rows_scalar(const aie_pool_args *a, int64_t row0, int64_t row1) {
    const aie_pool2d_params *p = a->p;
    const int64_t C = p->C;
    for (int64_t row = row0; row < row1; row++) {
        const int64_t n = row / a->P, pp = row % a->P;
        const aie_window wh = aie_pool_window(pp, p->stride_h, p->pad_top, p->pad_bottom, p->kh, p->dil_h, p->H);
        const int64_t h0 = pp * p->stride_h - p->pad_top;
        for (int64_t q = 0; q < a->Q; q++) {
            const aie_window ww = aie_pool_window(q, p->stride_w, p->pad_left, p->pad_right, p->kw, p->dil_w, p->W);
            const int64_t w0 = q * p->stride_w - p->pad_left;
            float *out = a->y + (row * a->Q + q) * C;
            for (int64_t c = 0; c < C; c++) out[c] = a->kind == AIE_POOL_MAX ? -INFINITY : 0.f;
            for (int64_t i = wh.i0; i < wh.i1; i++) {
                for (int64_t j = ww.i0; j < ww.i1; j++) {
                    const float *xin = a->x + ((n * p->H + h0 + i * p->dil_h) * p->W + w0 + j * p->dil_w) * C;
                    if (a->kind == AIE_POOL_MAX) {
                        /* NaN is sticky: once out[c] is NaN, v > NaN is false */
                        for (int64_t c = 0; c < C; c++)
                            if (xin[c] > out[c] || xin[c] != xin[c]) out[c] = xin[c];
                    } else {
                        for (int64_t c = 0; c < C; c++) out[c] += xin[c];
                    }
                }
            }
            if (a->kind == AIE_POOL_AVG) {
                const float count = p->count_include_pad ? (float)(wh.count_all * ww.count_all)
                                                         : (float)((wh.i1 - wh.i0) * (ww.i1 - ww.i0));
                for (int64_t c = 0; c < C; c++) out[c] /= count;
            }
        }
    }
}

void aie_gpool_scalar(int kind, int64_t HW, int64_t C, const float *x, float *y, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; n++) {
        const float *xn = x + n * HW * C;
        float *out = y + n * C;
        for (int64_t c = 0; c < C; c++) out[c] = xn[c];
        for (int64_t i = 1; i < HW; i++) {
            const float *xin = xn + i * C;
            if (kind == AIE_POOL_MAX) {
                for (int64_t c = 0; c < C; c++)
                    if (xin[c] > out[c] || xin[c] != xin[c]) out[c] = xin[c];
            } else {
                for (int64_t c = 0; c < C; c++) out[c] += xin[c];
            }
        }
        if (kind == AIE_POOL_AVG)
            for (int64_t c = 0; c < C; c++) out[c] /= (float)HW;
    }
}
