/*
 * bf16 and int8 GEMM tests: every level this CPU runs (aie_set_level)
 * against independent naive references written here.
 *  - bf16: C vs a float64 product of the bf16-rounded inputs, within the
 *    fp32 summation bound (K + 2) * 2^-24 * sum |a||b| (the input rounding
 *    is then exact in the reference, so a layout bug cannot hide in the
 *    2^-8 input term), and vs the fp32 inputs within the header's bound.
 *  - int8: int32 results bit-exact against an int64 reference; F32 and U8
 *    outputs equal to the contract's formula and byte-identical across
 *    levels and thread counts. Saturation (255 x -128 everywhere), zero
 *    points, odd sizes, K not a multiple of the tile depth, tails.
 *  - the error codes of bad arguments.
 */
#include <math.h>
#include <string.h>

#include "aie_gemm_lowp.h"
#include "aie_kernels.h"
#include "kernel_test.h"

#ifdef __SANITIZE_ADDRESS__
#define BIG 130 /* the sanitized build is ~5x slower */
#else
#define BIG 300
#endif


/* Round to bf16 and back, nearest-even: an independent spelling of it. */
static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t lsb = (u >> 16) & 1u;
    u = (u + 0x7fffu + lsb) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static const int64_t SIZES[][3] = {{1, 1, 1},    {3, 15, 17},  {16, 16, 32},  {17, 31, 33},  {15, 33, 63},
                                   {31, 17, 65}, {33, 63, 31}, {63, 65, 127}, {65, 3, 129},  {1, 100, 64},
                                   {BIG, 65, 200}, {40, BIG, 97}, {2, 7, 0},
                                   /* several K slices (512 bf16 / 1024 int8) and a short last one */
                                   {37, 45, 700}, {20, 33, 2100}};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])

static int run_levels(aie_level *out) {
    int n = 0;
    for (int l = 0; l < AIE_LEVEL_COUNT; l++)
        if (aie_level_supported((aie_level)l, NULL)) out[n++] = (aie_level)l;
    return n;
}

/* ---- bf16 ---------------------------------------------------------------- */

