/*
 * The uint8 QOperator/QDQ steps (exec/qmatmul_u8.c, exec/qadd_u8.c,
 * exec/qsoftmax_u8.c) at every level this CPU runs (aie_set_level: the
 * dispatch table's scalar and avx2 loops), 1 and 3 threads, against
 * references written plainly here:
 *   QMATMUL_U8: int64 sums of (a - za)(b - zb), then float32(sum) * m,
 *     nearbyintf, + zy, saturated; zero points 0/128/255, odd M/N/K, K of 1,
 *     past the AVX2 kernel's chunks and at the int32 limit, column tails, shared and per-batch B, rounding ties (m = 0.5)
 *     and saturation at both ends.
 *   QADD_U8 form 0 (the DQ/Add/Relu/Q steps in float32), form 1 (QLinearAdd,
 *     onnxruntime's fmaf formula) and form 2 (QLinearMul): whole, repeated-row
 *     and one-byte operands, scales that put results on ties; each output
 *     also within one step of the float64 value.
 *   QSOFTMAX_U8: onnxruntime's table walk (sequential float32 sum); rows of
 *     odd length, of one element (the overflow branch), all-equal rows,
 *     rows holding 0 and 255 under a large scale; within one step of float64.
 * Then the error codes of bad steps. First: each level's row names the
 * loops expected (AIE_ISA=scalar reaches the portable ones).
 */
#include <math.h>
#include <string.h>

#include "../exec/exec_ops.h"
#include "aie_kernels.h"
#include "kernel_table.h"
#include "kernel_test.h"

static int nlevels;
static aie_level levels[AIE_LEVEL_COUNT];

static uint8_t sat_u8(float r) { return (uint8_t)(r < 0.f ? 0.f : r > 255.f ? 255.f : r); }

static void fill_u8(uint8_t *x, int64_t n, uint64_t seed, int mode) {
    uint64_t s = seed * 2654435761u + 7;
    for (int64_t i = 0; i < n; i++)
        x[i] = mode == 1 ? 255 : mode == 2 ? (uint8_t)(i % 2 ? 255 : 0) : (uint8_t)(kt_next(&s) >> 56);
}

/* ---- QMATMUL_U8 ---- */
typedef struct {
    int64_t batch, m, n, k;
    int32_t za, zb, zy;
    float mult;
    int shared_b, fill; /* fill: 0 random, 1 all 255 */
} qmm_case;

static void qmm_case_run(const qmm_case *c) {
    const int64_t na = c->batch * c->m * c->k, nb = (c->shared_b ? 1 : c->batch) * c->k * c->n,
                  ny = c->batch * c->m * c->n;
    uint8_t *a = kt_xmalloc((size_t)na), *b = kt_xmalloc((size_t)nb), *y = kt_xmalloc((size_t)ny),
            *want = kt_xmalloc((size_t)ny);
    fill_u8(a, na, (uint64_t)(c->m * 31 + c->k), c->fill);
    fill_u8(b, nb, (uint64_t)(c->n * 17 + c->k), c->fill);
    for (int64_t bt = 0; bt < c->batch; bt++)
        for (int64_t i = 0; i < c->m; i++)
            for (int64_t j = 0; j < c->n; j++) {
                const uint8_t *bm = b + (c->shared_b ? 0 : bt * c->k * c->n);
                int64_t acc = 0;
                for (int64_t p = 0; p < c->k; p++)
                    acc += ((int64_t)a[(bt * c->m + i) * c->k + p] - c->za) * ((int64_t)bm[p * c->n + j] - c->zb);
                want[(bt * c->m + i) * c->n + j] = sat_u8(nearbyintf((float)acc * c->mult) + (float)c->zy);
            }
    int32_t *ws = kt_xmalloc((size_t)(4 * c->n) * sizeof(int32_t)); /* a row per participant, 3 threads + caller */
    int64_t ip[9] = {c->batch, c->m, c->n, c->k, c->za, c->zb, c->zy, c->shared_b ? 0 : c->k * c->n,
                     4 * c->n * 4};
    double fp[1] = {c->mult};
    for (int li = 0; li < nlevels; li++)
        for (int threads = 1; threads <= 3; threads += 2) {
            aie_set_level(levels[li]);
            memset(y, 0xA5, (size_t)ny);
            void *t[4] = {y, a, b, ws};
            aie_step_args args = {t, 4, ip, 9, fp, 1, threads};
            KT_CHECK(aie_x_qmatmul_u8(&args) == AIE_OK, "qmatmul %s", aie_last_error());
            int64_t bad = 0, first = -1;
            for (int64_t i = 0; i < ny; i++)
                if (y[i] != want[i]) bad++, first = first < 0 ? i : first;
            KT_CHECK(bad == 0,
                     "qmatmul %s threads %d batch %lld %lldx%lldx%lld z %d/%d/%d m %g: %lld wrong, first [%lld] %d "
                     "want %d",
                     aie_level_name(levels[li]), threads, (long long)c->batch, (long long)c->m, (long long)c->n,
                     (long long)c->k, c->za, c->zb, c->zy, (double)c->mult, (long long)bad, (long long)first,
                     first < 0 ? 0 : y[first], first < 0 ? 0 : want[first]);
        }
    free(a), free(b), free(y), free(want), free(ws);
}

