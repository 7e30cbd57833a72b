/*
 * Thread pool tests: every task runs exactly once, the static assignment is
 * the same on every call, dynamic hand-out covers every task once and lets
 * one participant take over the tasks of a stalled one, nested calls run serially on the calling thread,
 * several application threads can call at once, resizing works, and idle
 * workers sleep (process CPU time barely moves across a 200 ms pause).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "aie_kernels.h"
#include "kernel_test.h"
#include "threadpool.h"

#define NTASKS 1000

typedef struct {
    atomic_int count[NTASKS];
    pthread_t owner[NTASKS];
} coverage;

static void count_task(void *ctx, int64_t t, int64_t n) {
    coverage *c = ctx;
    atomic_fetch_add(&c->count[t], 1);
    c->owner[t] = pthread_self();
    (void)n;
}

static void test_coverage_and_static_assignment(void) {
    static coverage a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    aie_parallel_for(NTASKS, 2, count_task, &a);
    aie_parallel_for(NTASKS, 2, count_task, &b);
    int once = 1, same = 1;
    for (int t = 0; t < NTASKS; t++) {
        once &= atomic_load(&a.count[t]) == 1 && atomic_load(&b.count[t]) == 1;
        same &= pthread_equal(a.owner[t], b.owner[t]) != 0;
    }
    KT_CHECK(once, "every task runs exactly once");
    KT_CHECK(same, "task -> thread assignment is the same on every call");
    KT_CHECK(pthread_equal(a.owner[0], pthread_self()), "the caller takes the first share");
}

typedef struct {
    atomic_int inner_total;
    atomic_int inner_foreign; /* inner tasks that ran on another thread */
} nest_state;

typedef struct {
    nest_state *st;
    pthread_t self;
} inner_ctx;

static void inner_task(void *ctx, int64_t t, int64_t n) {
    inner_ctx *ic = ctx;
    atomic_fetch_add(&ic->st->inner_total, 1);
    if (!pthread_equal(ic->self, pthread_self())) atomic_fetch_add(&ic->st->inner_foreign, 1);
    (void)t, (void)n;
}

static void outer_task(void *ctx, int64_t t, int64_t n) {
    inner_ctx ic = {ctx, pthread_self()};
    aie_parallel_for(10, 2, inner_task, &ic);
    (void)t, (void)n;
}

static void test_nested_runs_serially(void) {
    nest_state st = {0};
    aie_parallel_for(8, 2, outer_task, &st);
    KT_CHECK(atomic_load(&st.inner_total) == 80, "nested: %d inner tasks ran, want 80", atomic_load(&st.inner_total));
    KT_CHECK(atomic_load(&st.inner_foreign) == 0, "nested calls stay on the calling thread");
}

typedef struct {
    const double *x;
    double *partial;
} sum_ctx;

static void sum_task(void *ctx, int64_t t, int64_t n) {
    sum_ctx *s = ctx;
    double acc = 0;
    for (int64_t i = t * 1000; i < (t + 1) * 1000; i++) acc += s->x[i];
    s->partial[t] = acc;
    (void)n;
}

static double *g_x;
static void *caller_main(void *arg) {
    int *bad = arg;
    double partial[64];
    for (int rep = 0; rep < 200; rep++) {
        sum_ctx s = {g_x, partial};
        aie_parallel_for(64, 2, sum_task, &s);
        double total = 0;
        for (int t = 0; t < 64; t++) total += partial[t];
        if (total != 64000.0) (*bad)++;
    }
    return NULL;
}

static void test_concurrent_callers(void) {
    g_x = malloc(64000 * sizeof(double));
    for (int i = 0; i < 64000; i++) g_x[i] = 1.0;
    pthread_t th[4];
    int bad[4] = {0};
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, caller_main, &bad[i]);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    KT_CHECK(bad[0] + bad[1] + bad[2] + bad[3] == 0, "concurrent callers got wrong sums");
    free(g_x);
}