static void test_bf16_case(const aie_level *levels, int nlevels, int64_t M, int64_t N, int64_t K, int a_bf16,
                           int with_ep) {
    int64_t lda = K + 3, ldc = N + 2;
    float *A = kt_xmalloc((size_t)(M * lda) * sizeof(float));
    float *B = kt_xmalloc((size_t)(K * N) * sizeof(float));
    float *bias = kt_xmalloc((size_t)N * sizeof(float));
    float *C = kt_xmalloc((size_t)(M * ldc) * sizeof(float));
    uint16_t *Ab = kt_xmalloc((size_t)(M * lda) * sizeof(uint16_t));
    kt_fill(A, (size_t)(M * lda), (uint64_t)(M * 7 + N * 3 + K));
    kt_fill(B, (size_t)(K * N), (uint64_t)(M + N * 5 + K * 11));
    kt_fill(bias, (size_t)N, 99);
    for (int64_t x = 0; x < M * lda; x++) {
        float r = bf16_round(A[x]);
        uint32_t u;
        memcpy(&u, &r, 4);
        Ab[x] = (uint16_t)(u >> 16);
    }
    aie_epilogue ep = {bias, AIE_BIAS_COL, AIE_U_RELU, 0.f, 0.f};
    size_t psz = aie_gemm_bf16_packed_b_size(K, N);
    void *packed = kt_xmalloc(psz);
    KT_CHECK(aie_gemm_bf16_pack_b(0, K, N, B, N, packed, psz) == AIE_OK, "bf16 pack: %s", aie_last_error());
    float *first = kt_xmalloc((size_t)(M * ldc) * sizeof(float)); /* this level's 1-thread result */
    for (int li = 0; li < nlevels; li++) {
        aie_set_level(levels[li]);
        for (int threads = 1; threads <= 3; threads += 2) {
            size_t wss = aie_gemm_bf16_workspace_size(M, N, K, threads);
            void *ws = kt_xmalloc(wss);
            for (int64_t x = 0; x < M * ldc; x++) C[x] = NAN; /* the kernel must write every element */
            const void *a_in = a_bf16 ? (const void *)Ab : (const void *)A;
            int rc = aie_gemm_bf16(M, N, K, a_in, a_bf16 ? AIE_A_BF16 : AIE_A_F32, lda, packed, C, ldc,
                                   with_ep ? &ep : NULL, ws, wss, threads);
            KT_CHECK(rc == AIE_OK, "aie_gemm_bf16 %s: %s", aie_level_name(levels[li]), aie_last_error());
            free(ws);
            double worst_r = 0, worst_f = 0;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double sr = 0, sf = 0, mag = 0;
                    for (int64_t k = 0; k < K; k++) {
                        double a = A[i * lda + k], b = B[k * N + j];
                        sr += (double)bf16_round(A[i * lda + k]) * (double)bf16_round(B[k * N + j]);
                        sf += a * b;
                        mag += fabs(a * b);
                    }
                    if (with_ep) {
                        sr = fmax(sr + bias[j], 0.0);
                        sf = fmax(sf + bias[j], 0.0);
                    }
                    double got = C[i * ldc + j], tiny = 1e-30;
                    /* |a|,|b| < 1: the rounded magnitudes exceed these by < 2^-8 */
                    double er = fabs(got - sr) / ((double)(K + 2) * 0x1p-24 * mag * (1 + 0x1p-7) + tiny);
                    double ef = fabs(got - sf) / ((0x1p-8 + (double)(K + 2) * 0x1p-24) * mag + tiny);
                    if (!(er <= worst_r)) worst_r = er;
                    if (!(ef <= worst_f)) worst_f = ef;
                }
            KT_CHECK(worst_r <= 1.0 && worst_f <= 1.0,
                     "bf16 %s M=%lld N=%lld K=%lld a_bf16=%d ep=%d threads=%d: error %.3g of the summation bound, "
                     "%.3g of the input bound",
                     aie_level_name(levels[li]), (long long)M, (long long)N, (long long)K, a_bf16, with_ep, threads,
                     worst_r, worst_f);
            if (threads == 1) {
                memcpy(first, C, (size_t)(M * ldc) * sizeof(float));
            } else {
                KT_CHECK(memcmp(first, C, (size_t)(M * ldc) * sizeof(float)) == 0,
                         "bf16 %s: 1 and 3 threads differ", aie_level_name(levels[li]));
            }
        }
    }
    free(first);
    free(packed);
    free(A), free(B), free(bias), free(C), free(Ab);
}

/* The GELU epilogue (aie_gemm_lowp.h: to bf16 accuracy): K = 1, B = 1, so
 * C is bf16(A) + bias in fp32 (the kernel's one rounding); each level within (2^-18 + x^2 2^-23) |gelu|
 * of the double GELU on x in [-24, 24], -0 at -inf, inf at inf, and every
 * level gives the first level's bits. */
