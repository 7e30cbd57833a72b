/*
 * SGEMM tests: every ISA path this CPU runs (aie_set_isa) against a float64
 * naive reference, by error normalised to sum |alpha * a * b| + |beta * c|:
 * odd sizes, all transposes, alpha/beta, every epilogue, leading dimensions
 * larger than the rows, the small-M and blocked paths, pre-packed B,
 * NaN/Inf propagation, thread-count determinism and the error codes.
 */
#include <string.h>

#include "aie_kernels.h"
#include "gemm_internal.h"
#include "kernel_test.h"
#include "ref.h"

#ifdef __SANITIZE_ADDRESS__
#define BIG 255 /* the sanitized build is ~5x slower */
#else
#define BIG 1023
#endif

/* KT_EMULATED: built for another architecture and run under qemu user
 * emulation (tests/kernels/test_cross_aarch64.py), where the scalar code runs
 * ~30x slower. The thread-determinism and shared-A checks then skip their
 * shapes over 16 M multiply-adds (~85% of the emulated run): each of those
 * checks keeps smaller shapes on the same code paths, and every shape runs
 * through the same scalar code in the native build's scalar pass. */
#ifdef KT_EMULATED
#define KT_TOO_BIG_TO_EMULATE(M, N, K) ((M) * (N) * (K) > ((int64_t)1 << 24))
#else
#define KT_TOO_BIG_TO_EMULATE(M, N, K) 0
#endif

typedef struct {
    int ta, tb;
    int64_t M, N, K;
    float alpha, beta;
    int64_t pad; /* extra elements per stored row (ld > row length) */
    aie_epilogue ep;
    int threads;
    int packed;
} gemm_case;


/* Runs one case on the selected ISA; returns the max normalised error, or 0
 * without `check` (a repeat whose output is compared bitwise with one that
 * was checked: the O(MNK) double reference would dominate the test's time). */
