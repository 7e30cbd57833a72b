/* Data movement: transpose/expand/tile/slice/gather/concat/split/pad
 * against index-by-index loops, for 1-, 4- and 8-byte elements. */
#include <string.h>

#include "aie_kernels.h"
#include "kernel_test.h"

static void test_transpose(void) {
    enum { A = 3, B = 37, C = 41 };
    float x[A * B * C], y[A * B * C];
    kt_fill(x, A * B * C, 1);
    int64_t shape[3] = {A, B, C};
    static const int64_t perms[][3] = {{0, 2, 1}, {2, 1, 0}, {1, 0, 2}, {2, 0, 1}, {0, 1, 2}};
    for (size_t p = 0; p < 5; p++) {
        const int64_t *pm = perms[p];
        KT_CHECK(aie_transpose(4, 3, shape, pm, x, y, 2) == AIE_OK, "%s", aie_last_error());
        int64_t os[3] = {shape[pm[0]], shape[pm[1]], shape[pm[2]]}, bad = 0;
        for (int64_t i = 0; i < os[0]; i++)
            for (int64_t j = 0; j < os[1]; j++)
                for (int64_t k = 0; k < os[2]; k++) {
                    int64_t idx[3];
                    idx[pm[0]] = i, idx[pm[1]] = j, idx[pm[2]] = k;
                    bad += y[(i * os[1] + j) * os[2] + k] != x[(idx[0] * B + idx[1]) * C + idx[2]];
                }
        KT_CHECK(bad == 0, "transpose perm %zu: %lld wrong", p, (long long)bad);
    }
}

static void test_small_ops(void) {
    int64_t x[12], y[64];
    for (int i = 0; i < 12; i++) x[i] = i;
    /* tile [3, 4] by [2, 1] */
    int64_t sh[2] = {3, 4}, reps[2] = {2, 1};
    KT_CHECK(aie_tile(8, 2, sh, reps, x, y, 1) == AIE_OK, "%s", aie_last_error());
    int bad = 0;
    for (int i = 0; i < 24; i++) bad += y[i] != x[i % 12];
    KT_CHECK(bad == 0, "tile");
    /* expand [3, 1] -> [2, 3, 4] */
    int64_t xs[2] = {3, 1}, os[3] = {2, 3, 4};
    KT_CHECK(aie_expand(8, 3, os, 2, xs, x, y, 1) == AIE_OK, "%s", aie_last_error());
    bad = 0;
    for (int i = 0; i < 24; i++) bad += y[i] != x[(i / 4) % 3];
    KT_CHECK(bad == 0, "expand");
    /* slice x[3, 4][2:-4:-1, 3:0:-2] = rows 2,1,0 ; cols 3,1 */
    int64_t st[2] = {2, 3}, sp[2] = {-1, -2}, out[2] = {3, 2};
    KT_CHECK(aie_slice(8, 2, sh, x, st, sp, out, y, 1) == AIE_OK, "%s", aie_last_error());
    int64_t want[6] = {11, 9, 7, 5, 3, 1};
    KT_CHECK(memcmp(y, want, sizeof want) == 0, "slice with negative steps");
    int64_t over[2] = {4, 2};
    KT_CHECK(aie_slice(8, 2, sh, x, st, sp, over, y, 1) == AIE_EINVAL, "out-of-range slice accepted");
    /* gather rows [-1, 0] of [3, 4], and a bad index */
    int64_t idx[2] = {-1, 0}, badidx[2] = {0, 3};
    KT_CHECK(aie_gather(8, x, 1, 3, 4, idx, 2, y, 1) == AIE_OK, "%s", aie_last_error());
    KT_CHECK(y[0] == 8 && y[4] == 0, "gather");
    KT_CHECK(aie_gather(8, x, 1, 3, 4, badidx, 2, y, 1) == AIE_EINVAL, "bad index accepted");
    KT_CHECK(strstr(aie_last_error(), "index 3 at position 1") != NULL, "message: %s", aie_last_error());
    /* concat then split along axis 1 of [2, k, 3] (bytes) */
    uint8_t a[6], b[12], cat[18], a2[6], b2[12];
    for (int i = 0; i < 6; i++) a[i] = (uint8_t)i;
    for (int i = 0; i < 12; i++) b[i] = (uint8_t)(100 + i);
    const void *xs2[2] = {a, b};
    void *ys2[2] = {a2, b2};
    int64_t lens[2] = {1, 2};
    KT_CHECK(aie_concat(1, 2, xs2, lens, 2, 3, cat, 1) == AIE_OK, "%s", aie_last_error());
    KT_CHECK(cat[3] == 100 && cat[9] == 3, "concat layout");
    KT_CHECK(aie_split(1, cat, 2, 3, 2, lens, ys2, 1) == AIE_OK && !memcmp(a, a2, 6) && !memcmp(b, b2, 12), "split");
    /* reflect pad of [1, 2, 3] by (2, 3) = [3 2 1 2 3 2 1 2] */
    float v[3] = {1, 2, 3}, pv[8], zero = 0;
    int64_t s1[1] = {3}, pads[2] = {2, 3};
    KT_CHECK(aie_pad(4, 1, s1, v, pads, AIE_PAD_REFLECT, &zero, pv, 1) == AIE_OK, "%s", aie_last_error());
    float pw[8] = {3, 2, 1, 2, 3, 2, 1, 2};
    KT_CHECK(memcmp(pv, pw, sizeof pw) == 0, "reflect pad");
}

int main(void) {
    test_transpose();
    test_small_ops();
    return kt_report("test_layout");
}
