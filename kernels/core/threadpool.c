/* PLACEHOLDER (serial) until the persistent pool lands — owned by the GEMM/core work. */
#include "aie_internal.h"

static int g_threads = 1;
int aie_threads_set(int n) {
    if (n < 1) return aie_fail(AIE_EINVAL, "thread count must be >= 1, got %d", n);
    g_threads = n;
    return AIE_OK;
}
int aie_threads_get(void) { return g_threads; }
void aie_parallel_for(int64_t ntasks, int nthreads, aie_task_fn fn, void *ctx) {
    (void)nthreads;
    for (int64_t t = 0; t < ntasks; t++) fn(ctx, t, ntasks);
}