static void test_bf16_gelu(const aie_level *levels, int nlevels, int64_t M, int64_t N) {
    float *A = kt_xmalloc((size_t)M * sizeof(float)), *B = kt_xmalloc((size_t)N * sizeof(float));
    float *bias = kt_xmalloc((size_t)N * sizeof(float)), *C = kt_xmalloc((size_t)(M * N) * sizeof(float));
    float *first = kt_xmalloc((size_t)(M * N) * sizeof(float));
    kt_fill(A, (size_t)M, (uint64_t)(M * 13 + N));
    for (int64_t i = 0; i < M; i++) A[i] = bf16_round(A[i] * 24.0f);
    A[0] = INFINITY, A[M - 1] = -INFINITY;
    for (int64_t j = 0; j < N; j++) B[j] = 1.0f, bias[j] = (float)(j % 5) * 0.25f; /* exact sums */
    aie_epilogue ep = {bias, AIE_BIAS_COL, AIE_U_GELU, 0.f, 0.f};
    size_t psz = aie_gemm_bf16_packed_b_size(1, N);
    void *packed = kt_xmalloc(psz);
    KT_CHECK(aie_gemm_bf16_pack_b(0, 1, N, B, N, packed, psz) == AIE_OK, "gelu pack: %s", aie_last_error());
    for (int li = 0; li < nlevels; li++) {
        aie_set_level(levels[li]);
        size_t wss = aie_gemm_bf16_workspace_size(M, N, 1, 2);
        void *ws = kt_xmalloc(wss);
        int rc = aie_gemm_bf16(M, N, 1, A, AIE_A_F32, 1, packed, C, N, &ep, ws, wss, 2);
        KT_CHECK(rc == AIE_OK, "gelu %s: %s", aie_level_name(levels[li]), aie_last_error());
        free(ws);
        double worst = 0;
        for (int64_t i = 1; i + 1 < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double x = (double)(A[i] + bias[j]), ref = x * 0.5 * erfc(-x / sqrt(2.0));
                double e = fabs(C[i * N + j] - ref) / ((0x1p-18 + x * x * 0x1p-23) * fabs(ref) + 1e-38);
                if (!(e <= worst)) worst = e;
            }
        KT_CHECK(worst <= 1.0, "gelu %s M=%lld N=%lld: %.3g of the bound", aie_level_name(levels[li]),
                 (long long)M, (long long)N, worst);
        KT_CHECK(C[0] == INFINITY && C[(M - 1) * N] == 0.0f && signbit(C[(M - 1) * N]), "gelu %s: +-inf",
                 aie_level_name(levels[li]));
        if (li == 0) memcpy(first, C, (size_t)(M * N) * sizeof(float));
        else
            KT_CHECK(memcmp(first, C, (size_t)(M * N) * sizeof(float)) == 0, "gelu: %s differs from %s",
                     aie_level_name(levels[li]), aie_level_name(levels[0]));
    }
    free(packed), free(first);
    free(A), free(B), free(bias), free(C);
}

/* ---- int8 ---------------------------------------------------------------- */

typedef struct {
    int64_t M, N, K;
    int fill; /* 0 random, 1 saturating: A = 255, B = -128 */
    int32_t a_zero;
} s8_case;

static uint8_t requant_ref(int64_t acc, int32_t bias, float a_scale, float b_scale, float y_scale, int32_t y_zero) {
    float m = a_scale * b_scale / y_scale;
    float y = (float)(int32_t)(acc + bias) * m;
    float r = nearbyintf(y) + (float)y_zero;
    return (uint8_t)(r < 0.f ? 0.f : r > 255.f ? 255.f : r);
}

