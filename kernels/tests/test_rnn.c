/* The RNN step (exec/recurrent.c) against a double-precision reference of
 * the ONNX equations written here: RNN, GRU (both reset forms) and LSTM
 * (with peepholes), forward and reverse, ragged sequence_lens, odd sizes,
 * weights packed by the caller and by the kernel, on every ISA path; a
 * length past the sequence refused; COPY_AT (Scan's stacked outputs). */
#include "../exec/exec_ops.h"
#include "kernel_test.h"

#include <string.h>

enum { S = 9, B = 3, I = 5, H = 7 };
static int32_t LENS[B] = {9, 4, 0};   /* full, ragged, empty */

static double sg(double v) { return 1.0 / (1.0 + exp(-v)); }

/* One direction; h, c: [B, H] in/out; y: [S, B, H]. */
static void reference(int cell, int lbr, int rev, const float *x, const float *w, const float *r, const float *bias,
                      const float *peep, double *h, double *c, double *y) {
    int G = cell == AIE_RNN_LSTM ? 4 : cell == AIE_RNN_GRU ? 3 : 1, GH = G * H;
    memset(y, 0, sizeof(double) * S * B * H);
    for (int b = 0; b < B; b++) {
        for (int k = 0; k < LENS[b]; k++) {
            int t = rev ? LENS[b] - 1 - k : k;
            double xw[4 * H], hr[4 * H], hn[H];
            for (int j = 0; j < GH; j++) {
                xw[j] = bias[j];
                hr[j] = bias[GH + j];
                for (int i = 0; i < I; i++) xw[j] += (double)x[(t * B + b) * I + i] * w[j * I + i];
                for (int i = 0; i < H; i++) hr[j] += h[b * H + i] * r[j * H + i];
            }
            for (int j = 0; j < H; j++) {
                if (cell == AIE_RNN_RNN) {
                    hn[j] = tanh(xw[j] + hr[j]);
                } else if (cell == AIE_RNN_GRU) {
                    hn[j] = sg(xw[j] + hr[j]);   /* z; finished below: the candidate needs every r */
                } else {
                    double cp = c[b * H + j];
                    double ig = sg(xw[j] + hr[j] + peep[j] * cp), fg = sg(xw[2 * H + j] + hr[2 * H + j] + peep[2 * H + j] * cp);
                    double cn = fg * cp + ig * tanh(xw[3 * H + j] + hr[3 * H + j]);
                    double og = sg(xw[H + j] + hr[H + j] + peep[H + j] * cn);
                    c[b * H + j] = cn;
                    hn[j] = og * tanh(cn);
                }
            }
            if (cell == AIE_RNN_GRU) {
                double rh[H];
                for (int i = 0; i < H; i++) rh[i] = sg(xw[H + i] + hr[H + i]) * h[b * H + i];
                for (int j = 0; j < H; j++) {
                    double rg = sg(xw[H + j] + hr[H + j]), cand;
                    if (lbr) {
                        cand = rg * hr[2 * H + j];
                    } else {
                        cand = bias[GH + 2 * H + j];
                        for (int i = 0; i < H; i++) cand += rh[i] * r[(2 * H + j) * H + i];
                    }
                    double hh = tanh(xw[2 * H + j] + cand), z = hn[j];
                    hn[j] = (1 - z) * hh + z * h[b * H + j];
                }
            }
            for (int j = 0; j < H; j++) h[b * H + j] = y[(t * B + b) * H + j] = hn[j];
        }
        if (LENS[b] == 0)
            for (int j = 0; j < H; j++) h[b * H + j] = c[b * H + j] = 0.0;
    }
}

