/* Neural-network executor ops built on the library's SGEMM: batched MatMul /
 * Gemm, Conv (NCHW, im2col + SGEMM; depthwise direct), pooling, Resize and
 * the LSTM recurrence. Scratch (im2col columns, GEMM packing, LSTM gates)
 * comes from the step's workspace operand, carved out of the arena at plan
 * time, so nothing here allocates. */
#include "nd_iter.h"

#include <math.h>
#include <string.h>

static int gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const aie_epilogue *ep,
                void *ws, size_t wss, int nthreads) {
    return aie_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ep, ws, wss, nthreads);
}

int aie_x_matmul(const aie_step_args *a) {
    const int64_t *ip = a->ip;
    int64_t M = ip[0], N = ip[1], K = ip[2], ta = ip[3], tb = ip[4], lda = ip[5], ldb = ip[6];
    int64_t br = ip[9];
    if (br < 0 || br > AIE_MAX_RANK) return aie_fail(AIE_EINVAL, "bad batch rank %lld", (long long)br);
    const int64_t *bshape = ip + 10, *sa = ip + 10 + br, *sb = ip + 10 + 2 * br;
    size_t wss = (size_t)ip[10 + 3 * br];
    aie_epilogue ep = {a->t[3], a->t[3] ? (int)ip[7] : AIE_BIAS_NONE, (int)ip[8], (float)a->fp[2], (float)a->fp[3]};
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

/* ---- convolution ------------------------------------------------------ */

typedef struct {
    const float *x;
    float *col;
    int64_t C, H, W, OH, OW, kh, kw, sh, sw, pt, pl, dh, dw;
} im2col_ctx;

/* col[(c*kh + i)*kw + j][oh*OW + ow] = x[c][oh*sh - pt + i*dh][ow*sw - pl + j*dw] */
static void im2col_task(void *vctx, int64_t task, int64_t ntasks) {
    const im2col_ctx *c = vctx;
    int64_t rows = c->C * c->kh * c->kw, lo, hi;
    aie_chunk(rows, task, ntasks, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t ch = r / (c->kh * c->kw), i = (r / c->kw) % c->kh, j = r % c->kw;
        float *dst = c->col + r * c->OH * c->OW;
        const float *src = c->x + ch * c->H * c->W;
        for (int64_t oh = 0; oh < c->OH; oh++) {
            int64_t h = oh * c->sh - c->pt + i * c->dh;
            float *d = dst + oh * c->OW;
            if (h < 0 || h >= c->H) { memset(d, 0, (size_t)c->OW * sizeof(float)); continue; }
            const float *s = src + h * c->W;
            for (int64_t ow = 0; ow < c->OW; ow++) {
                int64_t w = ow * c->sw - c->pl + j * c->dw;
                d[ow] = (w >= 0 && w < c->W) ? s[w] : 0.f;
            }
        }
    }
}

static float act_apply(int act, float v, float p0, float p1) {
    switch (act) {
    case AIE_ACT_RELU: return v > 0.f ? v : 0.f;
    case AIE_ACT_CLIP: return v < p0 ? p0 : (v > p1 ? p1 : v);
    case AIE_ACT_SIGMOID: return 1.f / (1.f + expf(-v));
    case AIE_ACT_SILU: return v / (1.f + expf(-v));
    case AIE_ACT_HARDSWISH: { float t = v / 6.f + 0.5f; return v * (t < 0.f ? 0.f : (t > 1.f ? 1.f : t)); }
    case AIE_ACT_HARDSIGMOID: { float t = p0 * v + p1; return t < 0.f ? 0.f : (t > 1.f ? 1.f : t); }
    case AIE_ACT_LEAKY_RELU: return v >= 0.f ? v : p0 * v;
    case AIE_ACT_TANH: return tanhf(v);
    case AIE_ACT_GELU: return 0.5f * v * (1.f + erff(v * 0.70710678118654752440f));
    default: return v;
    }
}

typedef struct {
    const float *x, *w, *bias;
    float *y;
    int64_t C, H, W, OH, OW, kh, kw, sh, sw, pt, pl, dh, dw;
    int act;
    float p0, p1;
} dw_ctx;

/* Depthwise (one input and one output channel per group): direct loops, a
 * GEMM per channel would be M = 1 and waste the micro-kernel. */
static void depthwise_task(void *vctx, int64_t task, int64_t ntasks) {
    const dw_ctx *c = vctx;
    int64_t lo, hi;
    aie_chunk(c->C, task, ntasks, &lo, &hi);
    for (int64_t ch = lo; ch < hi; ch++) {
        const float *x = c->x + ch * c->H * c->W, *w = c->w + ch * c->kh * c->kw;
        float *y = c->y + ch * c->OH * c->OW;
        float b = c->bias ? c->bias[ch] : 0.f;
        for (int64_t oh = 0; oh < c->OH; oh++)
            for (int64_t ow = 0; ow < c->OW; ow++) {
                float s = 0.f;
                for (int64_t i = 0; i < c->kh; i++) {
                    int64_t h = oh * c->sh - c->pt + i * c->dh;
                    if (h < 0 || h >= c->H) continue;
                    for (int64_t j = 0; j < c->kw; j++) {
                        int64_t ww = ow * c->sw - c->pl + j * c->dw;
                        if (ww >= 0 && ww < c->W) s += x[h * c->W + ww] * w[i * c->kw + j];
                    }
                }
                y[oh * c->OW + ow] = act_apply(c->act, s + b, c->p0, c->p1);
            }
    }
}

int aie_x_conv(const aie_step_args *a) {
    const int64_t *ip = a->ip;
    int64_t N = ip[0], C = ip[1], H = ip[2], W = ip[3], M = ip[4], OH = ip[5], OW = ip[6], kh = ip[7], kw = ip[8];
    int64_t sh = ip[9], sw = ip[10], pt = ip[11], pl = ip[12], dh = ip[13], dw = ip[14], G = ip[15];
    int act = (int)ip[16];
    size_t ws_size = (size_t)ip[17];
    float p0 = (float)a->fp[0], p1 = (float)a->fp[1];
    float *y = a->t[0];
    const float *x = a->t[1], *w = a->t[2], *bias = a->t[3];
    char *ws = a->t[4];
    int64_t Cg = C / G, Mg = M / G, Kc = Cg * kh * kw, P = OH * OW;
    if (Cg == 1 && Mg == 1) {
        for (int64_t n = 0; n < N; n++) {
            dw_ctx c = {x + n * C * H * W, w, bias, y + n * M * P, C, H, W, OH, OW, kh, kw, sh, sw, pt, pl, dh, dw,
                        act, p0, p1};
            aie_parallel_for(aie_tasks_for(C * P * kh * kw, C, a->nthreads), a->nthreads, depthwise_task, &c);
        }
        return AIE_OK;
    }
    int direct = kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && OH == H && OW == W;
    size_t col_bytes = direct ? 0 : (size_t)AIE_ROUND_UP(Kc * P * (int64_t)sizeof(float), AIE_ALIGN);
    if (col_bytes > ws_size) return aie_fail(AIE_ENOMEM, "conv workspace %zu < %zu", ws_size, col_bytes);
    float *col = (float *)ws;
    void *gws = ws + col_bytes;
    size_t gwss = ws_size - col_bytes;
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < G; g++) {
            const float *xg = x + (n * C + g * Cg) * H * W;
            const float *B = xg;
            if (!direct) {
                im2col_ctx c = {xg, col, Cg, H, W, OH, OW, kh, kw, sh, sw, pt, pl, dh, dw};
                aie_parallel_for(aie_tasks_for(Kc * P, Kc, a->nthreads), a->nthreads, im2col_task, &c);
                B = col;
            }
            aie_epilogue ep = {bias ? bias + g * Mg : NULL, bias ? AIE_BIAS_ROW : AIE_BIAS_NONE, act, p0, p1};
            int rc = gemm(0, 0, Mg, P, Kc, 1.f, w + g * Mg * Kc, Kc, B, P, 0.f, y + (n * M + g * Mg) * P, P, &ep,
                          gws, gwss, a->nthreads);
            if (rc != AIE_OK) return rc;
        }
    return AIE_OK;
}