static double run_case(const gemm_case *g, uint64_t seed, float *out_copy, int check) {
    int64_t ar = g->ta ? g->K : g->M, ac = g->ta ? g->M : g->K;
    int64_t br = g->tb ? g->N : g->K, bc = g->tb ? g->K : g->N;
    int64_t lda = ac + g->pad, ldb = bc + g->pad, ldc = g->N + g->pad;
    if (lda < 1) lda = 1;
    if (ldb < 1) ldb = 1;
    if (ldc < 1) ldc = 1;
    float *A = kt_xmalloc((size_t)(ar * lda) * sizeof(float));
    float *B = kt_xmalloc((size_t)(br * ldb) * sizeof(float));
    float *C = kt_xmalloc((size_t)(g->M * ldc) * sizeof(float));
    float *C0 = kt_xmalloc((size_t)(g->M * ldc) * sizeof(float));
    kt_fill(A, (size_t)(ar * lda), seed);
    kt_fill(B, (size_t)(br * ldb), seed + 1);
    kt_fill(C0, (size_t)(g->M * ldc), seed + 2);
    memcpy(C, C0, (size_t)(g->M * ldc) * sizeof(float));

    size_t wss = aie_sgemm_workspace_size(g->M, g->N, g->K, g->threads);
    void *ws = kt_xmalloc(wss);
    int rc;
    if (g->packed) {
        size_t ps = aie_sgemm_packed_b_size(g->K, g->N);
        void *pb = kt_xmalloc(ps);
        rc = aie_sgemm_pack_b(g->tb, g->K, g->N, B, ldb, pb, ps);
        KT_CHECK(rc == AIE_OK, "pack_b: %s", aie_last_error());
        rc = aie_sgemm_packed(g->ta, g->M, g->N, g->K, g->alpha, A, lda, pb, g->beta, C, ldc, &g->ep, ws, wss,
                              g->threads);
        free(pb);
    } else {
        rc = aie_sgemm(g->ta, g->tb, g->M, g->N, g->K, g->alpha, A, lda, B, ldb, g->beta, C, ldc, &g->ep, ws, wss,
                       g->threads);
    }
    KT_CHECK(rc == AIE_OK, "sgemm rc=%d: %s", rc, aie_last_error());
    if (out_copy) memcpy(out_copy, C, (size_t)(g->M * ldc) * sizeof(float));
    if (!check) {
        free(A), free(B), free(C), free(C0), free(ws);
        return 0.0;
    }

    /* the independent reference (kernels/ref/), on a copy of C's old contents */
    float *Cn = malloc((size_t)(g->M * ldc) * sizeof(float));
    memcpy(Cn, C0, (size_t)(g->M * ldc) * sizeof(float));
    aie_sgemm_naive(g->ta, g->tb, g->M, g->N, g->K, g->alpha, A, lda, B, ldb, g->beta, Cn, ldc, &g->ep);
    double worst = 0.0;
    for (int64_t i = 0; i < g->M; i++)
        for (int64_t j = 0; j < g->N; j++) {
            double mag = 0.0;
            for (int64_t k = 0; k < g->K; k++) {
                double a = g->ta ? A[k * lda + i] : A[i * lda + k];
                double b = g->tb ? B[j * ldb + k] : B[k * ldb + j];
                mag += fabs(a * b);
            }
            double scale = fabs(g->alpha) * mag + 1e-30;
            if (g->beta != 0.0f) scale += fabs((double)g->beta * C0[i * ldc + j]);
            if (g->ep.bias_kind == AIE_BIAS_COL) scale += fabs(g->ep.bias[j]);
            if (g->ep.bias_kind == AIE_BIAS_ROW) scale += fabs(g->ep.bias[i]);
            /* the activation's own accuracy is tested in test_eltwise.c and
             * tests/kernels; here the GEMM error passes through it */
            double err = fabs(C[i * ldc + j] - (double)Cn[i * ldc + j]) / scale;
            if (!(err <= worst)) worst = err; /* NaN counts as the worst */
        }
    /* the padding between rows of C is never written */
    for (int64_t i = 0; i < g->M; i++)
        for (int64_t j = g->N; j < ldc; j++)
            if (C[i * ldc + j] != C0[i * ldc + j]) worst = INFINITY;
    free(A), free(B), free(C), free(C0), free(Cn), free(ws);
    return worst;
}

/* Tolerance: K-term float sums in blocks, with an activation slope <= ~1.5. */
static double tol_for(const gemm_case *g) { return 4e-7 * (double)(g->K + 8); }

static void check_case(const gemm_case *g, uint64_t seed) {
    double err = run_case(g, seed, NULL, 1);
    KT_CHECK(err <= tol_for(g), "isa=%s M=%lld N=%lld K=%lld ta=%d tb=%d alpha=%g beta=%g pad=%lld act=%d bias=%d "
             "threads=%d packed=%d: normalised error %.3g > %.3g",
             aie_isa_name(aie_selected_isa()), (long long)g->M, (long long)g->N, (long long)g->K, g->ta, g->tb,
             g->alpha, g->beta, (long long)g->pad, g->ep.act, g->ep.bias_kind, g->threads, g->packed, err,
             tol_for(g));
}

static void test_shapes(void) {
    static const int64_t sizes[] = {1, 3, 7, 17, 31, 64, 100};
    const int ns = (int)(sizeof sizes / sizeof sizes[0]);
    static const float alphas[] = {1.0f, -0.5f, 2.0f}, betas[] = {0.0f, 1.0f, -1.5f};
    int n = 0;
    for (int a = 0; a < ns; a++)
        for (int b = 0; b < ns; b++)
            for (int c = 0; c < ns; c++, n++) {
                gemm_case g = {.ta = n & 1, .tb = (n >> 1) & 1, .M = sizes[a], .N = sizes[b], .K = sizes[c],
                               .alpha = alphas[n % 3], .beta = betas[(n / 3) % 3], .pad = n % 5 == 0 ? 5 : 0,
                               .threads = 1 + n % 2};
                check_case(&g, (uint64_t)n);
            }
    /* one large dimension at a time, every transpose */
    static const int64_t big[][3] = {{BIG, 31, 17}, {17, BIG, 100}, {3, 100, BIG}, {64, 64, BIG}, {1, BIG, 64},
                                     {100, 7, BIG}};
    for (int i = 0; i < (int)(sizeof big / sizeof big[0]); i++)
        for (int t = 0; t < 4; t++) {
            gemm_case g = {.ta = t & 1, .tb = t >> 1, .M = big[i][0], .N = big[i][1], .K = big[i][2], .alpha = 1.0f,
                           .beta = t == 3 ? 0.5f : 0.0f, .pad = t == 2 ? 3 : 0, .threads = 2};
            check_case(&g, 1000u + (uint64_t)(i * 4 + t));
        }
}

