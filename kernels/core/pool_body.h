/*
 * Pooling kernels (contract: aie_pool_fn / aie_gpool_fn in conv_kernels.h)
 * written once over the per-ISA vector vocabulary: VL channels per vector,
 * the channel tail through a masked load/store. avx2/pool_avx2.c and
 * avx512/pool_avx512.c include their vf header, define POOL_ROWS and GPOOL
 * (the function names) and include this file, and scalar/pool_scalar.c at one
 * lane. Window rules and NaN behaviour: aie_pool.h; the naive reference the
 * C tests check against is ref/pool_ref.c.
 */
#ifndef AIE_POOL_BODY_H
#define AIE_POOL_BODY_H

#include "conv_kernels.h"
#include "vf_tail.h"

/* NaN-sticky max: vf_max returns its second operand (acc) when either is
 * NaN, which keeps a NaN acc; a NaN v is then selected in. */
static inline vf pool_max(vf acc, vf v) { return vf_sel(vf_isnan(v), v, vf_max(v, acc)); }

void POOL_ROWS(const aie_pool_args *a, int64_t row0, int64_t row1) {
    const aie_pool2d_params *p = a->p;
    const int64_t C = p->C;
    const int is_max = a->kind == AIE_POOL_MAX;
    for (int64_t row = row0; row < row1; row++) {
        const int64_t n = row / a->P, pp = row % a->P;
        const aie_window wh = aie_pool_window(pp, p->stride_h, p->pad_top, p->pad_bottom, p->kh, p->dil_h, p->H);
        const int64_t h0 = pp * p->stride_h - p->pad_top;
        for (int64_t q = 0; q < a->Q; q++) {
            const aie_window ww = aie_pool_window(q, p->stride_w, p->pad_left, p->pad_right, p->kw, p->dil_w, p->W);
            const int64_t w0 = q * p->stride_w - p->pad_left;
            float *out = a->y + (row * a->Q + q) * C;
            const float count = p->count_include_pad ? (float)(wh.count_all * ww.count_all)
                                                     : (float)((wh.i1 - wh.i0) * (ww.i1 - ww.i0));
            for (int64_t c = 0; c < C; c += VL) {
                const int64_t left = C - c;
                vf acc = is_max ? vf_set1(-INFINITY) : vf_zero();
                for (int64_t i = wh.i0; i < wh.i1; i++) {
                    const float *xr = a->x + ((n * p->H + h0 + i * p->dil_h) * p->W + w0 + ww.i0 * p->dil_w) * C + c;
                    for (int64_t j = ww.i0; j < ww.i1; j++, xr += p->dil_w * C) {
                        const vf v = vf_load_upto(xr, left);
                        acc = is_max ? pool_max(acc, v) : vf_add(acc, v);
                    }
                }
                if (!is_max) acc = vf_div(acc, vf_set1(count));
                vf_store_upto(out + c, left, acc);
            }
        }
    }
}

void GPOOL(int kind, int64_t HW, int64_t C, const float *x, float *y, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; n++) {
        const float *xn = x + n * HW * C;
        for (int64_t c = 0; c < C; c += VL) {
            const int64_t left = C - c;
            vf acc = vf_load_upto(xn + c, left);
            for (int64_t i = 1; i < HW; i++) {
                const vf v = vf_load_upto(xn + i * C + c, left);
                acc = kind == AIE_POOL_MAX ? pool_max(acc, v) : vf_add(acc, v);
            }
            if (kind == AIE_POOL_AVG) acc = vf_div(acc, vf_set1((float)HW));
            vf_store_upto(y + n * C + c, left, acc);
        }
    }
}

#endif /* AIE_POOL_BODY_H */
