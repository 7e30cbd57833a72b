/*
 * Depthwise convolution (contract: aie_dwconv_fn in conv_kernels.h) written
 * once over the per-ISA vector vocabulary: VL channels per vector, the
 * channel tail masked; taps accumulated with FMA in (r, s) order, the
 * epilogue (residual, then the activation of vmath_fn.h, as the standalone
 * ops) in registers. avx2/conv_depthwise_avx2.c and
 * avx512/conv_depthwise_avx512.c include their vf header, define DW_ROWS
 * (the function name) and include this file; scalar/conv_depthwise_scalar.c
 * does so at one lane; they also define DW_SPAN, the same for a run of one
 * row's output pixels into any buffer (the fused depthwise -> 1x1 conv,
 * conv_dw_pw.c). The naive reference is ref/conv_ref.c.
 * 3x3 (MobileNet's only depthwise kernel) has a fast path: per channel block
 * the nine weight vectors stay in registers while the block sweeps the
 * output row, so each output vector costs nine input loads and nine FMAs
 * (fewer on border rows); pixels that touch the left/right padding and other
 * kernel sizes take the generic per-pixel loop.
 */
#ifndef AIE_CONV_DEPTHWISE_BODY_H
#define AIE_CONV_DEPTHWISE_BODY_H

#include "conv_kernels.h"
#include "vf_tail.h"

/* Input row h (inside [0, H)) of image n: in x, or in the fused block's
 * ring of expanded rows (conv_dw_pw.c: row h at ring slot h % ring_rows). */
static inline const float *dw_in_row(const aie_dwconv_args *a, int64_t n, int64_t h) {
    const int64_t pitch = a->p->W * a->p->C;
    return a->ring ? a->ring + (h % a->ring_rows) * pitch : a->x + (n * a->p->H + h) * pitch;
}

/* One output pixel, channels [c, c + VL) (`left` remain); taps r in [r0, r1). */
static inline vf dw_pixel(const aie_dwconv_args *a, int64_t n, int64_t h0, int64_t r0, int64_t r1, int64_t q,
                          int64_t c, int64_t left, vf acc) {
    const aie_conv2d_params *p = a->p;
    const int64_t C = p->C, wbase = q * p->stride_w - p->pad_left;
    int64_t s0 = 0, s1 = p->S;
    while (s0 < s1 && wbase + s0 * p->dil_w < 0) s0++;
    while (s1 > s0 && wbase + (s1 - 1) * p->dil_w >= p->W) s1--;
    for (int64_t r = r0; r < r1; r++) {
        /* index arithmetic in int64 first: wbase may be negative */
        const float *xr = dw_in_row(a, n, h0 + r * p->dil_h) + (wbase + s0 * p->dil_w) * C + c;
        const float *wr = a->w + (r * p->S + s0) * C + c;
        for (int64_t s = s0; s < s1; s++, xr += p->dil_w * C, wr += C)
            acc = vf_fma(vf_load_upto(xr, left), vf_load_upto(wr, left), acc);
    }
    return acc;
}

/* yp: where the pixel's channels [c, c + VL) go; o: their offset in y's
 * layout, where the residual is read. */
static inline void dw_store(const aie_dwconv_args *a, float *yp, int64_t o, int64_t left, vf acc) {
    const aie_epilogue *ep = a->ep;
    if (a->residual) acc = vf_add(acc, vf_load_upto(a->residual + o, left));
    vf_store_upto(yp, left, vmf_act(ep->act, acc, ep->p0, ep->p1));
}

/* Output pixels [qa, qb) of a 3x3 output row, pixel q's channels at
 * out + (q - qa) * C; kernel rows [r0, r1) fall inside the image. */