static void test_epilogues(void) {
    float bias[128];
    kt_fill(bias, 128, 77);
    static const int64_t shapes[][3] = {{33, 45, 29}, {3, 70, 40}, {1, 17, 5}};
    for (int s = 0; s < 3; s++)
        for (int act = AIE_U_IDENTITY; act <= AIE_U_TANH; act++)
            for (int bk = AIE_BIAS_NONE; bk <= AIE_BIAS_ROW; bk++) {
                gemm_case g = {.ta = act & 1, .tb = (act >> 1) & 1, .M = shapes[s][0], .N = shapes[s][1],
                               .K = shapes[s][2], .alpha = 1.5f, .beta = bk == 2 ? 0.5f : 0.0f, .pad = 1,
                               .threads = 2, .packed = act % 3 == 0};
                g.ep.bias = bk ? bias : NULL;
                g.ep.bias_kind = bk;
                g.ep.act = act;
                g.ep.p0 = act == AIE_U_CLIP ? -0.3f : act == AIE_U_HARDSIGMOID ? 0.2f : 0.1f;
                g.ep.p1 = act == AIE_U_CLIP ? 0.4f : 0.5f;
                check_case(&g, 500u + (uint64_t)(act * 3 + bk));
            }
}

static void test_packed(void) {
    /* every small m (1..8: panel groups of 1-4 panels, a ragged last one)
     * and the blocked path */
    static const int64_t shapes[][3] = {{1, 100, 31}, {5, 33, 64}, {64, 100, 300}, {100, 64, 17}, {2, 300, 50},
                                        {3, 129, 20}, {4, 97, 33},  {6, 161, 9},    {7, 64, 40},   {8, 200, 13}};
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
        for (int t = 0; t < 4; t++) {
            gemm_case g = {.ta = t & 1, .tb = t >> 1, .M = shapes[s][0], .N = shapes[s][1], .K = shapes[s][2],
                           .alpha = 1.0f, .beta = t == 1 ? 1.0f : 0.0f, .threads = 1 + t % 2, .packed = 1};
            check_case(&g, 700u + (uint64_t)(s * 4 + t));
        }
}

/* The streaming small-M kernel (B over GEMM_STREAM_MIN_BYTES, m up to the
 * ISA's stream_max_m: 2, 8 on AVX2) through aie_sgemm: several accumulator
 * chunks, ragged tails, transposed A, beta, epilogue, ld padding, threads,
 * every row count up to GEMM_SMALL_M; and bitwise equal to the register-tile
 * kernel it replaces, called directly. */
