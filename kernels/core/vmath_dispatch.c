/* The task-splitting rules every elementwise/reduction/layout driver
 * shares (the vmath table itself comes from kernel_table.c: aie_vm()). */
#include "vmath.h"

int aie_ops_threads(int nthreads) {
    int n = nthreads > 0 ? nthreads : aie_threads_get();
    return n < 1 ? 1 : n;
}

/* 32 Ki elements per task: below that, waking a worker (~5-10 us) costs more
 * than the work it takes over (a float op pass runs at ~1-4 elements/ns). */
#define AIE_OPS_MIN_WORK (32 * 1024)

int64_t aie_ops_tasks(int64_t units, int64_t work_per_unit, int nthreads) {
    int64_t nt = aie_ops_threads(nthreads);
    if (units <= 1 || nt <= 1) return units > 0 ? 1 : 0;
    if (work_per_unit < 1) work_per_unit = 1;
    int64_t by_work = (units * work_per_unit) / AIE_OPS_MIN_WORK;
    if (by_work < nt) nt = by_work < 1 ? 1 : by_work;
    return nt < units ? nt : units;
}

void aie_ops_chunk(int64_t units, int64_t t, int64_t ntasks, int64_t *lo, int64_t *hi) {
    int64_t base = units / ntasks, rem = units % ntasks;
    *lo = t * base + (t < rem ? t : rem);
    *hi = *lo + base + (t < rem ? 1 : 0);
}
