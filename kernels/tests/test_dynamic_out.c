/* Data-dependent output kernels (core/dynamic_out.c) against naive
 * references written here: NonZero and Compress over random data with odd
 * sizes, Unique (sorted and by first occurrence), NonMaxSuppression with a
 * double-precision IoU, and the empty and full outputs of each. */
#include "../exec/exec_ops.h"
#include "kernel_test.h"

#include <string.h>

static int run(int (*fn)(const aie_step_args *), void **t, int64_t nt, const int64_t *ip, int64_t ni) {
    aie_step_args a = {t, nt, ip, ni, NULL, 0, 1};
    return fn(&a);
}

static void test_nonzero(double density) {
    enum { D0 = 3, D1 = 5, D2 = 7, N = D0 * D1 * D2 };
    float x[N];
    int64_t y[3 * N], count = -1;
    uint64_t s = 11;
    kt_fill(x, N, 3);
    for (int i = 0; i < N; i++)
        if ((double)(kt_next(&s) % 1000) >= density * 1000) x[i] = (i % 2) ? 0.0f : -0.0f;
    int64_t ip[5] = {AIE_DT_F32, 3, D0, D1, D2};
    void *t[3] = {y, &count, x};
    KT_CHECK(run(aie_x_nonzero, t, 3, ip, 5) == AIE_OK, "%s", aie_last_error());
    int64_t j = 0;
    for (int i = 0; i < N; i++) {
        if (x[i] == 0.0f) continue;
        KT_CHECK(j < count && y[j] == i / (D1 * D2) && y[count + j] == i / D2 % D1 && y[2 * count + j] == i % D2,
                 "nonzero element %d", i);
        j++;
    }
    KT_CHECK(j == count, "nonzero count %lld, expected %lld", (long long)count, (long long)j);
}

static void test_compress(double density) {
    enum { O = 3, NN = 11, I = 5 };
    float x[O * NN * I], y[O * NN * I];
    uint8_t cond[NN - 2];
    int64_t count = -1;
    uint64_t s = 5;
    kt_fill(x, O * NN * I, 4);
    for (int i = 0; i < NN - 2; i++) cond[i] = (double)(kt_next(&s) % 1000) < density * 1000;
    int64_t ip[5] = {4, O, NN, I, NN - 2};
    void *t[4] = {y, &count, x, cond};
    KT_CHECK(run(aie_x_compress, t, 4, ip, 5) == AIE_OK, "%s", aie_last_error());
    int64_t c = 0;
    for (int i = 0; i < NN - 2; i++) c += cond[i];
    KT_CHECK(count == c, "compress count %lld, expected %lld", (long long)count, (long long)c);
    for (int o = 0; o < O; o++)
        for (int i = 0, k = 0; i < NN - 2; i++)
            if (cond[i]) {
                KT_CHECK(!memcmp(y + (o * c + k) * I, x + (o * NN + i) * I, I * sizeof(float)), "compress row %d", i);
                k++;
            }
}

static void test_unique(int sorted, int values) {
    enum { N = 37 };
    int64_t x[N], y[N], idx[N], inv[N], cnt[N], ws[4 * N], count = -1;
    uint64_t s = 7;
    for (int i = 0; i < N; i++) x[i] = values == N ? N - i : (int64_t)(kt_next(&s) % (uint64_t)values) - 2;
    int64_t ip[5] = {AIE_DT_I64, 1, N, 1, sorted};
    void *t[7] = {y, idx, inv, cnt, &count, x, ws};
    KT_CHECK(run(aie_x_unique, t, 7, ip, 5) == AIE_OK, "%s", aie_last_error());
    /* naive: first occurrences in order of appearance, then sorted if asked */
    int64_t ref[N], first[N], u = 0;
    for (int i = 0; i < N; i++) {
        int seen = 0;
        for (int k = 0; k < u; k++) seen |= ref[k] == x[i];
        if (!seen) first[u] = i, ref[u++] = x[i];
    }
    for (int a = 0; sorted && a < u; a++) /* insertion sort of (value, first) */
        for (int b = a; b > 0 && ref[b - 1] > ref[b]; b--) {
            int64_t tv = ref[b], tf = first[b];
            ref[b] = ref[b - 1], first[b] = first[b - 1];
            ref[b - 1] = tv, first[b - 1] = tf;
        }
    KT_CHECK(count == u, "unique count %lld, expected %lld", (long long)count, (long long)u);
    for (int k = 0; k < u && k < count; k++) {
        int64_t c = 0;
        for (int i = 0; i < N; i++) c += x[i] == ref[k];
        KT_CHECK(y[k] == ref[k] && idx[k] == first[k] && cnt[k] == c, "unique group %d", k);
    }
    for (int i = 0; i < N; i++) KT_CHECK(inv[i] >= 0 && inv[i] < count && y[inv[i]] == x[i], "inverse %d", i);
}