static void test_stream(void) {
    static const int64_t shapes[][3] = {{1, 1100, 1000}, {2, 2100, 501}, {1, 4100, 257}, {2, 1037, 1013},
                                        {3, 1100, 1000}, {5, 2100, 501}, {7, 1037, 1013}, {8, 4100, 257}};
    static float bias[4100];
    kt_fill(bias, 4100, 91);
    for (int s = 0; s < 8; s++) {
        gemm_case g = {.ta = s & 1, .M = shapes[s][0], .N = shapes[s][1], .K = shapes[s][2], .alpha = 0.75f,
                       .beta = s == 1 ? 0.5f : 0.0f, .pad = s == 2 ? 3 : 0, .threads = 1 + s % 2};
        if (s % 4 == 3) g.ep = (aie_epilogue){.bias = bias, .bias_kind = AIE_BIAS_COL, .act = AIE_U_GELU};
        check_case(&g, 800u + (uint64_t)s);
    }
    const gemm_kernels *kt = aie_gemm_kernels_for(aie_selected_isa());
    const int64_t N = 2100, K = 37, R = GEMM_SMALL_M;
    float *A = kt_xmalloc((size_t)(R * K) * sizeof(float)), *B = kt_xmalloc((size_t)(K * N) * sizeof(float));
    float *C1 = kt_xmalloc((size_t)(R * N) * sizeof(float)), *C2 = kt_xmalloc((size_t)(R * N) * sizeof(float));
    kt_fill(A, (size_t)(R * K), 5), kt_fill(B, (size_t)(K * N), 6), kt_fill(C1, (size_t)(R * N), 7);
    for (int m = 1; m <= R; m++) {
        memcpy(C2, C1, (size_t)(R * N) * sizeof(float));
        kt->small(m, 3, N, K, 1.25f, 0, A, K, B, N, -0.5f, C1, N);
        kt->small_stream(m, 3, N, K, 1.25f, 0, A, K, B, N, -0.5f, C2, N);
        KT_CHECK(memcmp(C1, C2, (size_t)(R * N) * sizeof(float)) == 0,
                 "isa=%s m=%d: streaming and register small-M kernels differ bitwise", aie_isa_name(kt->isa), m);
    }
    free(A), free(B), free(C1), free(C2);
}

/* Results do not depend on the thread count (tiles are handed out
 * dynamically, so which thread computes what changes from run to run), and
 * repeat bitwise. The last shape needs two column blocks of packed B
 * (K x N over GEMM_B_BLOCK_BYTES) and carries a fused epilogue. */
static void test_determinism(void) {
    static const int64_t shapes[][3] = {{200, 300, 400}, {5, 1000, 300}, {300, 40, 100}, {12, 1050, 2100},
                                        {1, 3000, 400}};
    static float bias[1050];
    kt_fill(bias, 1050, 77);
    for (int s = 0; s < 5; s++) {
        if (KT_TOO_BIG_TO_EMULATE(shapes[s][0], shapes[s][1], shapes[s][2])) continue;
        gemm_case g = {.M = shapes[s][0], .N = shapes[s][1], .K = shapes[s][2], .alpha = 1.0f, .beta = 0.0f};
        if (s == 3) g.ep = (aie_epilogue){.bias = bias, .bias_kind = AIE_BIAS_COL, .act = AIE_U_RELU};
        size_t n = (size_t)(g.M * g.N);
        float *r1 = kt_xmalloc(n * sizeof(float)), *r2 = kt_xmalloc(n * sizeof(float)), *r3 = kt_xmalloc(n * sizeof(float));
        g.threads = 1;
        double err = run_case(&g, 42, r1, 1);
        KT_CHECK(err <= tol_for(&g), "isa=%s %lldx%lldx%lld threads=1: normalised error %.3g > %.3g",
                 aie_isa_name(aie_selected_isa()), (long long)g.M, (long long)g.N, (long long)g.K, err, tol_for(&g));
        for (int t = 2; t <= 4; t++) {
            g.threads = t;
            run_case(&g, 42, r2, 0);
            run_case(&g, 42, r3, 0);
            KT_CHECK(memcmp(r1, r2, n * sizeof(float)) == 0, "threads 1 vs %d differ (%lldx%lldx%lld)", t,
                     (long long)g.M, (long long)g.N, (long long)g.K);
            KT_CHECK(memcmp(r2, r3, n * sizeof(float)) == 0, "two runs with %d threads differ", t);
        }
        free(r1), free(r2), free(r3);
    }
}

/* M within one or two row blocks on several threads: A is packed once into
 * the workspace and shared by the column tiles (gemm.c, GEMM_A_SHARED_BYTES).
 * Odd M (a partial MR panel), several KC slices (K = 700, the last shorter),
 * A transposed or not, plain and pre-packed B, a fused epilogue (the last
 * shape saves too little packing to share: the per-tile path); bitwise
 * equal to one thread. Then every workspace size from the one-thread size to
 * the two-thread one (too small for the shared A falls back to per-tile
 * packing, on fewer threads if need be): still the one-thread bits. */