int aie_x_conv_transpose(const aie_step_args *a) {
    const int64_t *ip = a->ip;
    int64_t N = ip[0], C = ip[1], H = ip[2], W = ip[3], M = ip[4], OH = ip[5], OW = ip[6], kh = ip[7], kw = ip[8];
    int64_t sh = ip[9], sw = ip[10], pt = ip[11], pl = ip[12], dh = ip[13], dw = ip[14], G = ip[15];
    size_t ws_size = (size_t)ip[16];
    float *y = a->t[0];
    const float *x = a->t[1], *w = a->t[2], *bias = a->t[3];
    int64_t Cg = C / G, Mg = M / G, R = Mg * kh * kw, P = H * W;
    size_t col_bytes = (size_t)AIE_ROUND_UP(R * P * (int64_t)sizeof(float), AIE_ALIGN);
    if (col_bytes > ws_size) return aie_fail(AIE_ENOMEM, "conv_transpose workspace %zu < %zu", ws_size, col_bytes);
    float *col = a->t[4];
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < G; g++) {
            /* col[R, P] = W_g^T [R, Cg] * X_g [Cg, P] */
            int rc = gemm(1, 0, R, P, Cg, 1.f, w + g * Cg * R, R, x + (n * C + g * Cg) * P, P, 0.f, col, P, NULL,
                          (char *)a->t[4] + col_bytes, ws_size - col_bytes, a->nthreads);
            if (rc != AIE_OK) return rc;
            float *yg = y + (n * M + g * Mg) * OH * OW;
            for (int64_t m = 0; m < Mg; m++) {
                float b = bias ? bias[g * Mg + m] : 0.f;
                for (int64_t q = 0; q < OH * OW; q++) yg[m * OH * OW + q] = b;
            }
            for (int64_t r = 0; r < R; r++) {
                int64_t m = r / (kh * kw), i = (r / kw) % kh, j = r % kw;
                float *ym = yg + m * OH * OW;
                const float *cr = col + r * P;
                for (int64_t h = 0; h < H; h++) {
                    int64_t oh = h * sh - pt + i * dh;
                    if (oh < 0 || oh >= OH) continue;
                    for (int64_t ww = 0; ww < W; ww++) {
                        int64_t ow = ww * sw - pl + j * dw;
                        if (ow >= 0 && ow < OW) ym[oh * OW + ow] += cr[h * W + ww];
                    }
                }
            }
        }
    return AIE_OK;
}

