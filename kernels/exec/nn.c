/* Neural-network executor ops built on the library's SGEMM: batched MatMul /
 * Gemm (B pre-packed at conversion where it is a constant) and Resize.
 * Convolution and pooling are in conv.c, the recurrences in recurrent.c.
 * Scratch (GEMM packing) comes from the step's workspace operand, carved out
 * of the arena at plan time, so nothing here allocates. */
#include "nd_iter.h"

#include <math.h>
#include <string.h>

static int gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const aie_epilogue *ep,
                void *ws, size_t wss, int nthreads) {
    return aie_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ep, ws, wss, nthreads);
}

int aie_x_matmul(const aie_step_args *a) {
    const aie_matmul_step *sp = (const aie_matmul_step *)(const void *)a->ip;
    int64_t M = sp->M, N = sp->N, K = sp->K, ta = sp->trans_a, tb = sp->trans_b, lda = sp->lda, ldb = sp->ldb;
    int64_t br = sp->batch_rank;
    if (br < 0 || br > AIE_MAX_DIMS) return aie_fail(AIE_EINVAL, "bad batch rank %lld", (long long)br);
    const int64_t *bshape = sp->dims, *sa = sp->dims + br, *sb = sp->dims + 2 * br;
    size_t wss = (size_t)sp->workspace_bytes;
    aie_epilogue ep = {a->t[3], a->t[3] ? (int)sp->bias_kind : AIE_BIAS_NONE, (int)sp->act, (float)a->fp[2],
                       (float)a->fp[3]};
    float alpha = (float)a->fp[0], beta = (float)a->fp[1];
    int64_t nb = 1;
    for (int64_t d = 0; d < br; d++) nb *= bshape[d];
    float *C = a->t[0];
    const float *A = a->t[1], *B = a->t[2];
    for (int64_t b = 0; b < nb; b++) {
        int64_t rem = b, oa = 0, ob = 0;
        for (int64_t d = br - 1; d >= 0; d--) {
            int64_t i = rem % bshape[d];
            rem /= bshape[d];
            oa += i * sa[d];
            ob += i * sb[d];
        }
        int rc = gemm((int)ta, (int)tb, M, N, K, alpha, A + oa, lda, B + ob, ldb, beta, C + b * M * N, N, &ep,
                      a->t[4], wss, a->nthreads);
        if (rc != AIE_OK) return rc;
    }
    return AIE_OK;
}

/* C = alpha * op(A) B + beta * C with B packed by aie_sgemm_pack_b. */
int aie_x_gemm_packed(const aie_step_args *a) {
    const aie_gemm_packed_step *sp = (const aie_gemm_packed_step *)(const void *)a->ip;
    aie_epilogue ep = {a->t[3], a->t[3] ? (int)sp->bias_kind : AIE_BIAS_NONE, (int)sp->act, (float)a->fp[2],
                       (float)a->fp[3]};
    return aie_sgemm_packed((int)sp->trans_a, sp->M, sp->N, sp->K, (float)a->fp[0], a->t[1], sp->lda, a->t[2],
                            (float)a->fp[1], a->t[0], sp->N, &ep, a->t[4], (size_t)sp->workspace_bytes, a->nthreads);
}

/* ---- resize ----------------------------------------------------------- */

/* `out` is the resized length as ONNX defines it: in * scale (not rounded)
 * when scales were given, the requested size otherwise. */
static double resize_coord(int64_t mode, double o, double scale, int64_t in, double out) {
    switch (mode) {
    case 1: return o / scale;
    case 2: return out != 1.0 ? o * (double)(in - 1) / (out - 1.0) : 0.0;
    case 3: return out > 1.0 ? (o + 0.5) / scale - 0.5 : 0.0;
    case 4: return (o + 0.5) / scale;
    default: return (o + 0.5) / scale - 0.5;
    }
}

static int64_t resize_nearest(int64_t mode, double v, int64_t in) {
    int64_t i;
    switch (mode) {
    case 1: i = (int64_t)ceil(v - 0.5); if (v - floor(v) == 0.5) i = (int64_t)ceil(v); break;
    case 2: i = (int64_t)floor(v); break;
    case 3: i = (int64_t)ceil(v); break;
    default: i = (v - floor(v) == 0.5) ? (int64_t)floor(v) : (int64_t)llround(v); break;
    }
    return i < 0 ? 0 : (i >= in ? in - 1 : i);
}

int aie_x_resize(const aie_step_args *a) {
    const aie_resize_step *sp = (const aie_resize_step *)(const void *)a->ip;
    int64_t outer = sp->outer, ih = sp->ih, iw = sp->iw, oh = sp->oh, ow = sp->ow;
    int64_t mode = sp->mode, coord = sp->coord, nearest = sp->nearest, nhwc_c = sp->channels;
    double sh = a->fp[0], sw = a->fp[1], lh = a->fp[2], lw = a->fp[3];
    float *y = a->t[0];
    const float *x = a->t[1];
    /* NHWC (nhwc_c channels; the converter only lays Resize out so for the
     * library's coordinate modes) or NCHW with a mode the library has. */
    if (nhwc_c > 0)
        return aie_resize2d(x, y, AIE_LAYOUT_NHWC, outer, nhwc_c, ih, iw, oh, ow, sh, sw, (int)mode, (int)coord,
                            (int)nearest, a->nthreads);
    if (coord <= AIE_COORD_PYTORCH_HALF_PIXEL && lh == sh * (double)ih && lw == sw * (double)iw)
        return aie_resize2d(x, y, AIE_LAYOUT_NCHW, outer, 1, ih, iw, oh, ow, sh, sw, (int)mode, (int)coord,
                            (int)nearest, a->nthreads);
    for (int64_t q = 0; q < outer; q++) {
        const float *xs = x + q * ih * iw;
        float *ys = y + q * oh * ow;
        for (int64_t i = 0; i < oh; i++) {
            double fy = resize_coord(coord, (double)i, sh, ih, lh);
            for (int64_t j = 0; j < ow; j++) {
                double fx = resize_coord(coord, (double)j, sw, iw, lw);
                if (mode == 0) {
                    ys[i * ow + j] = xs[resize_nearest(nearest, fy, ih) * iw + resize_nearest(nearest, fx, iw)];
                    continue;
                }
                double cy = fy < 0 ? 0 : (fy > (double)(ih - 1) ? (double)(ih - 1) : fy);
                double cx = fx < 0 ? 0 : (fx > (double)(iw - 1) ? (double)(iw - 1) : fx);
                int64_t y0 = (int64_t)floor(cy), x0 = (int64_t)floor(cx);
                int64_t y1 = y0 + 1 < ih ? y0 + 1 : ih - 1, x1 = x0 + 1 < iw ? x0 + 1 : iw - 1;
                double ly = cy - (double)y0, lx = cx - (double)x0;
                double v = (1 - ly) * ((1 - lx) * xs[y0 * iw + x0] + lx * xs[y0 * iw + x1]) +
                           ly * ((1 - lx) * xs[y1 * iw + x0] + lx * xs[y1 * iw + x1]);
                ys[i * ow + j] = (float)v;
            }
        }
    }
    return AIE_OK;
}

