/* Reductions: SIMD paths against the scalar reference (double sums) over
 * every axis subset of a 4-d shape with odd sizes, and argmax ties. */
#include "aie_kernels.h"
#include "kernel_test.h"

int main(void) {
    const int64_t shape[4] = {3, 7, 17, 31};
    const size_t n = 3 * 7 * 17 * 31;
    float *x = malloc(n * 4), *ref = malloc(n * 4), *y = malloc(n * 4);
    kt_fill(x, n, 9);
    static const int ops[] = {AIE_REDUCE_SUM, AIE_REDUCE_MEAN, AIE_REDUCE_MAX, AIE_REDUCE_MIN,
                              AIE_REDUCE_SUM_SQUARE, AIE_REDUCE_L1, AIE_REDUCE_L2, AIE_REDUCE_LOG_SUM_EXP};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        for (uint32_t mask = 0; mask < 16; mask++) {
            int64_t count = 1, nout = 1;
            for (int d = 0; d < 4; d++) *((mask >> d) & 1 ? &count : &nout) *= shape[d];
            aie_set_isa(AIE_ISA_SCALAR);
            KT_CHECK(aie_reduce(ops[k], 4, shape, x, mask, ref, 1) == AIE_OK, "%s", aie_last_error());
            for (int isa = AIE_ISA_AVX2; isa <= (int)aie_best_isa(); isa++) {
                aie_set_isa((aie_isa)isa);
                KT_CHECK(aie_reduce(ops[k], 4, shape, x, mask, y, 2) == AIE_OK, "%s", aie_last_error());
                double worst = 0;
                for (int64_t i = 0; i < nout; i++)
                    worst = fmax(worst, fabs((double)y[i] - ref[i]) / (fabs((double)ref[i]) + 1.0));
                /* inputs in [-1, 1): a float sum of `count` terms errs by <= count * 2^-24 */
                double bound = ((double)count + 4) * 6e-8;
                KT_CHECK(worst <= bound, "%s reduce op %d mask 0x%x: err %.3g > %.3g", aie_isa_name((aie_isa)isa), ops[k],
                         mask, worst, bound);
            }
        }
    }
    /* argmax with ties: first index, or last with select_last */
    float t[6] = {1, 3, 3, -1, 3, 0};
    int64_t s1[1] = {6}, idx;
    KT_CHECK(aie_arg_reduce(AIE_REDUCE_MAX, 1, s1, t, 0, 0, &idx, 1) == AIE_OK && idx == 1, "argmax first tie");
    KT_CHECK(aie_arg_reduce(AIE_REDUCE_MAX, 1, s1, t, 0, 1, &idx, 1) == AIE_OK && idx == 4, "argmax last tie");
    KT_CHECK(aie_arg_reduce(AIE_REDUCE_MIN, 1, s1, t, 0, 0, &idx, 1) == AIE_OK && idx == 3, "argmin");
    free(x); free(ref); free(y);
    return kt_report("test_reduce");
}
