/* Softmax / log-softmax: every SIMD path against the scalar reference
 * (normalised error), plus the +-1e4 stability case. */
#include <string.h>

#include "aie_kernels.h"
#include "kernel_test.h"

static double max_rel_diff(const float *a, const float *b, size_t n, double floor) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + floor);
        if (d > worst || d != d) worst = d != d ? 1e30 : d;
    }
    return worst;
}

int main(void) {
    static const int64_t dims[][3] = {{1, 1, 1}, {3, 1023, 1}, {7, 17, 31}, {2, 3, 517}, {5, 31, 1}, {1, 7, 300}};
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
        int64_t o = dims[k][0], a = dims[k][1], in = dims[k][2];
        size_t n = (size_t)(o * a * in);
        float *x = malloc(n * 4), *ref = malloc(n * 4), *y = malloc(n * 4);
        kt_fill(x, n, 3 + k);
        for (size_t i = 0; i < n; i++) x[i] *= k == 1 ? 1e4f : 8.0f; /* case 1: +-1e4 */
        for (int lg = 0; lg < 2; lg++) {
            aie_set_isa(AIE_ISA_SCALAR);
            KT_CHECK(aie_softmax(x, ref, o, a, in, lg, 1) == AIE_OK, "%s", aie_last_error());
            for (size_t i = 0; i < n; i++) KT_CHECK(isfinite(ref[i]), "scalar softmax not finite at %zu", i);
            for (int isa = AIE_ISA_AVX2; isa <= (int)aie_best_isa(); isa++) {
                aie_set_isa((aie_isa)isa);
                KT_CHECK(aie_softmax(x, y, o, a, in, lg, 2) == AIE_OK, "%s", aie_last_error());
                /* relative to the value (softmax) or to 1 + |value| (log-softmax) */
                double e = max_rel_diff(y, ref, n, lg ? 1.0 : 1e-30);
                /* |x - max| up to 2e4 for case 1: its float rounding feeds exp */
                double bound = (k == 1 ? 2.0 * 16 * 1024 : 64.0 + (double)a) * 6e-8 * (lg ? 1 : 16);
                KT_CHECK(e <= bound, "%s softmax(log=%d) [%lld,%lld,%lld]: rel err %.3g > %.3g",
                         aie_isa_name((aie_isa)isa), lg, (long long)o, (long long)a, (long long)in, e, bound);
            }
        }
        free(x);
        free(ref);
        free(y);
    }
    return kt_report("test_softmax");
}
