/* RNN: one direction of an ONNX RNN, GRU or LSTM over the whole
 * sequence, as a loop of steps whose memory does not depend on the sequence
 * length. Constant weights come packed from the plan (ip packed: t[2] W,
 * t[3] R, t[11] GRU's Rh); others are packed once per call into the scratch
 * operand. The input projection X W^T runs CHUNK steps at a time as one
 * GEMM (a GEMV per step wastes the packed kernel); each step is one small
 * GEMM on the hidden state (two for GRU without linear_before_reset: the
 * candidate needs r * H first) plus the gate epilogue, whose activations go
 * through aie_unary (the ISA-dispatched vector library).
 * sequence_lens: a row past its length keeps its state and writes zeros to
 * y; reverse runs each row from its own last valid step; a row of length 0
 * ends with zero states.
 * COPY_AT (at the end): a Scan body's per-iteration output into its slot of
 * the stacked output, at the loop counter's run-time index. */
#include "nd_iter.h"

#include <string.h>

static float clipv(float v, float c) { return c > 0 ? (v < -c ? -c : v > c ? c : v) : v; }

/* act on n floats in place, with the clip first (ONNX clips pre-activations). */
static int act(int64_t code, float *v, int64_t n, float clip, double p0, double p1) {
    if (clip > 0)
        for (int64_t j = 0; j < n; j++) v[j] = clipv(v[j], clip);
    return aie_unary((int)code, v, v, n, (float)p0, (float)p1, 1);
}

static int64_t gates_of(int64_t cell) { return cell == AIE_RNN_LSTM ? 4 : cell == AIE_RNN_GRU ? 3 : 1; }

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Packed W, packed R (two parts for GRU without linear_before_reset) unless
 * the plan packed them, then x rows [C*B, I], projections [C*B, GH],
 * h R^T [B, GH], r * h [B, H]. */
size_t aie_rnn_scratch_bytes(int64_t cell, int64_t B, int64_t I, int64_t H, int64_t chunk, int64_t lbr,
                             int64_t packed) {
    int64_t G = gates_of(cell), GH = G * H;
    int split = cell == AIE_RNN_GRU && !lbr;
    size_t n = 0;
    if (!packed) {
        n += align64(aie_sgemm_packed_b_size(I, GH));
        n += split ? align64(aie_sgemm_packed_b_size(H, 2 * H)) + align64(aie_sgemm_packed_b_size(H, H))
                   : align64(aie_sgemm_packed_b_size(H, GH));
    }
    n += align64((size_t)(chunk * B * I + chunk * B * GH + B * GH + B * H) * sizeof(float));
    return n;
}