static void test_s8_case(const aie_level *levels, int nlevels, const s8_case *c) {
    const int64_t M = c->M, N = c->N, K = c->K, lda = K + 1, ldc = N + 3;
    uint8_t *A = kt_xmalloc((size_t)(M * lda));
    int8_t *B = kt_xmalloc((size_t)(K * N));
    int32_t *ref = kt_xmalloc((size_t)(M * N) * sizeof(int32_t));
    float *bscale = kt_xmalloc((size_t)N * sizeof(float));
    int32_t *bias = kt_xmalloc((size_t)N * sizeof(int32_t));
    float *fbias = kt_xmalloc((size_t)N * sizeof(float));
    uint64_t s = (uint64_t)(M * 131 + N * 17 + K * 3 + c->fill);
    for (int64_t x = 0; x < M * lda; x++) A[x] = c->fill ? 255 : (uint8_t)(kt_next(&s) >> 56);
    for (int64_t x = 0; x < K * N; x++) B[x] = c->fill ? -128 : (int8_t)(kt_next(&s) >> 56);
    for (int64_t j = 0; j < N; j++) {
        bscale[j] = 0.001f + (float)(kt_next(&s) >> 44) * 0x1p-30f;
        bias[j] = (int32_t)(kt_next(&s) >> 48) - 32768;
        fbias[j] = (float)bias[j] * 0.01f;
    }
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            int64_t acc = 0;
            for (int64_t k = 0; k < K; k++) acc += ((int64_t)A[i * lda + k] - c->a_zero) * (int64_t)B[k * N + j];
            ref[i * N + j] = (int32_t)acc;
        }
    size_t psz = aie_gemm_s8_packed_b_size(K, N);
    void *packed = kt_xmalloc(psz);
    KT_CHECK(aie_gemm_s8_pack_b(0, K, N, B, N, packed, psz) == AIE_OK, "s8 pack: %s", aie_last_error());
    /* requantise to about the middle of the uint8 range, with some saturation */
    const float a_scale = 0.02f, y_scale = 0.05f * (float)(K + 1);
    const int32_t y_zero = 100;
    int32_t *C32 = kt_xmalloc((size_t)(M * ldc) * sizeof(int32_t));
    float *Cf = kt_xmalloc((size_t)(M * ldc) * sizeof(float));
    uint8_t *Cu = kt_xmalloc((size_t)(M * ldc)), *Cu0 = kt_xmalloc((size_t)(M * ldc));
    float *Cf0 = kt_xmalloc((size_t)(M * ldc) * sizeof(float));
    aie_epilogue ep = {fbias, AIE_BIAS_COL, AIE_U_IDENTITY, 0.f, 0.f};
    for (int li = 0; li < nlevels; li++) {
        aie_set_level(levels[li]);
        for (int threads = 1; threads <= 3; threads += 2) {
            const char *ln = aie_level_name(levels[li]);
            size_t wss = aie_gemm_u8s8_workspace_size(M, N, K, threads);
            void *ws = kt_xmalloc(wss);
            aie_qepilogue q32 = {.out = AIE_QOUT_S32};
            aie_qepilogue qf = {.out = AIE_QOUT_F32, .a_scale = a_scale, .b_scale = bscale, .ep = &ep};
            aie_qepilogue qu = {.out = AIE_QOUT_U8, .a_scale = a_scale, .b_scale = bscale, .y_scale = y_scale,
                                .y_zero = y_zero, .bias_s32 = bias};
            int rc = aie_gemm_u8s8(M, N, K, A, lda, c->a_zero, packed, C32, ldc, &q32, ws, wss, threads);
            KT_CHECK(rc == AIE_OK, "u8s8 s32 %s: %s", ln, aie_last_error());
            rc = aie_gemm_u8s8(M, N, K, A, lda, c->a_zero, packed, Cf, ldc, &qf, ws, wss, threads);
            KT_CHECK(rc == AIE_OK, "u8s8 f32 %s: %s", ln, aie_last_error());
            rc = aie_gemm_u8s8(M, N, K, A, lda, c->a_zero, packed, Cu, ldc, &qu, ws, wss, threads);
            KT_CHECK(rc == AIE_OK, "u8s8 u8 %s: %s", ln, aie_last_error());
            free(ws);
            int64_t bad32 = 0, badf = 0, badu = 0, diff = 0;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    int64_t r = ref[i * N + j];
                    bad32 += C32[i * ldc + j] != r;
                    float fr = (float)r * (a_scale * bscale[j]) + fbias[j];
                    badf += memcmp(&Cf[i * ldc + j], &fr, 4) != 0;
                    badu += Cu[i * ldc + j] != requant_ref(r, bias[j], a_scale, bscale[j], y_scale, y_zero);
                    if (li > 0 || threads > 1)
                        diff += Cu[i * ldc + j] != Cu0[i * ldc + j] ||
                                memcmp(&Cf[i * ldc + j], &Cf0[i * ldc + j], 4) != 0;
                }
            KT_CHECK(bad32 == 0 && badf == 0 && badu == 0 && diff == 0,
                     "u8s8 %s M=%lld N=%lld K=%lld fill=%d a_zero=%d threads=%d: %lld int32, %lld fp32, %lld uint8 "
                     "wrong; %lld differ from the first level",
                     ln, (long long)M, (long long)N, (long long)K, c->fill, (int)c->a_zero, threads, (long long)bad32,
                     (long long)badf, (long long)badu, (long long)diff);
            if (li == 0 && threads == 1) {
                memcpy(Cu0, Cu, (size_t)(M * ldc));
                memcpy(Cf0, Cf, (size_t)(M * ldc) * sizeof(float));
            }
        }
    }
    free(A), free(B), free(ref), free(bscale), free(bias), free(fbias), free(packed);
    free(C32), free(Cf), free(Cu), free(Cu0), free(Cf0);
}