/* ---- pooling ---------------------------------------------------------- */

typedef struct {
    const int64_t *ip;
    float *y;
    const float *x;
} pool_ctx;

static void pool_task(void *vctx, int64_t task, int64_t ntasks) {
    const pool_ctx *c = vctx;
    const int64_t *ip = c->ip;
    int64_t NC = ip[0], H = ip[1], W = ip[2], OH = ip[3], OW = ip[4], kh = ip[5], kw = ip[6], sh = ip[7], sw = ip[8];
    int64_t pt = ip[9], pl = ip[10], dh = ip[11], dw = ip[12], kind = ip[13], incl = ip[14], pb = ip[15], pr = ip[16];
    int64_t lo, hi;
    aie_chunk(NC, task, ntasks, &lo, &hi);
    for (int64_t nc = lo; nc < hi; nc++) {
        const float *x = c->x + nc * H * W;
        float *y = c->y + nc * OH * OW;
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                float m = -INFINITY;
                double s = 0;
                int64_t cnt = 0, cnt_pad = 0;
                for (int64_t i = 0; i < kh; i++) {
                    int64_t h = oh * sh - pt + i * dh;
                    if (h >= -pt && h < H + pb) {
                        for (int64_t j = 0; j < kw; j++) {
                            int64_t w = ow * sw - pl + j * dw;
                            if (w < -pl || w >= W + pr) continue;
                            cnt_pad++;
                            if (h < 0 || h >= H || w < 0 || w >= W) continue;
                            float v = x[h * W + w];
                            m = (v > m || isnan(v)) ? v : m;
                            s += v;
                            cnt++;
                        }
                    }
                }
                if (kind == 0) y[oh * OW + ow] = m;
                else y[oh * OW + ow] = (float)(s / (double)((incl ? cnt_pad : cnt) ? (incl ? cnt_pad : cnt) : 1));
            }
    }
}