static void test_qmatmul(void) {
    static const qmm_case cases[] = {
        {1, 1, 1, 1, 0, 0, 0, 1.0f, 0, 0},
        {2, 13, 19, 37, 128, 128, 128, 0.0123f, 0, 0},     /* odd M/N/K, rows past one 8-row task */
        {3, 9, 33, 64, 255, 0, 7, 0.002f, 1, 0},           /* one B for every batch */
        {1, 17, 5, 3, 0, 255, 250, 0.5f, 0, 0},            /* ties (odd sums times 0.5), saturation at 255 */
        {2, 7, 11, 129, 131, 77, 0, 0.05f, 0, 0},          /* saturation at 0 and 255 */
        {1, 3, 3, 1, 128, 128, 128, 1.0f, 0, 0},           /* K = 1 */
        {1, 2, 3, 33025, 0, 0, 0, 100.0f / 2147450625.0f, 0, 1}, /* 33025 x 255 x 255: the int32 limit */
        {1, 2, 3, 33025, 255, 255, 3, 0.5f, 0, 1},         /* all zero after the zero points */
        {0, 4, 4, 4, 0, 0, 0, 1.0f, 0, 0},                 /* no matrices */
        {2, 16, 32, 1031, 3, 250, 128, 0.0004f, 0, 0},     /* whole 8x8 blocks, k past two 512-value chunks */
        {1, 11, 24, 513, 200, 9, 60, 0.001f, 0, 0},        /* a chunk and one value: a lone last pair */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) qmm_case_run(&cases[i]);
    /* past the int32 limit, and a workspace short of one row: refused */
    uint8_t buf[16] = {0};
    int32_t ws[4];
    int64_t ip[9] = {1, 1, 1, 33026, 0, 0, 0, 0, 4};
    double fp[1] = {1.0};
    void *t[4] = {buf, buf, buf, ws};
    aie_step_args args = {t, 4, ip, 9, fp, 1, 1};
    KT_CHECK(aie_x_qmatmul_u8(&args) == AIE_EINVAL, "k 33026 accepted");
    int64_t ip2[9] = {1, 1, 4, 1, 0, 0, 0, 0, 12};
    args.ip = ip2;
    KT_CHECK(aie_x_qmatmul_u8(&args) == AIE_EINVAL, "workspace of 12 bytes for n 4 accepted");
}

/* ---- QADD_U8 ---- */
typedef struct {
    int64_t n, pa, pb;
    int32_t za, zb, zy;
    float sa, sb, sy;
    int form, relu;
} qadd_case;

static uint8_t qadd_ref(const qadd_case *c, uint8_t a0, float a, float b) {
    if (c->form == 0) {
        float v = (a - (float)c->za) * c->sa + (b - (float)c->zb) * c->sb;
        if (c->relu && v < 0.f) v = 0.f;
        return sat_u8(nearbyintf(v / c->sy) + (float)c->zy);
    }
    if (c->form == 2) {
        const float m = c->sa * c->sb / c->sy;
        return sat_u8(nearbyintf((a - (float)c->za) * (b - (float)c->zb) * m + (float)c->zy));
    }
    /* onnxruntime's QLinearAdd (MLAS): one rounding of two fmas; a one-byte operand folded first.
     * onnxruntime hands a one-byte A to MLAS as B: the zero-point terms then swap roles. */
    const float rac = c->sa / c->sy, rbc = c->sb / c->sy;
    float fixed = c->pa == 1 && c->pb != 1 ? (float)c->zy - fmaf(rbc, (float)c->zb, rac * (float)c->za)
                                           : (float)c->zy - fmaf(rac, (float)c->za, rbc * (float)c->zb);
    if (c->pa == 1) return sat_u8(nearbyintf(fmaf(b, rbc, fixed + (float)a0 * rac)));
    if (c->pb == 1) return sat_u8(nearbyintf(fmaf(a, rac, fixed + b * rbc)));
    return sat_u8(nearbyintf(fmaf(a, rac, fmaf(b, rbc, fixed))));
}