/* Requantisation ties round half to even on every level: acc * 0.5 for acc =
 * 1, 3, 5, -1, -3 is 0.5, 1.5, 2.5, -0.5, -1.5 -> 0, 2, 2, 0, -2 (+ 10). */
static void test_ties(const aie_level *levels, int nlevels) {
    uint8_t A[5] = {1, 3, 5, 0, 0};
    int8_t B[1] = {1}, Bn[1] = {-1};
    char pb[4096] __attribute__((aligned(64))), pbn[4096] __attribute__((aligned(64)));
    char ws[1 << 14] __attribute__((aligned(64)));
    KT_CHECK(aie_gemm_s8_pack_b(0, 1, 1, B, 1, pb, sizeof pb) == AIE_OK, "pack");
    KT_CHECK(aie_gemm_s8_pack_b(0, 1, 1, Bn, 1, pbn, sizeof pbn) == AIE_OK, "pack");
    float one = 1.0f;
    aie_qepilogue q = {.out = AIE_QOUT_U8, .a_scale = 0.5f, .b_scale = &one, .y_scale = 1.0f, .y_zero = 10};
    for (int li = 0; li < nlevels; li++) {
        aie_set_level(levels[li]);
        uint8_t C[5], Cn[2];
        KT_CHECK(aie_gemm_u8s8(3, 1, 1, A, 1, 0, pb, C, 1, &q, ws, sizeof ws, 1) == AIE_OK, "%s", aie_last_error());
        KT_CHECK(aie_gemm_u8s8(2, 1, 1, A, 1, 0, pbn, Cn, 1, &q, ws, sizeof ws, 1) == AIE_OK, "%s", aie_last_error());
        KT_CHECK(C[0] == 10 && C[1] == 12 && C[2] == 12 && Cn[0] == 10 && Cn[1] == 8,
                 "%s: ties gave %d %d %d %d %d, expected 10 12 12 10 8", aie_level_name(levels[li]), C[0], C[1], C[2],
                 Cn[0], Cn[1]);
    }
}

/* ---- errors ---------------------------------------------------------------- */