static void check(int cell, int lbr, int rev, int packed, aie_isa isa) {
    int G = cell == AIE_RNN_LSTM ? 4 : cell == AIE_RNN_GRU ? 3 : 1, GH = G * H, split = cell == AIE_RNN_GRU && !lbr;
    float x[S * B * I], w[4 * H * I], r[4 * H * H], bias[8 * H], peep[3 * H], h[B * H], c[B * H], y[S * B * H];
    double hd[B * H], cd[B * H], yd[S * B * H];
    kt_fill(x, S * B * I, 1);
    kt_fill(w, (size_t)GH * I, 2);
    kt_fill(r, (size_t)GH * H, 3);
    kt_fill(bias, 2 * (size_t)GH, 4);
    kt_fill(peep, 3 * H, 5);
    kt_fill(h, B * H, 6);
    kt_fill(c, B * H, 7);
    for (int i = 0; i < B * H; i++) hd[i] = h[i], cd[i] = c[i];
    memset(y, 0xff, sizeof y);   /* NaNs: every slot must be written */
    reference(cell, lbr, rev, x, w, r, bias, peep, hd, cd, yd);
    size_t wss = aie_sgemm_workspace_size(16 * B, GH, I > H ? I : H, 1);
    size_t scs = aie_rnn_scratch_bytes(cell, B, I, H, 4, lbr, packed);
    void *ws = kt_xmalloc(wss), *sc = kt_xmalloc(scs), *pw = NULL, *pr = NULL, *prh = NULL;
    if (packed) {
        size_t a = aie_sgemm_packed_b_size(I, GH), b = aie_sgemm_packed_b_size(H, split ? 2 * H : GH);
        pw = kt_xmalloc(a);
        pr = kt_xmalloc(b);
        KT_CHECK(aie_sgemm_pack_b(1, I, GH, w, I, pw, a) == AIE_OK, "pack W");
        KT_CHECK(aie_sgemm_pack_b(1, H, split ? 2 * H : GH, r, H, pr, b) == AIE_OK, "pack R");
        if (split) {
            size_t e = aie_sgemm_packed_b_size(H, H);
            prh = kt_xmalloc(e);
            KT_CHECK(aie_sgemm_pack_b(1, H, H, r + 2 * H * H, H, prh, e) == AIE_OK, "pack Rh");
        }
    }
    aie_rnn_step sp = {.cell = cell, .S = S, .B = B, .I = I, .H = H, .reverse = rev, .chunk = 4, .lbr = lbr,
                       .act_f = cell == AIE_RNN_RNN ? AIE_U_TANH : AIE_U_SIGMOID, .act_g = AIE_U_TANH, .act_h = AIE_U_TANH, .x_step_stride = B * I,
                       .x_batch_stride = I, .y_step_stride = B * H, .y_batch_stride = H, .state_batch_stride = H,
                       .workspace_bytes = (int64_t)wss, .packed = packed};
    double fp[7] = {0};
    void *t[12] = {y, x, packed ? pw : w, packed ? pr : r, bias, h, cell == AIE_RNN_LSTM ? c : NULL,
                   cell == AIE_RNN_LSTM ? peep : NULL, LENS, sc, ws, prh};
    aie_step_args a = {t, 12, (const int64_t *)(const void *)&sp, sizeof sp / 8, fp, 7, 1};
    int rc = aie_x_rnn(&a);
    KT_CHECK(rc == AIE_OK, "%s", aie_last_error());
    double worst = 0;
    for (int i = 0; i < S * B * H; i++) worst = fmax(worst, fabs(y[i] - yd[i]));
    for (int i = 0; i < B * H; i++) worst = fmax(worst, fabs(h[i] - hd[i]));
    if (cell == AIE_RNN_LSTM)
        for (int i = 0; i < B * H; i++) worst = fmax(worst, fabs(c[i] - cd[i]));
    KT_CHECK(worst < 2e-5, "%s cell %d lbr %d reverse %d packed %d: max error %g", aie_isa_name(isa), cell, lbr, rev,
             packed, worst);
    free(ws), free(sc), free(pw), free(pr), free(prh);
}

static void test_length_past_the_sequence(void) {
    int32_t lens[B] = {9, 10, 1};
    float x[S * B * I] = {0}, w[H * I] = {0}, r[H * H] = {0}, h[B * H] = {0};
    size_t wss = aie_sgemm_workspace_size(16 * B, H, I, 1), scs = aie_rnn_scratch_bytes(AIE_RNN_RNN, B, I, H, 4, 0, 0);
    void *ws = kt_xmalloc(wss), *sc = kt_xmalloc(scs);
    aie_rnn_step sp = {.cell = AIE_RNN_RNN, .S = S, .B = B, .I = I, .H = H, .chunk = 4, .act_f = AIE_U_TANH,
                       .x_step_stride = B * I, .x_batch_stride = I, .state_batch_stride = H,
                       .workspace_bytes = (int64_t)wss};
    double fp[7] = {0};
    void *t[11] = {NULL, x, w, r, NULL, h, NULL, NULL, lens, sc, ws};
    aie_step_args a = {t, 11, (const int64_t *)(const void *)&sp, sizeof sp / 8, fp, 7, 1};
    KT_CHECK(aie_x_rnn(&a) == AIE_EINVAL && strstr(aie_last_error(), "sequence_lens[1] = 10, expected 0..9"),
             "a length of 10 in a sequence of 9: %s", aie_last_error());
    free(ws), free(sc);
}

/* COPY_AT: rows at an index into [outer, n, inner]; an index outside 0..n-1 refused. */
static void test_copy_at(void) {
    enum { O = 3, N = 5, IN = 7 };
    float dst[O * N * IN], src[O * IN];
    kt_fill(src, O * IN, 8);
    memset(dst, 0, sizeof dst);
    aie_copy_at_step sp = {.outer = O, .n = N, .inner_bytes = IN * sizeof(float)};
    int64_t idx = 3;
    void *t[3] = {dst, src, &idx};
    aie_step_args a = {t, 3, (const int64_t *)(const void *)&sp, sizeof sp / 8, NULL, 0, 1};
    KT_CHECK(aie_x_copy_at(&a) == AIE_OK, "%s", aie_last_error());
    for (int o = 0; o < O; o++)
        for (int n = 0; n < N; n++)
            for (int i = 0; i < IN; i++)
                KT_CHECK(dst[(o * N + n) * IN + i] == (n == 3 ? src[o * IN + i] : 0.f), "copy_at [%d, %d, %d]", o, n, i);
    idx = N;
    KT_CHECK(aie_x_copy_at(&a) == AIE_EINVAL && strstr(aie_last_error(), "index 5 outside 0..4"), "copy_at index %lld: %s",
             (long long)idx, aie_last_error());
}

int main(void) {
    aie_isa best = aie_best_isa();
    for (int isa = AIE_ISA_SCALAR; isa <= (int)best; isa++) {
        aie_set_isa((aie_isa)isa);
        for (int rev = 0; rev < 2; rev++)
            for (int packed = 0; packed < 2; packed++) {
                check(AIE_RNN_RNN, 0, rev, packed, (aie_isa)isa);
                check(AIE_RNN_GRU, 0, rev, packed, (aie_isa)isa);
                check(AIE_RNN_GRU, 1, rev, packed, (aie_isa)isa);
                check(AIE_RNN_LSTM, 0, rev, packed, (aie_isa)isa);
            }
    }
    aie_set_isa(best);
    test_length_past_the_sequence();
    test_copy_at();
    return kt_report("test_rnn");
}