static void qadd_case_run(const qadd_case *c) {
    uint8_t *a = kt_xmalloc((size_t)c->pa), *b = kt_xmalloc((size_t)c->pb), *y = kt_xmalloc((size_t)c->n),
            *want = kt_xmalloc((size_t)c->n);
    fill_u8(a, c->pa, (uint64_t)c->pa + 3, 0);
    fill_u8(b, c->pb, (uint64_t)c->pb + 5, 0);
    int64_t far = 0;
    for (int64_t i = 0; i < c->n; i++) {
        const uint8_t ai = a[i % c->pa], bi = b[i % c->pb];
        want[i] = qadd_ref(c, a[0], (float)ai, (float)bi);
        /* float64: the value every form approximates (a form rounds in float32 once to three times) */
        const double da = ((double)ai - c->za) * c->sa, db = ((double)bi - c->zb) * c->sb;
        double v = c->form == 2 ? da * db : da + db;
        if (c->relu && v < 0) v = 0;
        double q = nearbyint(v / c->sy) + c->zy;
        q = q < 0 ? 0 : q > 255 ? 255 : q;
        far += fabs(q - want[i]) > 1.0;
    }
    KT_CHECK(far == 0, "qadd form %d reference: %lld outputs more than one step from float64", c->form,
             (long long)far);
    int64_t ip[8] = {c->n, c->za, c->zb, c->zy, c->relu, c->form, c->pa, c->pb};
    double fp[3] = {c->sa, c->sb, c->sy};
    for (int li = 0; li < nlevels; li++)
        for (int threads = 1; threads <= 3; threads += 2) {
            aie_set_level(levels[li]);
            memset(y, 0xA5, (size_t)c->n);
            void *t[3] = {y, a, b};
            aie_step_args args = {t, 3, ip, 8, fp, 3, threads};
            KT_CHECK(aie_x_qadd_u8(&args) == AIE_OK, "qadd %s", aie_last_error());
            int64_t bad = 0, first = -1;
            for (int64_t i = 0; i < c->n; i++)
                if (y[i] != want[i]) bad++, first = first < 0 ? i : first;
            KT_CHECK(bad == 0,
                     "qadd %s threads %d form %d relu %d n %lld periods %lld/%lld z %d/%d/%d: %lld wrong, first "
                     "[%lld] %d want %d",
                     aie_level_name(levels[li]), threads, c->form, c->relu, (long long)c->n, (long long)c->pa,
                     (long long)c->pb, c->za, c->zb, c->zy, (long long)bad, (long long)first,
                     first < 0 ? 0 : y[first], first < 0 ? 0 : want[first]);
        }
    free(a), free(b), free(y), free(want);
}

/* A one-byte a = 141 against every b byte, onnxruntime's scales (tests/quantize/test_qoperator.py):
 * three b sit on ties where the order of the fixed part's terms decides, so the case pins the order. */
static void test_qadd_one_byte_a_order(void) {
    const qadd_case c = {256, 1, 256, 120, 3, 100, 0.031f, 0.017f, 0.02f, 1, 0};
    const float rac = c.sa / c.sy, rbc = c.sb / c.sy;
    const float unswapped = (float)c.zy - fmaf(rac, (float)c.za, rbc * (float)c.zb) + 141.0f * rac;
    uint8_t a = 141, b[256], y[256];
    int64_t ip[8] = {c.n, c.za, c.zb, c.zy, c.relu, c.form, c.pa, c.pb};
    double fp[3] = {c.sa, c.sb, c.sy};
    int differ = 0;
    for (int i = 0; i < 256; i++) {
        b[i] = (uint8_t)i;
        differ += qadd_ref(&c, a, 141.0f, (float)i) != sat_u8(nearbyintf(fmaf((float)i, rbc, unswapped)));
    }
    KT_CHECK(differ == 3, "qadd one-byte a: the term order decides %d bytes, expected 3", differ);
    for (int li = 0; li < nlevels; li++) {
        aie_set_level(levels[li]);
        void *t[3] = {y, &a, b};
        aie_step_args args = {t, 3, ip, 8, fp, 3, 1};
        KT_CHECK(aie_x_qadd_u8(&args) == AIE_OK, "qadd %s", aie_last_error());
        int bad = 0;
        for (int i = 0; i < 256; i++) bad += y[i] != qadd_ref(&c, a, 141.0f, (float)i);
        KT_CHECK(bad == 0, "qadd %s one-byte a: %d of 256 bytes wrong", aie_level_name(levels[li]), bad);
    }
}