static void test_errors(void) {
    float B[4 * 3] = {0}, C[2 * 3];
    float A[2 * 4] = {0};
    char packed[4096] __attribute__((aligned(64)));
    char ws[1 << 16] __attribute__((aligned(64)));
    KT_CHECK(aie_gemm_bf16_pack_b(0, 4, 3, B, 3, packed, 10) == AIE_ENOMEM, "small packed buffer");
    KT_CHECK(aie_gemm_bf16_pack_b(0, 4, 3, B, 2, packed, sizeof packed) == AIE_EINVAL, "ldb < N");
    KT_CHECK(strstr(aie_last_error(), "ldB=2") != NULL, "message names ldB: %s", aie_last_error());
    KT_CHECK(aie_gemm_bf16_pack_b(0, 4, 3, B, 3, packed, sizeof packed) == AIE_OK, "pack");
    KT_CHECK(aie_gemm_bf16(2, 3, 5, A, AIE_A_F32, 5, packed, C, 3, NULL, ws, sizeof ws, 1) == AIE_EINVAL, "K mismatch");
    KT_CHECK(strstr(aie_last_error(), "K=5") != NULL, "message: %s", aie_last_error());
    KT_CHECK(aie_gemm_bf16(2, 3, 4, A, 7, 4, packed, C, 3, NULL, ws, sizeof ws, 1) == AIE_EINVAL, "a_type");
    KT_CHECK(aie_gemm_bf16(2, 3, 4, A, AIE_A_F32, 4, packed, C, 3, NULL, ws, 16, 1) == AIE_ENOMEM, "small workspace");
    KT_CHECK(aie_gemm_bf16(2, 3, 4, A, AIE_A_F32, 4, packed, C, 3, NULL, ws, sizeof ws, 1) == AIE_OK, "%s",
             aie_last_error());
    uint8_t Au[2 * 4] = {0};
    int32_t C32[2 * 3];
    KT_CHECK(aie_gemm_u8s8(2, 3, 4, Au, 4, 0, packed, C32, 3, &(aie_qepilogue){.out = AIE_QOUT_S32}, ws, sizeof ws,
                           1) == AIE_EINVAL, "bf16 B given to the int8 GEMM");
    KT_CHECK(strstr(aie_last_error(), "bad magic") != NULL, "message: %s", aie_last_error());
    int8_t Bs[4 * 3] = {0};
    KT_CHECK(aie_gemm_s8_pack_b(0, 4, 3, Bs, 3, packed, sizeof packed) == AIE_OK, "s8 pack");
    KT_CHECK(aie_gemm_u8s8(2, 3, 4, Au, 4, 256, packed, C32, 3, &(aie_qepilogue){.out = AIE_QOUT_S32}, ws, sizeof ws,
                           1) == AIE_EINVAL, "a_zero 256");
    float bs[3] = {1, 1, 1};
    aie_qepilogue qu = {.out = AIE_QOUT_U8, .a_scale = 1.f, .b_scale = bs, .y_scale = 0.f};
    KT_CHECK(aie_gemm_u8s8(2, 3, 4, Au, 4, 0, packed, C32, 3, &qu, ws, sizeof ws, 1) == AIE_EINVAL, "y_scale 0");
    KT_CHECK(strstr(aie_last_error(), "y_scale") != NULL, "message: %s", aie_last_error());
    KT_CHECK(aie_gemm_s8_pack_b(0, AIE_GEMM_S8_MAX_K + 1, 1, Bs, 1, packed, sizeof packed) == AIE_EINVAL, "K limit");
    KT_CHECK(aie_set_level((aie_level)99) == AIE_EINVAL, "unknown level");
}

int main(void) {
    if (aie_init() != AIE_OK) {
        fprintf(stderr, "aie_init: %s\n", aie_last_error());
        return 1;
    }
    aie_level levels[AIE_LEVEL_COUNT];
    int n = run_levels(levels);
    const char *why = "";
    if (!aie_level_supported(AIE_LEVEL_AMX, &why)) printf("test_gemm_lowp: AMX path skipped: %s\n", why);
    printf("levels:");
    for (int i = 0; i < n; i++) printf(" %s", aie_level_name(levels[i]));
    printf("\n");
    for (size_t s = 0; s < NSIZES; s++) {
        test_bf16_case(levels, n, SIZES[s][0], SIZES[s][1], SIZES[s][2], 0, s % 2);
        if (s % 3 == 0) test_bf16_case(levels, n, SIZES[s][0], SIZES[s][1], SIZES[s][2], 1, 0);
        s8_case c = {SIZES[s][0], SIZES[s][1], SIZES[s][2], 0, (int32_t)(s * 37 % 256)};
        test_s8_case(levels, n, &c);
    }
    const s8_case sat[] = {{17, 33, 65, 1, 0}, {3, 5, 1000, 1, 0}, {33, 17, 129, 1, 255}};
    for (size_t s = 0; s < sizeof sat / sizeof sat[0]; s++) test_s8_case(levels, n, &sat[s]);
    test_ties(levels, n);
    test_bf16_gelu(levels, n, 203, 37);
    test_bf16_gelu(levels, n, 5, 1);
    aie_set_level(aie_best_level());
    test_errors();
    return kt_report("test_gemm_lowp");
}