static void test_shared_a(void) {
    static const int64_t shapes[][3] = {{128, 256, 1024}, {49, 517, 700}, {133, 300, 260}, {7 * 6 + 1, 96, 33}};
    static float bias[517];
    kt_fill(bias, 517, 91);
    for (int s = 0; s < 4; s++)
        for (int v = 0; v < 4 && !KT_TOO_BIG_TO_EMULATE(shapes[s][0], shapes[s][1], shapes[s][2]); v++) {
            gemm_case g = {.ta = v & 1, .M = shapes[s][0], .N = shapes[s][1], .K = shapes[s][2], .alpha = 1.0f,
                           .beta = v == 2 ? -0.5f : 0.0f, .pad = v == 3 ? 3 : 0, .packed = v >> 1};
            if (v == 1) g.ep = (aie_epilogue){.bias = bias, .bias_kind = AIE_BIAS_COL, .act = AIE_U_RELU};
            size_t n = (size_t)(g.M * (g.N + g.pad));
            float *r1 = kt_xmalloc(n * sizeof(float)), *r2 = kt_xmalloc(n * sizeof(float));
            g.threads = 1;
            run_case(&g, 7 + (uint64_t)s, r1, 0);
            g.threads = 2;
            double err = run_case(&g, 7 + (uint64_t)s, r2, 1);
            KT_CHECK(err <= tol_for(&g), "isa=%s %lldx%lldx%lld v=%d threads=2: normalised error %.3g > %.3g",
                     aie_isa_name(aie_selected_isa()), (long long)g.M, (long long)g.N, (long long)g.K, v, err,
                     tol_for(&g));
            KT_CHECK(memcmp(r1, r2, n * sizeof(float)) == 0, "isa=%s %lldx%lldx%lld v=%d: threads 1 vs 2 differ",
                     aie_isa_name(aie_selected_isa()), (long long)g.M, (long long)g.N, (long long)g.K, v);
            free(r1), free(r2);
        }

    const int64_t M = 128, N = 256, K = 1024;
    if (KT_TOO_BIG_TO_EMULATE(M, N, K)) return;
    float *A = kt_xmalloc((size_t)(M * K) * sizeof(float)), *B = kt_xmalloc((size_t)(K * N) * sizeof(float));
    float *C1 = kt_xmalloc((size_t)(M * N) * sizeof(float)), *C2 = kt_xmalloc((size_t)(M * N) * sizeof(float));
    kt_fill(A, (size_t)(M * K), 5);
    kt_fill(B, (size_t)(K * N), 6);
    size_t lo = aie_sgemm_workspace_size(M, N, K, 1), hi = aie_sgemm_workspace_size(M, N, K, 2);
    KT_CHECK(hi > lo, "the two-thread workspace (%zu) should exceed the one-thread one (%zu)", hi, lo);
    char *ws = kt_xmalloc(hi);
    KT_CHECK(aie_sgemm(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C1, N, NULL, ws, lo, 1) == AIE_OK, "%s",
             aie_last_error());
    for (int step = 0; step <= 8; step++) {
        size_t wss = lo + (hi - lo) * (size_t)step / 8;
        memset(C2, 0xff, (size_t)(M * N) * sizeof(float));
        int rc = aie_sgemm(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C2, N, NULL, ws, wss, 2);
        KT_CHECK(rc == AIE_OK, "workspace %zu of [%zu, %zu]: %s", wss, lo, hi, aie_last_error());
        KT_CHECK(memcmp(C1, C2, (size_t)(M * N) * sizeof(float)) == 0,
                 "isa=%s workspace %zu of [%zu, %zu]: 2 threads differ from 1", aie_isa_name(aie_selected_isa()),
                 wss, lo, hi);
    }
    free(A), free(B), free(C1), free(C2), free(ws);
}

