/*
 * Thread pool tests: every task runs exactly once, a static share runs on
 * one thread, a caller whose worker is held up (the test hook blocks it)
 * runs every task itself instead of waiting, dynamic hand-out covers every task once and lets
 * one participant take over the tasks of a stalled one, nested calls run serially on the calling thread,
 * several application threads can call at once, resizing works, and idle
 * workers sleep (process CPU time barely moves across a 200 ms pause).
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
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

/* Which thread runs a share depends on who is on time, so only this is
 * fixed: every task once, and the tasks of one share (2 participants x 4
 * shares of 125 tasks) on one thread. */
static void test_coverage_and_shares(void) {
    static coverage a;
    for (int rep = 0; rep < 20; rep++) {
        memset(&a, 0, sizeof a);
        aie_parallel_for(NTASKS, 2, count_task, &a);
        int once = 1, whole = 1;
        for (int t = 0; t < NTASKS; t++) {
            once &= atomic_load(&a.count[t]) == 1;
            whole &= t % 125 == 0 || pthread_equal(a.owner[t], a.owner[t - 1]) != 0;
        }
        KT_CHECK(once, "every task runs exactly once (rep %d)", rep);
        KT_CHECK(whole, "a share's tasks run on one thread (rep %d)", rep);
    }
}

/* ---- a late participant ---- */

/* Never destroyed: a worker that picked up the hook just before the test
 * cleared it may still enter it later. */
static sem_t g_release;
static atomic_int g_released, g_held, g_hold_timed_out;

/* Worker 1 stays here until the test releases it (or 5 s pass: then the
 * caller was waiting for it, and the test fails instead of hanging). */
static void hold_worker(int worker) {
    if (worker != 1) return;
    atomic_fetch_add(&g_held, 1);
    if (atomic_load(&g_released)) return;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    while (sem_timedwait(&g_release, &until) != 0)
        if (errno == ETIMEDOUT) {
            atomic_store(&g_hold_timed_out, 1);
            return;
        }
}

static void dyn_count_task(void *ctx, int64_t t, int worker) {
    count_task(ctx, t, 0);
    (void)worker;
}

/* The caller must run every task itself while the worker is held, for
 * static and dynamic jobs alike, and the released worker must claim
 * nothing of a finished job (each task still ran exactly once). */
static void test_late_worker(int dynamic) {
    static coverage c;
    memset(&c, 0, sizeof c);
    while (sem_trywait(&g_release) == 0) continue;
    atomic_store(&g_released, 0);
    atomic_store(&g_held, 0);
    atomic_store(&g_hold_timed_out, 0);
    atomic_store(&aie_pool_worker_hook, hold_worker);
    if (dynamic)
        aie_parallel_dynamic(NTASKS, 2, dyn_count_task, &c);
    else
        aie_parallel_for(NTASKS, 2, count_task, &c);
    int timed_out = atomic_load(&g_hold_timed_out);
    atomic_store(&aie_pool_worker_hook, NULL);
    atomic_store(&g_released, 1);
    sem_post(&g_release);
    int once = 1, by_caller = 1;
    for (int t = 0; t < NTASKS; t++) {
        once &= atomic_load(&c.count[t]) == 1;
        by_caller &= pthread_equal(c.owner[t], pthread_self()) != 0;
    }
    const char *kind = dynamic ? "dynamic" : "static";
    KT_CHECK(!timed_out, "%s: the caller waited for the held worker instead of running its share", kind);
    KT_CHECK(once, "%s with a held worker: every task runs exactly once", kind);
    KT_CHECK(by_caller || atomic_load(&g_held) == 0, "%s: a held worker ran tasks", kind);
    /* The next job runs normally once the worker is back (its stale claims failed). */
    memset(&c, 0, sizeof c);
    aie_parallel_for(NTASKS, 2, count_task, &c);
    once = 1;
    for (int t = 0; t < NTASKS; t++) once &= atomic_load(&c.count[t]) == 1;
    KT_CHECK(once, "%s: the job after a held worker runs every task once", kind);
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
    sem_init(&g_release, 0, 0);
    test_coverage_and_shares();
    test_late_worker(0);
    test_late_worker(1);
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