int aie_x_rnn(const aie_step_args *a) {
    const aie_rnn_step *sp = (const aie_rnn_step *)(const void *)a->ip;
    int64_t cell = sp->cell, S = sp->S, B = sp->B, I = sp->I, H = sp->H, C = sp->chunk, lbr = sp->lbr;
    int64_t G = gates_of(cell), GH = G * H, hs = sp->state_batch_stride;
    if (S < 0 || B < 1 || I < 1 || H < 1 || C < 1 || (cell != AIE_RNN_RNN && cell != AIE_RNN_GRU && cell != AIE_RNN_LSTM))
        return aie_fail(AIE_EINVAL, "rnn: cell %lld, S %lld, B %lld, I %lld, H %lld, chunk %lld", (long long)cell,
                        (long long)S, (long long)B, (long long)I, (long long)H, (long long)C);
    if (a->nf < 7) return aie_fail(AIE_EINVAL, "rnn: %lld float parameters, expected 7", (long long)a->nf);
    float *y = a->t[0], *h = a->t[5], *c = a->t[6];
    const float *x = a->t[1], *w = a->t[2], *r = a->t[3], *bias = a->t[4], *peep = a->t[7];
    const int32_t *lens = a->t[8];
    char *sc = a->t[9];
    void *ws = a->t[10];
    size_t wss = (size_t)sp->workspace_bytes;
    if (!x || !w || !r || !h || !sc || (cell == AIE_RNN_LSTM && !c))
        return aie_fail(AIE_EINVAL, "rnn: NULL operand");
    float clip = (float)a->fp[0];
    const double *fa = a->fp + 1;   /* f: p0 p1, g: p0 p1, h: p0 p1 */
    int split = cell == AIE_RNN_GRU && !lbr;
    int rc;
    const void *pw = w, *pr = r, *prh = a->nt > 11 ? a->t[11] : NULL;
    if (sp->packed) {
        if (split && !prh) return aie_fail(AIE_EINVAL, "rnn: packed GRU without its Rh operand");
    } else {
        /* weights packed once per call: the per-step GEMMs then stream them */
        size_t pws = aie_sgemm_packed_b_size(I, GH);
        if ((rc = aie_sgemm_pack_b(1, I, GH, w, I, sc, pws)) != AIE_OK) return rc;
        pw = sc;
        sc += align64(pws);
        size_t prs = aie_sgemm_packed_b_size(H, split ? 2 * H : GH);
        if ((rc = aie_sgemm_pack_b(1, H, split ? 2 * H : GH, r, H, sc, prs)) != AIE_OK) return rc;
        pr = sc;
        sc += align64(prs);
        if (split) {
            size_t prhs = aie_sgemm_packed_b_size(H, H);
            if ((rc = aie_sgemm_pack_b(1, H, H, r + 2 * H * H, H, sc, prhs)) != AIE_OK) return rc;
            prh = sc;
            sc += align64(prhs);
        }
    }
    float *xb = (float *)(void *)sc, *xp = xb + C * B * I, *hr = xp + C * B * GH, *rh = hr + B * GH;
    const float *wb = bias, *rb = bias ? bias + GH : NULL;
    /* a length outside [0, S] would index past x and y: refuse it, naming the row */
    for (int64_t b = 0; lens && b < B; b++)
        if (lens[b] < 0 || lens[b] > S)
            return aie_fail(AIE_EINVAL, "rnn: sequence_lens[%lld] = %d, expected 0..%lld", (long long)b, lens[b],
                            (long long)S);
    for (int64_t k0 = 0; k0 < S; k0 += C) {
        int64_t n = S - k0 < C ? S - k0 : C;
        /* x rows of this chunk in step order (each row's own time index) */
        for (int64_t kk = 0; kk < n; kk++)
            for (int64_t b = 0; b < B; b++) {
                int64_t len = lens ? lens[b] : S, k = k0 + kk;
                float *dst = xb + (kk * B + b) * I;
                if (k >= len) { memset(dst, 0, (size_t)I * sizeof(float)); continue; }
                int64_t t = sp->reverse ? len - 1 - k : k;
                memcpy(dst, x + t * sp->x_step_stride + b * sp->x_batch_stride, (size_t)I * sizeof(float));
            }
        if ((rc = aie_sgemm_packed(0, n * B, GH, I, 1.f, xb, I, pw, 0.f, xp, GH, NULL, ws, wss, a->nthreads)))
            return rc;
        for (int64_t kk = 0; kk < n; kk++) {
            int64_t k = k0 + kk;
            rc = aie_sgemm_packed(0, B, split ? 2 * H : GH, H, 1.f, h, hs, pr, 0.f, hr, GH, NULL, ws, wss,
                                  a->nthreads);
            if (rc) return rc;
            for (int64_t b = 0; b < B; b++) {
                int64_t len = lens ? lens[b] : S;
                float *g = hr + b * GH, *hb = h + b * hs;
                const float *xr = xp + (kk * B + b) * GH;
                int valid = k < len;
                int64_t t = sp->reverse ? len - 1 - k : k;
                float *yr = NULL;
                if (y) {
                    /* a row's padded slots are [len, S) in either direction: step k >= len fills slot k */
                    int64_t ty = valid ? t : k;
                    yr = y + ty * sp->y_step_stride + b * sp->y_batch_stride;
                }
                if (!valid) {
                    if (yr) memset(yr, 0, (size_t)H * sizeof(float));
                    continue;
                }
                int64_t nz = split ? 2 * H : GH;   /* pre-activations complete so far */
                for (int64_t j = 0; j < nz; j++) g[j] += xr[j] + (bias ? wb[j] + rb[j] : 0.f);
                if (cell == AIE_RNN_RNN) {
                    if ((rc = act(sp->act_f, g, H, clip, fa[0], fa[1]))) return rc;
                    memcpy(hb, g, (size_t)H * sizeof(float));
                } else if (cell == AIE_RNN_GRU) {
                    /* z, r (gates 0, 1) */
                    if ((rc = act(sp->act_f, g, 2 * H, clip, fa[0], fa[1]))) return rc;
                    float *z = g, *rg = g + H, *hh = g + 2 * H;
                    if (split) {
                        float *rhb = rh + b * H;
                        for (int64_t j = 0; j < H; j++) rhb[j] = rg[j] * hb[j];
                        /* this row's candidate: (r * h) Rh^T, one row at a time since each row's r differs */
                        if ((rc = aie_sgemm_packed(0, 1, H, H, 1.f, rhb, H, prh, 0.f, hh, GH, NULL, ws, wss, 1)))
                            return rc;
                        for (int64_t j = 0; j < H; j++)
                            hh[j] += xr[2 * H + j] + (bias ? wb[2 * H + j] + rb[2 * H + j] : 0.f);
                    } else {
                        /* linear_before_reset: r * (h Rh^T + Rbh), the loop above added Rbh and Wbh and x */
                        for (int64_t j = 0; j < H; j++) {
                            float lin = hh[j] - xr[2 * H + j] - (bias ? wb[2 * H + j] : 0.f);
                            hh[j] = xr[2 * H + j] + (bias ? wb[2 * H + j] : 0.f) + rg[j] * lin;
                        }
                    }
                    if ((rc = act(sp->act_g, hh, H, clip, fa[2], fa[3]))) return rc;
                    for (int64_t j = 0; j < H; j++) hb[j] = hh[j] + z[j] * (hb[j] - hh[j]);
                } else {
                    /* LSTM gate order i, o, f, c; peepholes P = [Pi, Po, Pf] */
                    float *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H, *cb = c + b * hs;
                    if (peep)
                        for (int64_t j = 0; j < H; j++) {
                            gi[j] += peep[j] * cb[j];
                            gf[j] += peep[2 * H + j] * cb[j];
                        }
                    if ((rc = act(sp->act_f, gi, H, clip, fa[0], fa[1]))) return rc;
                    if ((rc = act(sp->act_f, gf, H, clip, fa[0], fa[1]))) return rc;
                    if ((rc = act(sp->act_g, gc, H, clip, fa[2], fa[3]))) return rc;
                    for (int64_t j = 0; j < H; j++) cb[j] = gf[j] * cb[j] + gi[j] * gc[j];
                    if (peep)
                        for (int64_t j = 0; j < H; j++) go[j] += peep[H + j] * cb[j];
                    if ((rc = act(sp->act_f, go, H, clip, fa[0], fa[1]))) return rc;
                    memcpy(gc, cb, (size_t)H * sizeof(float));
                    if ((rc = act(sp->act_h, gc, H, 0.f, fa[4], fa[5]))) return rc;
                    for (int64_t j = 0; j < H; j++) hb[j] = go[j] * gc[j];
                }
                if (yr) memcpy(yr, hb, (size_t)H * sizeof(float));
            }
        }
    }
    /* onnxruntime's answer for a row of length 0: zero final states, not the initial ones */
    for (int64_t b = 0; lens && b < B; b++)
        if (lens[b] == 0) {
            memset(h + b * hs, 0, (size_t)H * sizeof(float));
            if (c) memset(c + b * hs, 0, (size_t)H * sizeof(float));
        }
    return AIE_OK;
}

/* COPY_AT: a loop body's per-iteration result into its slot of the stacked
 * output; the index comes from the loop's counter at run time. */
int aie_x_copy_at(const aie_step_args *a) {
    const aie_copy_at_step *sp = (const aie_copy_at_step *)(const void *)a->ip;
    char *dst = a->t[0];
    const char *src = a->t[1];
    if (!dst || !src || !a->t[2]) return aie_fail(AIE_EINVAL, "copy_at: NULL operand");
    int64_t idx = *(const int64_t *)a->t[2], n = sp->n;
    if (idx < 0 || idx >= n) return aie_fail(AIE_EINVAL, "copy_at: index %lld outside 0..%lld", (long long)idx,
                                             (long long)(n - 1));
    size_t inner = (size_t)sp->inner_bytes;
    for (int64_t o = 0; o < sp->outer; o++) memcpy(dst + ((size_t)(o * n + idx)) * inner, src + (size_t)o * inner, inner);
    return AIE_OK;
}