int aie_x_pool(const aie_step_args *a) {
    pool_ctx c = {a->ip, a->t[0], a->t[1]};
    int64_t NC = a->ip[0];
    aie_parallel_for(aie_tasks_for(NC * a->ip[3] * a->ip[4] * a->ip[5] * a->ip[6], NC, a->nthreads), a->nthreads,
                     pool_task, &c);
    return AIE_OK;
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
    int64_t outer = a->ip[0], ih = a->ip[1], iw = a->ip[2], oh = a->ip[3], ow = a->ip[4];
    int64_t mode = a->ip[5], coord = a->ip[6], nearest = a->ip[7];
    double sh = a->fp[0], sw = a->fp[1], lh = a->fp[2], lw = a->fp[3];
    float *y = a->t[0];
    const float *x = a->t[1];
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

/* ---- LSTM ------------------------------------------------------------- */

static float sigm(float v) { return 1.f / (1.f + expf(-v)); }

int aie_x_lstm(const aie_step_args *a) {
    int64_t S = a->ip[0], B = a->ip[1], I = a->ip[2], H = a->ip[3], rev = a->ip[4], ys = a->ip[5], yb = a->ip[6];
    size_t wss = (size_t)a->ip[7];
    float *y = a->t[0], *h = a->t[5], *c = a->t[6], *g = a->t[7];
    const float *x = a->t[1], *w = a->t[2], *r = a->t[3], *bias = a->t[4];
    void *gws = a->t[8];
    for (int64_t k = 0; k < S; k++) {
        int64_t t = rev ? S - 1 - k : k;
        /* gates = x_t W^T + h R^T (+ Wb + Rb) */
        int rc = gemm(0, 1, B, 4 * H, I, 1.f, x + t * B * I, I, w, I, 0.f, g, 4 * H, NULL, gws, wss, a->nthreads);
        if (rc == AIE_OK) rc = gemm(0, 1, B, 4 * H, H, 1.f, h, H, r, H, 1.f, g, 4 * H, NULL, gws, wss, a->nthreads);
        if (rc != AIE_OK) return rc;
        for (int64_t b = 0; b < B; b++) {
            float *gb = g + b * 4 * H;
            for (int64_t j = 0; j < H; j++) {
                float gi = gb[j], go = gb[H + j], gf = gb[2 * H + j], gc = gb[3 * H + j];
                if (bias) {
                    gi += bias[j] + bias[4 * H + j];
                    go += bias[H + j] + bias[5 * H + j];
                    gf += bias[2 * H + j] + bias[6 * H + j];
                    gc += bias[3 * H + j] + bias[7 * H + j];
                }
                float cn = sigm(gf) * c[b * H + j] + sigm(gi) * tanhf(gc);
                c[b * H + j] = cn;
                h[b * H + j] = sigm(go) * tanhf(cn);
            }
            if (y) memcpy(y + t * ys + b * yb, h + b * H, (size_t)H * sizeof(float));
        }
    }
    return AIE_OK;
}
