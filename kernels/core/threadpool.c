/*
 * The persistent thread pool behind aie_parallel_for.
 *
 * - Size: CPUs in the affinity mask (sched_getaffinity), or AIE_NUM_THREADS;
 *   aie_threads_set(n) resizes (joins the old workers, starts new ones).
 *   Workers start lazily, on the first parallel call that needs them.
 * - A request is published by bumping a generation counter; workers spin a
 *   short, bounded while (back-to-back kernels in one inference then skip the
 *   futex round trip) and then sleep on a condition variable, so an idle
 *   process burns no CPU.
 * - Static assignment: participant p of P runs tasks [p*T/P, (p+1)*T/P), the
 *   caller being participant 0. The same (ntasks, nthreads) always maps work
 *   the same way, hence bitwise-deterministic results.
 * - Callers from different application threads serialise on call_lock; a
 *   call made from inside a task (nested) runs serially on that thread.
 * - fork(): the child has no workers; an atfork handler resets the pool so
 *   the child restarts them on demand.
 */
#include "aie_internal.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define POOL_MAX_THREADS 256
#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ volatile("yield")
#else
#define cpu_relax() ((void)0)
#endif
/* ~20-50 us of polling before sleeping: long enough to bridge consecutive
 * kernels of one inference, short enough not to show in idle CPU time. */
#define POOL_SPIN_ITERS 20000

typedef struct {
    _Alignas(64) pthread_t tid; /* padded: one cache line per worker */
    int index;
    unsigned first_generation; /* the generation before this worker's first request */
} worker_slot;

static struct {
    pthread_mutex_t lock;      /* protects job publication, sleeping, shutdown */
    pthread_cond_t wake;       /* workers sleep here between requests */
    pthread_cond_t done;       /* the caller sleeps here until pending == 0 */
    pthread_mutex_t call_lock; /* serialises application threads */
    int size;                  /* participants incl. the caller; 0 = not yet decided */
    int nworkers;              /* workers currently running (size - 1 once started) */
    int shutdown;
    /* the current request (written under lock before generation is bumped) */
    aie_task_fn fn;
    void *ctx;
    int64_t ntasks;
    int nparticipants;
    _Alignas(64) atomic_uint generation;
    _Alignas(64) atomic_int pending; /* workers that have not yet acknowledged the request */
    worker_slot workers[POOL_MAX_THREADS];
} g_pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .call_lock = PTHREAD_MUTEX_INITIALIZER,
};

static _Thread_local int t_in_task; /* nested calls run serially */
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

static int default_size(void) {
    const char *env = getenv("AIE_NUM_THREADS");
    if (env && *env) {
        char *end;
        long n = strtol(env, &end, 10);
        if (*end == '\0' && n >= 1 && n <= POOL_MAX_THREADS) return (int)n;
        /* An unusable value falls back to the affinity mask below. */
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n >= 1) return n < POOL_MAX_THREADS ? n : POOL_MAX_THREADS;
    }
    return 1;
}

static void run_share(aie_task_fn fn, void *ctx, int64_t ntasks, int p, int nparts) {
    int64_t begin = ntasks * p / nparts, end = ntasks * (p + 1) / nparts;
    t_in_task = 1;
    for (int64_t t = begin; t < end; t++) fn(ctx, t, ntasks);
    t_in_task = 0;
}

static void *worker_main(void *arg) {
    int index = ((worker_slot *)arg)->index; /* participant number, >= 1 */
    /* Not read from g_pool.generation here: the request that started this
     * worker may already be published by the time the thread runs. */
    unsigned seen = ((worker_slot *)arg)->first_generation;
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&g_pool.generation, memory_order_acquire)) == seen &&
               spins < POOL_SPIN_ITERS) {
            cpu_relax();
            spins++;
        }
        if (gen == seen) {
            pthread_mutex_lock(&g_pool.lock);
            while ((gen = atomic_load_explicit(&g_pool.generation, memory_order_acquire)) == seen &&
                   !g_pool.shutdown)
                pthread_cond_wait(&g_pool.wake, &g_pool.lock);
            int stop = g_pool.shutdown && gen == seen;
            pthread_mutex_unlock(&g_pool.lock);
            if (stop) return NULL;
        }
        seen = gen;
        if (index < g_pool.nparticipants)
            run_share(g_pool.fn, g_pool.ctx, g_pool.ntasks, index, g_pool.nparticipants);
        /* Every worker acknowledges every request, participant or not, so the
         * next request cannot overwrite the job fields while one still reads them. */
        if (atomic_fetch_sub_explicit(&g_pool.pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&g_pool.lock);
            pthread_cond_signal(&g_pool.done);
            pthread_mutex_unlock(&g_pool.lock);
        }
    }
}