/* A plain B packed in several column blocks: at K = 4099 the shared B block
 * (GEMM_B_BLOCK_BYTES) holds at most 496 columns, so N = 1063 is packed as
 * 368 + 368 + 327 columns (the last block ends in a ragged panel), each over
 * 17 KC slices, its rows read from a column offset into B. Against float64, with and
 * without padded rows, and bitwise equal on 1 and 2 threads. */
static void test_b_blocks(void) {
    for (int pad = 0; pad <= 3; pad += 3) {
        gemm_case g = {.M = 13, .N = 1063, .K = 4099, .alpha = 1.0f, .beta = pad ? 0.5f : 0.0f, .pad = pad,
                       .threads = 1};
        size_t n = (size_t)(g.M * (g.N + g.pad));
        float *r1 = kt_xmalloc(n * sizeof(float)), *r2 = kt_xmalloc(n * sizeof(float));
        double err = run_case(&g, 3000u + (uint64_t)pad, r1, 1);
        KT_CHECK(err <= tol_for(&g), "isa=%s B in column blocks, pad=%d: normalised error %.3g > %.3g",
                 aie_isa_name(aie_selected_isa()), pad, err, tol_for(&g));
        g.threads = 2;
        run_case(&g, 3000u + (uint64_t)pad, r2, 0);
        KT_CHECK(memcmp(r1, r2, n * sizeof(float)) == 0, "isa=%s B in column blocks, pad=%d: threads 1 vs 2 differ",
                 aie_isa_name(aie_selected_isa()), pad);
        free(r1), free(r2);
    }
}

/* Small M with B too large for the flops rule to thread (batch-1 MLP
 * layers): threaded by B's bytes, one column range per thread.
 * Every variant of the small path (packed, plain, streaming, B transposed,
 * A transposed), odd N and K, a fused epilogue; against float64 and bitwise
 * equal to one thread for 2-4 threads. */
static void test_small_b_bound(void) {
    static const int64_t shapes[][3] = {{1, 517, 783}, {3, 511, 513}, {2, 1003, 257}, {1, 13, 20011}};
    static float bias[1003];
    kt_fill(bias, 1003, 93);
    for (int s = 0; s < 4; s++)
        for (int v = 0; v < 4; v++) {
            gemm_case g = {.ta = v == 3, .tb = v == 2, .M = shapes[s][0], .N = shapes[s][1], .K = shapes[s][2],
                           .alpha = 1.0f, .beta = v == 1 ? 0.5f : 0.0f, .pad = v == 1 ? 3 : 0, .packed = v == 0};
            if (v == 0) g.ep = (aie_epilogue){.bias = bias, .bias_kind = AIE_BIAS_COL, .act = AIE_U_RELU};
            size_t n = (size_t)(g.M * (g.N + g.pad));
            float *r1 = kt_xmalloc(n * sizeof(float)), *r2 = kt_xmalloc(n * sizeof(float));
            g.threads = 1;
            run_case(&g, 900u + (uint64_t)s, r1, 0);
            for (int t = 2; t <= 4; t++) {
                g.threads = t;
                double err = run_case(&g, 900u + (uint64_t)s, r2, 1);
                KT_CHECK(err <= tol_for(&g), "isa=%s %lldx%lldx%lld v=%d threads=%d: normalised error %.3g > %.3g",
                         aie_isa_name(aie_selected_isa()), (long long)g.M, (long long)g.N, (long long)g.K, v, t,
                         err, tol_for(&g));
                KT_CHECK(memcmp(r1, r2, n * sizeof(float)) == 0, "isa=%s %lldx%lldx%lld v=%d: threads 1 vs %d differ",
                         aie_isa_name(aie_selected_isa()), (long long)g.M, (long long)g.N, (long long)g.K, v, t);
            }
            free(r1), free(r2);
        }
}

/* NaN/Inf through both paths, with no epilogue and with the activations
 * the micro-kernel applies on its accumulators (ReLU, clip): NaN must
 * survive them as it does the separate pass. */