/* The greedy NMS of the ONNX spec in double: corners [y1, x1, y2, x2]. */
static double iou(const float *p, const float *q) {
    double py0 = fmin(p[0], p[2]), py1 = fmax(p[0], p[2]), px0 = fmin(p[1], p[3]), px1 = fmax(p[1], p[3]);
    double qy0 = fmin(q[0], q[2]), qy1 = fmax(q[0], q[2]), qx0 = fmin(q[1], q[3]), qx1 = fmax(q[1], q[3]);
    double w = fmin(px1, qx1) - fmax(px0, qx0), h = fmin(py1, qy1) - fmax(py0, qy0);
    if (w <= 0 || h <= 0) return 0;
    return w * h / ((px1 - px0) * (py1 - py0) + (qx1 - qx0) * (qy1 - qy0) - w * h);
}

static void test_nms(int64_t max_out) {
    enum { B = 2, C = 3, NB = 41 };
    float boxes[B * NB * 4], scores[B * C * NB], iou_t = 0.45f, score_t = 0.1f;
    int64_t out[B * C * NB * 3], ws[2 * NB], count = -1;
    kt_fill(boxes, B * NB * 4, 8);
    kt_fill(scores, B * C * NB, 9);
    for (int i = 0; i < B * NB * 4; i++) boxes[i] = boxes[i] * 4.0f + (float)(i % 4 >= 2) * 2.5f;
    int64_t ip[4] = {B, C, NB, 0};
    void *t[8] = {out, &count, boxes, scores, &max_out, &iou_t, &score_t, ws};
    KT_CHECK(run(aie_x_nms, t, 8, ip, 4) == AIE_OK, "%s", aie_last_error());
    int64_t k = 0;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            const float *s = scores + (b * C + c) * NB;
            int used[NB] = {0}, kept[NB], nk = 0;
            while (nk < max_out) {
                int best = -1;
                for (int i = 0; i < NB; i++)
                    if (!used[i] && s[i] > score_t && (best < 0 || s[i] > s[best])) best = i;
                if (best < 0) break;
                used[best] = 1;
                int keep = 1;
                for (int q = 0; q < nk; q++) keep &= iou(boxes + (b * NB + best) * 4, boxes + (b * NB + kept[q]) * 4) <= iou_t;
                if (!keep) continue;
                kept[nk++] = best;
                KT_CHECK(k < count && out[3 * k] == b && out[3 * k + 1] == c && out[3 * k + 2] == best,
                         "nms selection %lld: want (%d, %d, %d)", (long long)k, b, c, best);
                k++;
            }
        }
    KT_CHECK(count == k, "nms count %lld, expected %lld", (long long)count, (long long)k);
}

int main(void) {
    for (int d = 0; d <= 2; d++) {
        test_nonzero(d / 2.0);
        test_compress(d / 2.0);
    }
    test_unique(1, 5);
    test_unique(0, 5);
    test_unique(1, 1);
    test_unique(0, 37);
    test_nms(0);
    test_nms(3);
    test_nms(100);
    return kt_report("test_dynamic_out");
}