static void test_qadd(void) {
    static const qadd_case cases[] = {
        {40001, 40001, 40001, 128, 128, 128, 0.05f, 0.05f, 0.05f, 0, 0},  /* past two chunks; equal scales */
        {40001, 40001, 40001, 0, 255, 3, 0.031f, 0.017f, 0.029f, 0, 1},   /* Relu */
        {40001, 40001, 40001, 128, 128, 128, 0.05f, 0.05f, 0.1f, 1, 0},   /* ties: a/2 + b/2 */
        {40001, 40001, 40001, 255, 0, 255, 0.031f, 0.017f, 0.029f, 1, 0},
        {7 * 2341, 7 * 2341, 7, 128, 3, 100, 0.02f, 0.03f, 0.04f, 1, 0},  /* b a row of 7 repeated */
        {7 * 2341, 7, 7 * 2341, 0, 128, 0, 0.02f, 0.03f, 0.04f, 0, 0},
        {1001, 1, 1001, 17, 128, 128, 0.05f, 0.05f, 0.1f, 1, 0},          /* one-byte a */
        {1001, 1001, 1, 128, 200, 128, 0.05f, 0.05f, 0.1f, 1, 0},         /* one-byte b */
        {20011, 20011, 20011, 128, 128, 128, 0.5f, 0.25f, 0.125f, 2, 0}, /* QLinearMul: ties, saturation */
        {11 * 1819, 11 * 1819, 11, 0, 255, 7, 0.01f, 0.02f, 0.9f, 2, 0}, /* b a row of 11 */
        {999, 1, 999, 128, 0, 255, 0.01f, 0.02f, 0.5f, 2, 0},
        {3, 3, 3, 255, 255, 0, 1e-3f, 1e-3f, 1e-6f, 1, 0}, /* tiny y scale: both ends saturate */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) qadd_case_run(&cases[i]);
    uint8_t buf[8] = {0};
    void *t[3] = {buf, buf, buf};
    double fp[3] = {1, 1, 1};
    const int64_t bad[][8] = {{8, 0, 0, 0, 0, 3, 8, 8}, {8, 0, 0, 0, 1, 1, 8, 8}, {8, 0, 0, 0, 0, 0, 3, 8},
                              {8, 0, 0, 0, 0, 0, 8, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        aie_step_args args = {t, 3, bad[i], 8, fp, 3, 1};
        KT_CHECK(aie_x_qadd_u8(&args) == AIE_EINVAL, "bad qadd step %zu accepted", i);
    }
}

/* ---- QSOFTMAX_U8 ---- */
static void qsoftmax_case_run(int64_t rows, int64_t d, float x_scale, float y_scale, int32_t zero, int mode) {
    /* the planner's table and multiplier (engine/ops/qlinear.py: qsoftmax_table, emit_qsoftmax_u8) */
    float table[256];
    const double shift = fmax(0.0, log((double)3.4028234663852886e38 / (double)d) - 5.0) / (double)x_scale;
    for (int i = 0; i < 256; i++) table[i] = (float)exp(((double)i - 255.0 + shift) * (double)x_scale);
    const float m = floorf(1.0f / y_scale);
    const int64_t n = rows * d;
    uint8_t *x = kt_xmalloc((size_t)n), *y = kt_xmalloc((size_t)n), *want = kt_xmalloc((size_t)n);
    fill_u8(x, n, (uint64_t)(rows * 13 + d), mode == 3 ? 0 : mode);
    if (mode == 3) /* all-equal rows */
        for (int64_t r = 0; r < rows; r++) memset(x + r * d, (int)(r * 37 % 256), (size_t)d);
    int64_t far = 0;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *xr = x + r * d;
        uint8_t xmax = 0;
        for (int64_t i = 0; i < d; i++) xmax = xr[i] > xmax ? xr[i] : xmax;
        float sum = 0.f;
        double dsum = 0;
        for (int64_t i = 0; i < d; i++) {
            sum += table[255 - xmax + xr[i]];
            dsum += exp(((double)xr[i] - xmax) * (double)x_scale);
        }
        for (int64_t i = 0; i < d; i++) {
            const float e = table[255 - xmax + xr[i]];
            const float p = e * m;
            const float q = nearbyintf(isinf(p) ? e / sum * m : p / sum) + (float)zero;
            want[r * d + i] = (uint8_t)(q > 255.f ? 255.f : q);
            double dq = nearbyint(exp(((double)xr[i] - xmax) * (double)x_scale) / dsum * m) + zero;
            dq = dq > 255 ? 255 : dq;
            far += fabs(dq - want[r * d + i]) > 1.0;
        }
    }
    KT_CHECK(far == 0, "qsoftmax reference d %lld: %lld outputs more than one step from float64", (long long)d,
             (long long)far);
    int64_t ip[3] = {rows, d, zero};
    double fp[1] = {m};
    for (int li = 0; li < nlevels; li++)
        for (int threads = 1; threads <= 3; threads += 2) {
            aie_set_level(levels[li]);
            memset(y, 0xA5, (size_t)n);
            void *t[3] = {y, x, table};
            aie_step_args args = {t, 3, ip, 3, fp, 1, threads};
            KT_CHECK(aie_x_qsoftmax_u8(&args) == AIE_OK, "qsoftmax %s", aie_last_error());
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++) bad += y[i] != want[i];
            KT_CHECK(bad == 0, "qsoftmax %s threads %d rows %lld d %lld mode %d: %lld wrong",
                     aie_level_name(levels[li]), threads, (long long)rows, (long long)d, mode, (long long)bad);
        }
    free(x), free(y), free(want);
}