static void test_nan_inf(void) {
    const aie_epilogue relu = {.act = AIE_U_RELU}, clip = {.act = AIE_U_CLIP, .p0 = -1.0f, .p1 = 1.0f};
    const aie_epilogue *eps[3] = {NULL, &relu, &clip};
    for (int small = 0; small < 2; small++)
        for (int e = 0; e < 3; e++) {
            int64_t M = small ? 4 : 40, N = 37, K = 50;
            float *A = kt_xmalloc((size_t)(M * K) * sizeof(float)), *B = kt_xmalloc((size_t)(K * N) * sizeof(float));
            float *C = kt_xmalloc((size_t)(M * N) * sizeof(float));
            kt_fill(A, (size_t)(M * K), 9);
            kt_fill(B, (size_t)(K * N), 10);
            for (int64_t i = 0; i < M * N; i++) C[i] = NAN; /* beta == 0: never read */
            A[2 * K + 7] = NAN;      /* row 2 of C becomes NaN */
            B[11 * N + 5] = INFINITY; /* column 5 becomes +-Inf (NaN in row 2) */
            size_t wss = aie_sgemm_workspace_size(M, N, K, 1);
            void *ws = kt_xmalloc(wss);
            int rc = aie_sgemm(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N, eps[e], ws, wss, 1);
            KT_CHECK(rc == AIE_OK, "nan test: %s", aie_last_error());
            int ok = 1;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    float c = C[i * N + j];
                    if (i == 2) ok &= isnan(c);
                    else if (j == 5 && e == 0) ok &= isinf(c);
                    else if (j == 5 && e == 1) ok &= isinf(c) || c == 0.0f;
                    else if (j == 5) ok &= c == 1.0f || c == -1.0f;
                    else ok &= isfinite(c);
                }
            KT_CHECK(ok, "NaN/Inf did not propagate as IEEE says (isa=%s, %s path, epilogue %s)",
                     aie_isa_name(aie_selected_isa()), small ? "small" : "blocked",
                     e == 0 ? "none" : e == 1 ? "relu" : "clip");
            free(A), free(B), free(C), free(ws);
        }
}

