/* aie_pool2d / aie_global_pool: output shapes (ONNX ceil-mode rule), the
 * scalar path against the float64 naive references (ref/pool_ref.c), every
 * other ISA against the scalar path (max bitwise, avg by relative error),
 * NaN propagation. */
#include <string.h>

#include "aie_kernels.h"
#include "kernel_test.h"
#include "ref.h"

typedef struct {
    const char *name;
    aie_pool2d_params p;
} pool_case;

static const pool_case CASES[] = {
    {"3x3 s2 pad1", {2, 17, 17, 17, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0}},
    {"3x3 s2 ceil", {1, 7, 7, 31, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 1, 0}},
    {"3x3 s2 ceil asym incl", {1, 17, 16, 9, 3, 3, 2, 2, 1, 1, 1, 0, 2, 1, 1, 1}},
    {"2x3 s(1,3) ceil", {2, 7, 17, 40, 2, 3, 1, 3, 1, 1, 1, 2, 0, 1, 1, 0}},
    {"3x3 d2 incl", {1, 17, 17, 3, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 0, 1}},
    {"1x1", {3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0}},
};

static void test_case(const pool_case *cs) {
    const aie_pool2d_params *p = &cs->p;
    int64_t P, Q;
    KT_CHECK(aie_pool2d_output_shape(p, &P, &Q) == AIE_OK, "%s: %s", cs->name, aie_last_error());
    const size_t nx = (size_t)(p->N * p->H * p->W * p->C), ny = (size_t)(p->N * P * Q * p->C);
    float *x = malloc(nx * 4), *y = malloc(ny * 4), *ys = malloc(ny * 4);
    double *ref = malloc(ny * 8);
    kt_fill(x, nx, 11);
    x[nx / 2] = NAN; /* must reach every window that covers it */
    const aie_isa saved = aie_selected_isa();
    for (int kind = AIE_POOL_MAX; kind <= AIE_POOL_AVG; kind++) {
        aie_ref_pool2d(kind, p, P, Q, x, ref);
        aie_set_isa(AIE_ISA_SCALAR);
        KT_CHECK(aie_pool2d(kind, p, x, ys, 1) == AIE_OK, "%s: %s", cs->name, aie_last_error());
        double e = 0;
        for (size_t i = 0; i < ny; i++) {
            if (isnan(ref[i]) != isnan(ys[i])) e = INFINITY;
            else if (!isnan(ref[i]) && fabs(ys[i] - ref[i]) > e) e = fabs(ys[i] - ref[i]);
        }
        KT_CHECK(e < 1e-6, "%s kind %d scalar vs float64: error %.3g", cs->name, kind, e);
        for (int isa = AIE_ISA_AVX2; isa <= (int)aie_best_isa(); isa++) {
            aie_set_isa((aie_isa)isa);
            KT_CHECK(aie_pool2d(kind, p, x, y, 2) == AIE_OK, "%s: %s", cs->name, aie_last_error());
            double d = 0;
            for (size_t i = 0; i < ny; i++) {
                if (isnan(y[i]) != isnan(ys[i])) d = INFINITY;
                else if (!isnan(ys[i]) && fabs((double)y[i] - ys[i]) / (fabs(ys[i]) + 1e-30) > d)
                    d = fabs((double)y[i] - ys[i]) / (fabs(ys[i]) + 1e-30);
            }
            KT_CHECK(kind == AIE_POOL_MAX ? d == 0 : d < 1e-6, "%s kind %d %s vs scalar: relative diff %.3g",
                     cs->name, kind, aie_isa_name((aie_isa)isa), d);
        }
    }
    aie_set_isa(saved);
    free(x), free(y), free(ys), free(ref);
}

static void test_shapes(void) {
    /* ONNX: 4x4, k3 s2 ceil -> 2 (test_averagepool_2d_ceil); 5x5 k2 s2 ceil
     * -> 3; a window that would start in the end padding is dropped. */
    aie_pool2d_params p = {1, 4, 4, 1, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 1, 0};
    int64_t P, Q;
    aie_pool2d_output_shape(&p, &P, &Q);
    KT_CHECK(P == 2 && Q == 2, "4x4 k3 s2 ceil: %lldx%lld, expected 2x2", (long long)P, (long long)Q);
    p.H = p.W = 5, p.kh = p.kw = 2;
    aie_pool2d_output_shape(&p, &P, &Q);
    KT_CHECK(P == 3 && Q == 3, "5x5 k2 s2 ceil: %lldx%lld, expected 3x3", (long long)P, (long long)Q);
    p.ceil_mode = 0;
    aie_pool2d_output_shape(&p, &P, &Q);
    KT_CHECK(P == 2, "5x5 k2 s2 floor: %lld, expected 2", (long long)P);
    /* 2 + 0 + 1 pad, k1 s2 ceil: ceil((3-1)/2)+1 = 2, but window 1 starts at 2 >= in + pad_begin */
    aie_pool2d_params q = {1, 2, 2, 1, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1, 0};
    q.pad_bottom = 0;
    aie_pool2d_output_shape(&q, &P, &Q);
    KT_CHECK(P == 1, "2 k1 s2 ceil: %lld, expected 1", (long long)P);
    p.pad_top = 2; /* pad >= span */
    KT_CHECK(aie_pool2d_output_shape(&p, &P, &Q) == AIE_EINVAL && strstr(aie_last_error(), "smaller than"),
             "pad >= window accepted: %s", aie_last_error());
    KT_CHECK(aie_pool2d(7, &q, NULL, NULL, 1) == AIE_EINVAL, "bad kind accepted");
}

static void test_global(void) {
    const int64_t N = 2, HW = 49, C = 37;
    float x[2 * 49 * 37], ys[2 * 37], y[2 * 37];
    double ref[2 * 37];
    kt_fill(x, (size_t)(N * HW * C), 12);
    x[100] = NAN;
    const aie_isa saved = aie_selected_isa();
    for (int kind = AIE_POOL_MAX; kind <= AIE_POOL_AVG; kind++) {
        aie_set_isa(AIE_ISA_SCALAR);
        KT_CHECK(aie_global_pool(kind, N, HW, C, x, ys, 1) == AIE_OK, "%s", aie_last_error());
        aie_ref_global_pool(kind, N, HW, C, x, ref);
        for (int64_t i = 0; i < N * C; i++)
            KT_CHECK(isnan(ref[i]) ? isnan(ys[i]) : fabs(ys[i] - ref[i]) < 1e-6, "global kind %d [%lld]: %g vs %g",
                     kind, (long long)i, ys[i], ref[i]);
        for (int isa = AIE_ISA_AVX2; isa <= (int)aie_best_isa(); isa++) {
            aie_set_isa((aie_isa)isa);
            aie_global_pool(kind, N, HW, C, x, y, 2);
            int same = 1;
            for (int64_t i = 0; i < N * C; i++)
                same &= isnan(ys[i]) ? isnan(y[i]) : fabsf(y[i] - ys[i]) <= 1e-6f * fabsf(ys[i]) + 1e-7f;
            KT_CHECK(same, "global kind %d: %s differs from scalar", kind, aie_isa_name((aie_isa)isa));
        }
    }
    aie_set_isa(saved);
}

int main(void) {
    if (aie_init() != AIE_OK) {
        fprintf(stderr, "aie_init: %s\n", aie_last_error());
        return 1;
    }
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) test_case(&CASES[i]);
    test_shapes();
    test_global();
    return kt_report("test_pool");
}
