/* Softmax / log-softmax: every SIMD path against the scalar reference
 * (normalised error), plus the +-1e4 stability case. The bf16 attention's
 * row routine (aie_vm_table.softmax_scaled) on every ISA against float64. */
#include <string.h>

#include "aie_kernels.h"
#include "kernel_test.h"
#include "vmath.h"

static double max_rel_diff(const float *a, const float *b, size_t n, double floor) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + floor);
        if (d > worst || d != d) worst = d != d ? 1e30 : d;
    }
    return worst;
}

/* softmax(scale * x + mask) in double from the same float inputs; the
 * float routine errs by the rounding of scale * x + mask and of t - max (each
 * |t| 2^-24, fed to exp), exp's own, the n-term sum and the reciprocal. */
static void test_softmax_scaled(void) {
    static const int64_t ns[] = {1, 7, 16, 90, 129};
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++)
        for (int with_mask = 0; with_mask < 2; with_mask++) {
            int64_t n = ns[c];
            float *x = malloc((size_t)n * 4), *mask = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
            double *ref = malloc((size_t)n * 8);
            kt_fill(x, (size_t)n, 11 + c), kt_fill(mask, (size_t)n, 23 + c);
            for (int64_t i = 0; i < n; i++) x[i] *= 12.0f, mask[i] *= 3.0f;
            if (n > 2) mask[n / 2] = -INFINITY; /* a masked-out key */
            const float scale = 0.37f;
            double mx = -INFINITY, sum = 0;
            for (int64_t i = 0; i < n; i++) {
                ref[i] = (double)x[i] * scale + (with_mask ? mask[i] : 0.0);
                if (ref[i] > mx) mx = ref[i];
            }
            for (int64_t i = 0; i < n; i++) sum += ref[i] = exp(ref[i] - mx);
            for (int64_t i = 0; i < n; i++) ref[i] /= sum;
            for (int isa = AIE_ISA_SCALAR; isa <= (int)aie_best_isa(); isa++) {
                aie_set_isa((aie_isa)isa);
                memcpy(y, x, (size_t)n * 4);
                aie_vm()->softmax_scaled(y, n, scale, with_mask ? mask : NULL);
                double worst = 0, bound = (4.0 * 12 * 0.37 + 12 + (double)n) * 0x1p-23;
                for (int64_t i = 0; i < n; i++) {
                    double e = fabs(y[i] - ref[i]) / (ref[i] + 1e-38);
                    if (!(e <= worst)) worst = e;
                }
                KT_CHECK(worst <= bound, "%s softmax_scaled n=%lld mask=%d: rel err %.3g > %.3g",
                         aie_isa_name((aie_isa)isa), (long long)n, with_mask, worst, bound);
                if (with_mask && n > 2) KT_CHECK(y[n / 2] == 0.0f, "%s: a -inf mask gives 0", aie_isa_name((aie_isa)isa));
            }
            free(x), free(mask), free(y), free(ref);
        }
}

int main(void) {
    test_softmax_scaled();
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
