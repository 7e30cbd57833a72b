/* Layer norm / RMS norm: SIMD paths against the scalar reference. */
#include "aie_kernels.h"
#include "kernel_test.h"

int main(void) {
    static const int64_t dims[][2] = {{1, 1}, {7, 3}, {17, 31}, {3, 1023}, {64, 768}};
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
        int64_t r = dims[k][0], c = dims[k][1];
        size_t n = (size_t)(r * c);
        float *x = malloc(n * 4), *s = malloc((size_t)c * 4), *b = malloc((size_t)c * 4);
        float *ref = malloc(n * 4), *y = malloc(n * 4), m0[64], i0[64], m1[64], i1[64];
        kt_fill(x, n, 1 + k);
        kt_fill(s, (size_t)c, 2 + k);
        kt_fill(b, (size_t)c, 3 + k);
        for (size_t i = 0; i < n; i++) x[i] = x[i] * 4.0f + 50.0f; /* offset mean: two-pass variance */
        for (int rms = 0; rms < 2; rms++) {
            aie_set_isa(AIE_ISA_SCALAR);
            int rc = rms ? aie_rms_norm(x, s, ref, r, c, 1e-6f, 1) : aie_layer_norm(x, s, b, ref, r, c, 1e-5f, m0, i0, 1);
            KT_CHECK(rc == AIE_OK, "%s", aie_last_error());
            for (int isa = AIE_ISA_AVX2; isa <= (int)aie_best_isa(); isa++) {
                aie_set_isa((aie_isa)isa);
                rc = rms ? aie_rms_norm(x, s, y, r, c, 1e-6f, 2) : aie_layer_norm(x, s, b, y, r, c, 1e-5f, m1, i1, 2);
                KT_CHECK(rc == AIE_OK, "%s", aie_last_error());
                double worst = 0;
                for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)y[i] - ref[i]));
                /* mean ~50 with 2^-24 relative rounding, amplified by invstd ~ 0.4 */
                double bound = (rms ? 1e-6 : 50.0 * 6e-8 * 0.5 * (8 + sqrt((double)c))) * 4;
                KT_CHECK(worst <= bound, "%s %s [%lld x %lld]: max abs err %.3g > %.3g", aie_isa_name((aie_isa)isa),
                         rms ? "rms_norm" : "layer_norm", (long long)r, (long long)c, worst, bound);
                if (!rms && r <= 64)
                    for (int64_t i = 0; i < r; i++)
                        KT_CHECK(fabsf(m1[i] - m0[i]) <= 1e-4f && fabsf(i1[i] - i0[i]) <= 1e-4f * i0[i], "stats row %lld",
                                 (long long)i);
            }
        }
        free(x); free(s); free(b); free(ref); free(y);
    }
    aie_set_isa(aie_best_isa());
    float one = 1.0f, out;
    KT_CHECK(aie_layer_norm(&one, &one, NULL, &out, 1, 0, 1e-5f, NULL, NULL, 1) == AIE_EINVAL, "empty row accepted");
    return kt_report("test_norm");
}