static void test_qsoftmax(void) {
    qsoftmax_case_run(131, 129, 0.1f, 1.0f / 256.0f, 0, 0);   /* odd rows, past two 64-row tasks */
    qsoftmax_case_run(7, 1, 0.1f, 1.0f / 256.0f, 0, 0);       /* one element: t * m overflows */
    qsoftmax_case_run(9, 77, 0.05f, 1.0f / 255.0f, 0, 3);     /* all-equal rows: 1/d each */
    qsoftmax_case_run(5, 3, 0.05f, 0.25f, 255, 3);            /* zero 255: 1 + 255 saturates */
    qsoftmax_case_run(8, 65, 2.0f, 1.0f / 256.0f, 0, 2);      /* 0 and 255 in a row, large scale: 0s underflow */
    qsoftmax_case_run(4, 301, 0.002f, 1.0f / 256.0f, 128, 0); /* small scale: near-uniform rows */
    uint8_t buf[4] = {0};
    float table[256] = {0};
    void *t[3] = {buf, buf, table};
    double fp[1] = {1};
    const int64_t bad[][3] = {{1, 0, 0}, {-1, 4, 0}, {1, 4, 256}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        aie_step_args args = {t, 3, bad[i], 3, fp, 1, 1};
        KT_CHECK(aie_x_qsoftmax_u8(&args) == AIE_EINVAL, "bad qsoftmax step %zu accepted", i);
    }
}

int main(void) {
    if (aie_init() != AIE_OK) {
        fprintf(stderr, "aie_init: %s\n", aie_last_error());
        return 1;
    }
    for (int l = 0; l < AIE_LEVEL_COUNT; l++)
        if (aie_level_supported((aie_level)l, NULL)) levels[nlevels++] = (aie_level)l;
    /* the level picks the loops: scalar runs the portable ones, every x86 vector level the avx2 ones */
    for (int li = 0; li < nlevels; li++) {
        aie_set_level(levels[li]);
        const char *want = levels[li] == AIE_LEVEL_SCALAR ? "scalar" : "avx2";
        KT_CHECK(strcmp(aie_kernels()->q8->name, want) == 0, "level %s runs the %s uint8 loops, expected %s",
                 aie_level_name(levels[li]), aie_kernels()->q8->name, want);
    }
    test_qmatmul();
    test_qadd();
    test_qadd_one_byte_a_order();
    test_qsoftmax();
    aie_set_level(levels[nlevels - 1]);
    return kt_report("test_qlinear_u8");
}