static void test_resize(void) {
    int before = aie_threads_get();
    KT_CHECK(aie_threads_set(0) == AIE_EINVAL, "size 0 rejected");
    KT_CHECK(aie_threads_set(3) == AIE_OK && aie_threads_get() == 3, "resize to 3");
    static coverage c;
    memset(&c, 0, sizeof c);
    aie_parallel_for(NTASKS, 0, count_task, &c);
    int once = 1;
    for (int t = 0; t < NTASKS; t++) once &= atomic_load(&c.count[t]) == 1;
    KT_CHECK(once, "after resize every task runs once");
    aie_threads_set(before);
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

static void test_idle_sleeps(void) {
    static coverage c;
    aie_parallel_for(NTASKS, 2, count_task, &c);
    double before = cpu_seconds();
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    double used = cpu_seconds() - before;
    KT_CHECK(used < 0.03, "idle pool used %.3f s CPU in 0.2 s (spinning?)", used);
}

/* ---- dynamic hand-out ---- */

typedef struct {
    atomic_int count[NTASKS];
    atomic_int bad_worker;
    int limit; /* worker indices must stay below this */
    atomic_int slow_done;
} dyn_state;

static void dyn_task(void *ctx, int64_t t, int worker) {
    dyn_state *d = ctx;
    atomic_fetch_add(&d->count[t], 1);
    if (worker < 0 || worker >= d->limit) atomic_fetch_add(&d->bad_worker, 1);
}

static void test_dynamic_coverage(void) {
    static dyn_state d;
    for (int rep = 0; rep < 50; rep++) {
        memset(&d, 0, sizeof d);
        d.limit = aie_parallel_participants(2, NTASKS);
        aie_parallel_dynamic(NTASKS, 2, dyn_task, &d);
        int once = 1;
        for (int t = 0; t < NTASKS; t++) once &= atomic_load(&d.count[t]) == 1;
        KT_CHECK(once, "dynamic: every task runs exactly once (rep %d)", rep);
        KT_CHECK(atomic_load(&d.bad_worker) == 0, "dynamic: worker index outside [0, participants)");
    }
    KT_CHECK(aie_parallel_participants(8, 3) <= 3, "participants never exceed the task count");
}

/* The point of dynamic hand-out: when one participant stalls inside a task
 * (as a descheduled thread would), the others take the remaining tasks.
 * Task 0 waits (up to 2 s) until all 63 others have run: with static shares
 * half of them would sit behind it, so this only passes if the other
 * participant takes them all. */
static void stall_task(void *ctx, int64_t t, int worker) {
    dyn_state *d = ctx;
    (void)worker;
    if (t == 0) {
        struct timespec ts = {0, 1000 * 1000};
        for (int i = 0; i < 2000 && atomic_load(&d->slow_done) < 63; i++) nanosleep(&ts, NULL);
        atomic_store(&d->bad_worker, atomic_load(&d->slow_done) < 63);
    } else {
        atomic_fetch_add(&d->slow_done, 1);
    }
}

static void test_dynamic_takes_over_a_stalled_share(void) {
    static dyn_state d;
    memset(&d, 0, sizeof d);
    aie_parallel_dynamic(64, 2, stall_task, &d);
    KT_CHECK(atomic_load(&d.slow_done) == 63 && atomic_load(&d.bad_worker) == 0,
             "dynamic: the other participant ran the %d tasks left while one was stalled",
             atomic_load(&d.slow_done));
}

static void dyn_outer(void *ctx, int64_t t, int worker) {
    inner_ctx ic = {ctx, pthread_self()};
    aie_parallel_for(10, 2, inner_task, &ic);
    (void)t, (void)worker;
}

static void test_dynamic_nested(void) {
    nest_state st = {0};
    aie_parallel_dynamic(8, 2, dyn_outer, &st);
    KT_CHECK(atomic_load(&st.inner_total) == 80, "dynamic nested: %d inner tasks ran, want 80",
             atomic_load(&st.inner_total));
    KT_CHECK(atomic_load(&st.inner_foreign) == 0, "dynamic: nested calls stay on the calling thread");
}

/* Static and dynamic jobs back to back (the generation/seqlock hand-over),
 * from several application threads at once. */
static void *mixed_main(void *arg) {
    int *bad = arg;
    static _Thread_local dyn_state d;
    double partial[64];
    for (int rep = 0; rep < 100; rep++) {
        sum_ctx s = {g_x, partial};
        aie_parallel_for(64, 2, sum_task, &s);
        double total = 0;
        for (int t = 0; t < 64; t++) total += partial[t];
        if (total != 64000.0) (*bad)++;
        memset(&d, 0, sizeof d);
        d.limit = 2;
        aie_parallel_dynamic(100, 2, dyn_task, &d);
        for (int t = 0; t < 100; t++)
            if (atomic_load(&d.count[t]) != 1) (*bad)++;
    }
    return NULL;
}

static void test_mixed_concurrent(void) {
    g_x = malloc(64000 * sizeof(double));
    for (int i = 0; i < 64000; i++) g_x[i] = 1.0;
    pthread_t th[3];
    int bad[3] = {0};
    for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, mixed_main, &bad[i]);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    KT_CHECK(bad[0] + bad[1] + bad[2] == 0, "static + dynamic jobs from 3 threads: %d wrong results",
             bad[0] + bad[1] + bad[2]);
    free(g_x);
}

int main(void) {
    if (aie_threads_get() < 2) aie_threads_set(2); /* exercise real workers even on one CPU */
    test_coverage_and_static_assignment();
    test_nested_runs_serially();
    test_concurrent_callers();
    test_resize();
    test_dynamic_coverage();
    test_dynamic_takes_over_a_stalled_share();
    test_dynamic_nested();
    test_mixed_concurrent();
    test_idle_sleeps();
    return kt_report("test_threadpool");
}