static void stop_workers(void) { /* call_lock held */
    pthread_mutex_lock(&g_pool.lock);
    g_pool.shutdown = 1;
    pthread_cond_broadcast(&g_pool.wake);
    pthread_mutex_unlock(&g_pool.lock);
    for (int i = 1; i <= g_pool.nworkers; i++) pthread_join(g_pool.workers[i].tid, NULL);
    g_pool.nworkers = 0;
    g_pool.shutdown = 0;
}

static int start_workers(void) { /* call_lock held; starts size - 1 workers */
    for (int i = 1; i < g_pool.size; i++) {
        g_pool.workers[i].index = i;
        g_pool.workers[i].first_generation = atomic_load(&g_pool.generation);
        int rc = pthread_create(&g_pool.workers[i].tid, NULL, worker_main, &g_pool.workers[i]);
        if (rc != 0) {
            /* Run with the workers we have; the rest of the work stays correct
             * because participants beyond nworkers are never asked for. */
            g_pool.size = i;
            return aie_fail(AIE_EINTERNAL, "thread pool: pthread_create failed for worker %d: %s", i, strerror(rc));
        }
        g_pool.nworkers = i;
    }
    return AIE_OK;
}

static void atfork_child(void) {
    /* Only the forking thread exists in the child: forget the workers and
     * re-create every lock (they may have been held at fork time). */
    pthread_mutex_init(&g_pool.lock, NULL);
    pthread_mutex_init(&g_pool.call_lock, NULL);
    pthread_cond_init(&g_pool.wake, NULL);
    pthread_cond_init(&g_pool.done, NULL);
    g_pool.nworkers = 0;
    g_pool.shutdown = 0;
    atomic_store(&g_pool.pending, 0);
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, atfork_child); }

static void ensure_size(void) { /* call_lock held */
    pthread_once(&g_atfork_once, register_atfork);
    if (g_pool.size == 0) g_pool.size = default_size();
}

int aie_threads_set(int n) {
    if (n < 1 || n > POOL_MAX_THREADS)
        return aie_fail(AIE_EINVAL, "aie_threads_set: thread count must be in [1, %d], got %d", POOL_MAX_THREADS, n);
    pthread_mutex_lock(&g_pool.call_lock);
    ensure_size();
    if (n != g_pool.size) {
        stop_workers();
        g_pool.size = n;
    }
    pthread_mutex_unlock(&g_pool.call_lock);
    return AIE_OK;
}

int aie_threads_get(void) {
    pthread_mutex_lock(&g_pool.call_lock);
    ensure_size();
    int n = g_pool.size;
    pthread_mutex_unlock(&g_pool.call_lock);
    return n;
}

void aie_parallel_for(int64_t ntasks, int nthreads, aie_task_fn fn, void *ctx) {
    if (ntasks <= 0 || fn == NULL) return;
    if (t_in_task || nthreads == 1 || ntasks == 1) {
        for (int64_t t = 0; t < ntasks; t++) fn(ctx, t, ntasks);
        return;
    }
    pthread_mutex_lock(&g_pool.call_lock);
    ensure_size();
    if (g_pool.nworkers + 1 < g_pool.size) start_workers();
    int parts = nthreads <= 0 ? g_pool.size : nthreads;
    if (parts > g_pool.nworkers + 1) parts = g_pool.nworkers + 1;
    if (parts > ntasks) parts = (int)ntasks;
    if (parts <= 1) {
        pthread_mutex_unlock(&g_pool.call_lock);
        for (int64_t t = 0; t < ntasks; t++) fn(ctx, t, ntasks);
        return;
    }

    pthread_mutex_lock(&g_pool.lock);
    g_pool.fn = fn;
    g_pool.ctx = ctx;
    g_pool.ntasks = ntasks;
    g_pool.nparticipants = parts;
    atomic_store_explicit(&g_pool.pending, g_pool.nworkers, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_pool.generation, 1, memory_order_release);
    pthread_cond_broadcast(&g_pool.wake);
    pthread_mutex_unlock(&g_pool.lock);

    run_share(fn, ctx, ntasks, 0, parts);

    for (int spins = 0; atomic_load_explicit(&g_pool.pending, memory_order_acquire) > 0 && spins < POOL_SPIN_ITERS;
         spins++)
        cpu_relax();
    if (atomic_load_explicit(&g_pool.pending, memory_order_acquire) > 0) {
        pthread_mutex_lock(&g_pool.lock);
        while (atomic_load_explicit(&g_pool.pending, memory_order_acquire) > 0)
            pthread_cond_wait(&g_pool.done, &g_pool.lock);
        pthread_mutex_unlock(&g_pool.lock);
    }
    pthread_mutex_unlock(&g_pool.call_lock);
}