static void dw3x3_span(const aie_dwconv_args *a, int64_t row, int64_t n, int64_t h0, int64_t r0, int64_t r1,
                       int64_t qa, int64_t qb, float *out) {
    const aie_conv2d_params *p = a->p;
    const int64_t C = p->C, sw = p->stride_w, dw = p->dil_w;
    /* output columns whose three taps are all inside [0, W), within [qa, qb) */
    int64_t q0 = (p->pad_left + sw - 1) / sw, q1 = a->Q;
    while (q1 > q0 && (q1 - 1) * sw - p->pad_left + 2 * dw >= p->W) q1--;
    if (q0 > q1) q0 = q1;
    if (q0 < qa) q0 = qa;
    if (q1 > qb) q1 = qb;
    if (q0 > q1) q0 = q1 = qb;
    for (int64_t c = 0; c < C; c += VL) {
        const int64_t left = C - c;
        vf w[9];
        for (int t = 0; t < 9; t++) w[t] = vf_load_upto(a->w + t * C + c, left);
        const vf b = a->bias ? vf_load_upto(a->bias + c, left) : vf_zero();
        for (int64_t q = qa; q < q0; q++)
            dw_store(a, out + (q - qa) * C + c, (row * a->Q + q) * C + c, left,
                     dw_pixel(a, n, h0, r0, r1, q, c, left, b));
        const int64_t cs = dw * C, col = (q0 * sw - p->pad_left) * C + c;
        /* rows outside the image are skipped by r0/r1 (a border output row):
         * their pointers stand in with row r0's and are never dereferenced */
        const float *x0 = dw_in_row(a, n, h0 + r0 * p->dil_h) + col, *x1 = x0, *x2 = x0;
        if (r0 <= 1 && r1 >= 2) x1 = dw_in_row(a, n, h0 + p->dil_h) + col;
        if (r1 == 3) x2 = dw_in_row(a, n, h0 + 2 * p->dil_h) + col;
        for (int64_t q = q0; q < q1; q++, x0 += sw * C, x1 += sw * C, x2 += sw * C) {
            vf acc = b;
            if (r0 == 0) {
                acc = vf_fma(vf_load_upto(x0, left), w[0], acc);
                acc = vf_fma(vf_load_upto(x0 + cs, left), w[1], acc);
                acc = vf_fma(vf_load_upto(x0 + 2 * cs, left), w[2], acc);
            }
            if (r0 <= 1 && r1 >= 2) {
                acc = vf_fma(vf_load_upto(x1, left), w[3], acc);
                acc = vf_fma(vf_load_upto(x1 + cs, left), w[4], acc);
                acc = vf_fma(vf_load_upto(x1 + 2 * cs, left), w[5], acc);
            }
            if (r1 == 3) {
                acc = vf_fma(vf_load_upto(x2, left), w[6], acc);
                acc = vf_fma(vf_load_upto(x2 + cs, left), w[7], acc);
                acc = vf_fma(vf_load_upto(x2 + 2 * cs, left), w[8], acc);
            }
            dw_store(a, out + (q - qa) * C + c, (row * a->Q + q) * C + c, left, acc);
        }
        for (int64_t q = q1; q < qb; q++)
            dw_store(a, out + (q - qa) * C + c, (row * a->Q + q) * C + c, left,
                     dw_pixel(a, n, h0, r0, r1, q, c, left, b));
    }
}

void DW_SPAN(const aie_dwconv_args *a, int64_t row, int64_t qa, int64_t qb, float *out) {
    const aie_conv2d_params *p = a->p;
    const int64_t C = p->C;
    const int64_t n = row / a->P, pp = row % a->P;
    const int64_t h0 = pp * p->stride_h - p->pad_top;
    int64_t r0 = 0, r1 = p->R; /* taps whose input row is inside [0, H) */
    while (r0 < r1 && h0 + r0 * p->dil_h < 0) r0++;
    while (r1 > r0 && h0 + (r1 - 1) * p->dil_h >= p->H) r1--;
    if (p->R == 3 && p->S == 3 && r0 < r1) {
        dw3x3_span(a, row, n, h0, r0, r1, qa, qb, out);
        return;
    }
    for (int64_t q = qa; q < qb; q++)
        for (int64_t c = 0; c < C; c += VL) {
            const int64_t left = C - c;
            const vf b = a->bias ? vf_load_upto(a->bias + c, left) : vf_zero();
            dw_store(a, out + (q - qa) * C + c, (row * a->Q + q) * C + c, left,
                     dw_pixel(a, n, h0, r0, r1, q, c, left, b));
        }
}

void DW_ROWS(const aie_dwconv_args *a, int64_t row0, int64_t row1) {
    for (int64_t row = row0; row < row1; row++) DW_SPAN(a, row, 0, a->Q, a->y + row * a->Q * a->p->C);
}

#endif /* AIE_CONV_DEPTHWISE_BODY_H */