static void test_errors(void) {
    float a[64], b[64], c[64];
    kt_fill(a, 64, 1), kt_fill(b, 64, 2);
    char ws[4096];
    KT_CHECK(aie_sgemm(0, 0, -1, 4, 4, 1, a, 4, b, 4, 0, c, 4, NULL, ws, sizeof ws, 1) == AIE_EINVAL, "M<0");
    KT_CHECK(strstr(aie_last_error(), "M=-1") != NULL, "message names M: %s", aie_last_error());
    KT_CHECK(aie_sgemm(0, 0, 4, 4, 4, 1, NULL, 4, b, 4, 0, c, 4, NULL, ws, sizeof ws, 1) == AIE_EINVAL, "A NULL");
    KT_CHECK(aie_sgemm(0, 0, 4, 4, 4, 1, a, 3, b, 4, 0, c, 4, NULL, ws, sizeof ws, 1) == AIE_EINVAL, "lda < K");
    KT_CHECK(strstr(aie_last_error(), "ldA=3") != NULL, "message names lda: %s", aie_last_error());
    KT_CHECK(aie_sgemm(0, 1, 4, 4, 8, 1, a, 8, b, 4, 0, c, 4, NULL, ws, sizeof ws, 1) == AIE_EINVAL, "ldb < K (tb)");
    KT_CHECK(aie_sgemm(0, 0, 4, 8, 4, 1, a, 4, b, 8, 0, c, 7, NULL, ws, sizeof ws, 1) == AIE_EINVAL, "ldc < N");
    aie_epilogue ep = {.bias = NULL, .bias_kind = AIE_BIAS_COL};
    KT_CHECK(aie_sgemm(0, 0, 4, 4, 4, 1, a, 4, b, 4, 0, c, 4, &ep, ws, sizeof ws, 1) == AIE_EINVAL, "bias NULL");
    ep = (aie_epilogue){.act = 99};
    KT_CHECK(aie_sgemm(0, 0, 4, 4, 4, 1, a, 4, b, 4, 0, c, 4, &ep, ws, sizeof ws, 1) == AIE_EINVAL, "bad act");
    /* blocked path (M > GEMM_SMALL_M) with a too-small workspace */
    static float big[100 * 100], out[100 * 100];
    kt_fill(big, 100 * 100, 3);
    KT_CHECK(aie_sgemm(0, 0, 100, 100, 100, 1, big, 100, big, 100, 0, out, 100, NULL, ws, 16, 1) == AIE_ENOMEM,
             "small workspace");
    KT_CHECK(strstr(aie_last_error(), "need") != NULL, "message gives the size: %s", aie_last_error());
    KT_CHECK(aie_sgemm(0, 0, 100, 100, 100, 1, big, 100, big, 100, 0, out, 100, NULL, NULL, 0, 1) == AIE_ENOMEM,
             "NULL workspace");
    /* empty problems are fine and touch nothing */
    KT_CHECK(aie_sgemm(0, 0, 0, 4, 4, 1, NULL, 4, b, 4, 0, NULL, 4, NULL, NULL, 0, 1) == AIE_OK, "M=0");
    c[0] = 3.0f;
    KT_CHECK(aie_sgemm(0, 0, 1, 1, 0, 1, NULL, 1, NULL, 1, 2.0f, c, 1, NULL, NULL, 0, 1) == AIE_OK && c[0] == 6.0f,
             "K=0 scales C by beta");
    /* pre-packed B: size, magic, shape and ISA checks */
    size_t ps = aie_sgemm_packed_b_size(8, 8);
    char *pb = kt_xmalloc(ps);
    KT_CHECK(aie_sgemm_pack_b(0, 8, 8, b, 8, pb, ps - 1) == AIE_ENOMEM, "packed too small");
    KT_CHECK(aie_sgemm_pack_b(0, 8, 8, b, 8, pb, ps) == AIE_OK, "pack: %s", aie_last_error());
    KT_CHECK(aie_sgemm_packed(0, 8, 8, 7, 1, a, 8, pb, 0, c, 8, NULL, ws, sizeof ws, 1) == AIE_EINVAL, "K mismatch");
    KT_CHECK(strstr(aie_last_error(), "K=7") != NULL, "message: %s", aie_last_error());
    aie_isa isa = aie_selected_isa();
    if (isa != AIE_ISA_SCALAR) {
        aie_set_isa(AIE_ISA_SCALAR);
        KT_CHECK(aie_sgemm_packed(0, 8, 8, 8, 1, a, 8, pb, 0, c, 8, NULL, ws, sizeof ws, 1) == AIE_EINVAL,
                 "ISA mismatch");
        KT_CHECK(strstr(aie_last_error(), "pack it again") != NULL, "message: %s", aie_last_error());
        aie_set_isa(isa);
    }
    pb[0] ^= 1;
    KT_CHECK(aie_sgemm_packed(0, 8, 8, 8, 1, a, 8, pb, 0, c, 8, NULL, ws, sizeof ws, 1) == AIE_EINVAL, "bad magic");
    free(pb);
}

int main(void) {
    for (int isa = (int)aie_best_isa() + 1; isa < AIE_ISA_COUNT; isa++)
        printf("isa %s: skipped, this CPU cannot run it\n", aie_isa_name((aie_isa)isa));
    for (int isa = AIE_ISA_SCALAR; isa <= (int)aie_best_isa(); isa++) {
        if (aie_set_isa((aie_isa)isa) != AIE_OK) {
            KT_CHECK(0, "aie_set_isa(%s): %s", aie_isa_name((aie_isa)isa), aie_last_error());
            continue;
        }
        printf("isa %s: %s\n", aie_isa_name((aie_isa)isa), aie_gemm_kernels_for((aie_isa)isa)->ukernel_name);
        test_shapes();
        test_epilogues();
        test_packed();
        test_stream();
        test_determinism();
        test_shared_a();
        test_b_blocks();
        test_small_b_bound();
        test_nan_inf();
        test_errors();
    }
    return kt_report("test_gemm");
}
