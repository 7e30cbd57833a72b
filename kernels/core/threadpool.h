/* Internal: the thread pool's dynamic scheduling entry point (not installed).
 *
 * aie_parallel_for (aie_kernels.h) assigns tasks statically. Kernels whose
 * tasks write disjoint outputs with arithmetic that does not depend on the
 * thread running them (GEMM tiles, convolution tiles) use
 * aie_parallel_dynamic instead: participants claim the next task index from
 * one atomic counter, so a worker the OS has descheduled (or that is still
 * waking up) delays nobody — the others take its share — and the results
 * stay bitwise identical to a serial run. aie_parallel_for's shares are
 * claimable too (threadpool.c), so neither entry point lets the caller wait
 * for work that nobody has started. */
#ifndef AIE_THREADPOOL_H
#define AIE_THREADPOOL_H

#include "aie_internal.h"

/* worker is in [0, aie_parallel_participants(nthreads, ntasks)): an index
 * for per-participant scratch (the caller is 0). Which worker runs which
 * task varies from call to call. */
typedef void (*aie_dyn_task_fn)(void *ctx, int64_t task, int worker);

/* Run fn for every task in [0, ntasks) exactly once on up to nthreads
 * threads (<= 0: the pool's size), the caller included; returns when all
 * have finished. ntasks must be < 2^31. Nested calls (from inside a task of
 * either entry point) run serially on the calling thread with worker 0. */
void aie_parallel_dynamic(int64_t ntasks, int nthreads, aie_dyn_task_fn fn, void *ctx);

/* Upper bound on the worker indices a call with these arguments passes:
 * per-participant scratch needs this many slots. */
int aie_parallel_participants(int nthreads, int64_t ntasks);

/* Test hook: when set, every worker calls it with its participant index
 * after taking up a job and before claiming any of its work — a test blocks
 * a worker there to play a thread the OS has descheduled. NULL in
 * production (one relaxed load per job). */
extern void (*_Atomic aie_pool_worker_hook)(int worker);

#endif /* AIE_THREADPOOL_H */
