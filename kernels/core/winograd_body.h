/*
 * Winograd F(2x2, 3x3) tile transforms (contract: aie_winograd_kernel in
 * conv_kernels.h), written once over the per-ISA vector vocabulary and
 * instantiated by scalar/winograd_scalar.c, avx2/winograd_avx2.c and
 * avx512/winograd_avx512.c with their own ISA flags. The including file
 * defines vf, VL and the vf_* primitives (vf_<isa>.h) and WG_NAME/WG_TABLE.
 *
 * Both transforms vectorise over channels: NHWC puts a pixel's channels
 * side by side, so one 4x4 input tile is 16 contiguous channel runs and the
 * arithmetic is the same adds on VL channels at a time. Only additions and
 * subtractions (B and A have entries 0 and +-1), so the transforms add no
 * rounding beyond the sums themselves.
 *
 *   V = B^T d B, B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
 *   Y = A^T m A, A^T = [1 1 1 0; 0 1 -1 -1]
 */
#include "conv_kernels.h"

#define WG_CAT2(a, b) a##b
#define WG_CAT(a, b) WG_CAT2(a, b)

static inline vf wg_ld(const float *p, int n) { return n == VL ? vf_load(p) : vf_loadn(p, n); }
static inline void wg_st(float *p, vf v, int n) {
    if (n == VL) vf_store(p, v);
    else vf_storen(p, v, n);
}

static void WG_CAT(WG_NAME, _input)(const aie_winograd_args *a, int64_t t0, int64_t nt, float *v, int64_t vstride) {
    const aie_conv2d_params *p = a->p;
    const int64_t C = p->C, per_image = a->th * a->tw;
    for (int64_t i = 0; i < nt; i++) {
        const int64_t t = t0 + i, n = t / per_image, ti = t % per_image / a->tw, tj = t % a->tw;
        /* the tile's 16 input pixels; NULL where the tile hangs over the
         * image (the padding, and the ragged last row/column of tiles) */
        const float *src[16];
        for (int r = 0; r < 4; r++)
            for (int s = 0; s < 4; s++) {
                const int64_t h = 2 * ti - p->pad_top + r, w = 2 * tj - p->pad_left + s;
                src[r * 4 + s] = h >= 0 && h < p->H && w >= 0 && w < p->W ? a->x + ((n * p->H + h) * p->W + w) * C
                                                                          : NULL;
            }
        float *dst = v + i * C;
        for (int64_t c = 0; c < C; c += VL) {
            const int nc = (int)(C - c < VL ? C - c : VL);
            vf d[16], u[16];
            for (int k = 0; k < 16; k++) d[k] = src[k] ? wg_ld(src[k] + c, nc) : vf_zero();
            for (int s = 0; s < 4; s++) { /* B^T d: combine rows */
                u[0 * 4 + s] = vf_sub(d[0 * 4 + s], d[2 * 4 + s]);
                u[1 * 4 + s] = vf_add(d[1 * 4 + s], d[2 * 4 + s]);
                u[2 * 4 + s] = vf_sub(d[2 * 4 + s], d[1 * 4 + s]);
                u[3 * 4 + s] = vf_sub(d[1 * 4 + s], d[3 * 4 + s]);
            }
            for (int r = 0; r < 4; r++) { /* (B^T d) B: combine columns */
                const vf *q = u + r * 4;
                wg_st(dst + (r * 4 + 0) * vstride + c, vf_sub(q[0], q[2]), nc);
                wg_st(dst + (r * 4 + 1) * vstride + c, vf_add(q[1], q[2]), nc);
                wg_st(dst + (r * 4 + 2) * vstride + c, vf_sub(q[2], q[1]), nc);
                wg_st(dst + (r * 4 + 3) * vstride + c, vf_sub(q[1], q[3]), nc);
            }
        }
    }
}

static void WG_CAT(WG_NAME, _output)(const aie_winograd_args *a, int64_t t0, int64_t nt, const float *m,
                                     int64_t mstride, int64_t ldm, int64_t j, int ncols) {
    const aie_conv2d_params *p = a->p;
    const int64_t K = p->K, per_image = a->th * a->tw;
    const aie_epilogue *ep = a->ep;
    const int act = ep ? ep->act : AIE_U_IDENTITY;
    /* ReLU and Clip inline (max/min keep a NaN as the GEMM epilogue does);
     * other activations run over each stored pixel row afterwards */
    const int clamp = act == AIE_U_RELU || act == AIE_U_CLIP;
    const vf lo = vf_set1(act == AIE_U_CLIP ? ep->p0 : 0.0f);
    const vf hi = vf_set1(act == AIE_U_CLIP ? ep->p1 : __builtin_inff());
    for (int64_t i = 0; i < nt; i++) {
        const int64_t t = t0 + i, n = t / per_image, ti = t % per_image / a->tw, tj = t % a->tw;
        float *out[4];
        const float *res[4];
        for (int k = 0; k < 4; k++) {
            const int64_t oh = 2 * ti + k / 2, ow = 2 * tj + k % 2;
            const int ok = oh < a->P && ow < a->Q;
            const int64_t off = ((n * a->P + oh) * a->Q + ow) * K + j;
            out[k] = ok ? a->y + off : NULL;
            res[k] = ok && a->residual ? a->residual + off : NULL;
        }
        const float *mi = m + i * ldm;
        for (int64_t c = 0; c < ncols; c += VL) {
            const int nc = (int)(ncols - c < VL ? ncols - c : VL);
            vf q[16];
            for (int k = 0; k < 16; k++) q[k] = vf_load(mi + k * mstride + c); /* m rows are whole panels */
            vf s0[4], s1[4], o[4];
            for (int s = 0; s < 4; s++) { /* A^T m: combine rows */
                s0[s] = vf_add(vf_add(q[0 * 4 + s], q[1 * 4 + s]), q[2 * 4 + s]);
                s1[s] = vf_sub(vf_sub(q[1 * 4 + s], q[2 * 4 + s]), q[3 * 4 + s]);
            }
            o[0] = vf_add(vf_add(s0[0], s0[1]), s0[2]);
            o[1] = vf_sub(vf_sub(s0[1], s0[2]), s0[3]);
            o[2] = vf_add(vf_add(s1[0], s1[1]), s1[2]);
            o[3] = vf_sub(vf_sub(s1[1], s1[2]), s1[3]);
            const vf b = a->bias ? wg_ld(a->bias + j + c, nc) : vf_zero();
            for (int k = 0; k < 4; k++) {
                if (!out[k]) continue;
                vf r = a->bias ? vf_add(o[k], b) : o[k];
                if (res[k]) r = vf_add(r, wg_ld(res[k] + c, nc));
                if (clamp) r = vf_max(lo, vf_min(hi, r));
                wg_st(out[k] + c, r, nc);
            }
        }
        if (act != AIE_U_IDENTITY && !clamp)
            for (int k = 0; k < 4; k++)
                if (out[k]) act_row(out[k], ncols, act, ep->p0, ep->p1);
    }
}

const aie_winograd_kernel WG_TABLE = {WG_CAT(WG_NAME, _input), WG_CAT(WG_NAME, _output)};
