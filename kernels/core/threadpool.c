/*
 * The persistent thread pool behind aie_parallel_for (static assignment)
 * and aie_parallel_dynamic (tasks claimed from an atomic counter).
 *
 * - Size: CPUs in the affinity mask (sched_getaffinity), or AIE_NUM_THREADS;
 *   aie_threads_set(n) resizes (joins the old workers, starts new ones).
 *   Workers start lazily, on the first parallel call that needs them.
 * - A request is published as a new generation in the high half of one
 *   64-bit word whose low half is the next unclaimed task (dynamic mode).
 *   Workers spin for a short, time-bounded while (back-to-back kernels of one
 *   inference then skip the futex round trip) and then sleep on a condition
 *   variable, so an idle process burns no CPU.
 * - The caller never waits for a worker that has nothing to do, nor for work
 *   nobody has started: it waits only until every task (dynamic) or every
 *   share (static) is done, and runs any that is still unclaimed itself. A worker that
 *   wakes late reads the job under a seqlock (the generation, read again
 *   after the fields, must not have moved) and in dynamic mode claims a task
 *   only by a compare-and-swap that also checks the generation, so it cannot
 *   run a task of a finished job or of the next one.
 * - Static assignment (aie_parallel_for): participant p of P owns tasks
 *   [p*T/P, (p+1)*T/P), the caller being participant 0, cut into
 *   SHARES_PER_PARTICIPANT claimable shares. Each participant runs its own
 *   shares first (when nobody is late the mapping is the same on every
 *   call), then claims shares nobody has started: a worker that the OS has
 *   descheduled behind another process (or that is slow to wake) costs the
 *   caller at most the one share it is running, not its whole part. A task
 *   never learns who runs it, so results do not depend on it.
 * - Callers from different application threads serialise on call_lock; a
 *   call made from inside a task (nested) runs serially on that thread.
 * - fork(): the child has no workers; an atfork handler resets the pool so
 *   the child restarts them on demand.
 */
#include "threadpool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL_MAX_THREADS 256
#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ volatile("yield")
#else
#define cpu_relax() ((void)0)
#endif
/* Polling before sleeping, in time rather than iterations (PAUSE takes ~10
 * cycles on some cores and ~140 on others): 50 us bridges consecutive
 * kernels of one inference and stays invisible in idle CPU time. The poll
 * never calls sched_yield(): beside a CPU hog on the same core (another
 * process, even at nice 10) a yield hands that core to the hog for a whole
 * time slice, milliseconds, where sleeping on the condition variable is
 * woken -- and preempts the hog -- as soon as the work is done. Measured
 * with a nice-10 busy loop on core 1 (bench_contention.py --busy-cpu 1
 * --busy-nice 10): the MLP's slowdown went from 2.9x to 1.1x (onnxruntime's
 * 1.0-1.1x), ResNet-18's from 1.47x to 1.33x. On an oversubscribed machine
 * the spin still ends after POOL_SPIN_NS. */
#define POOL_SPIN_NS 50000

/* A static job is cut into this many shares per participant, so that when
 * one participant is late (descheduled behind another process) the others
 * take its unstarted shares and wait at most for the one it is running. */
#define SHARES_PER_PARTICIPANT 4

enum { JOB_STATIC = 0, JOB_DYNAMIC = 1 };

typedef struct {
    _Alignas(64) pthread_t tid; /* padded: one cache line per worker */
    int index;
    unsigned first_generation; /* the generation before this worker's first request */
} worker_slot;

static struct {
    pthread_mutex_t lock;      /* protects publication, sleeping, shutdown */
    pthread_cond_t wake;       /* workers sleep here between requests */
    pthread_cond_t done_cv;    /* the caller sleeps here until the job is done */
    pthread_mutex_t call_lock; /* serialises application threads */
    int size;                  /* participants incl. the caller; 0 = not yet decided */
    int nworkers;              /* workers currently running (size - 1 once started) */
    int shutdown;
    /* The current job. Written only by the publishing caller, before the
     * generation moves; read by workers under the seqlock (see file comment),
     * hence relaxed atomics rather than plain fields. */
    _Atomic int mode;
    _Atomic(void *) fn; /* aie_task_fn or aie_dyn_task_fn, by mode */
    _Atomic(void *) ctx;
    _Atomic int64_t ntasks;
    _Atomic int nparticipants;
    _Atomic int64_t target; /* value of `done` at which the job is finished */
    _Alignas(64) _Atomic uint64_t state; /* generation << 32 | next task */
    _Alignas(64) _Atomic int64_t done;   /* tasks (dynamic) or shares (static) finished */
    /* Static job: share s is free while it holds generation << 32 and
     * claimed once its low bit is set (a compare-and-swap that also checks
     * the generation, so a late worker cannot claim a share of another job). */
    _Alignas(64) _Atomic uint64_t share[POOL_MAX_THREADS * SHARES_PER_PARTICIPANT];
    worker_slot workers[POOL_MAX_THREADS];
} g_pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .done_cv = PTHREAD_COND_INITIALIZER,
    .call_lock = PTHREAD_MUTEX_INITIALIZER,
};

void (*_Atomic aie_pool_worker_hook)(int worker);

static _Thread_local int t_in_task; /* nested calls run serially */
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

static unsigned gen_of(uint64_t s) { return (unsigned)(s >> 32); }

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One polling round of a wait that started at `start`: 0 once the wait
 * should turn into sleeping. */
static int poll_round(int i, int64_t start) {
    cpu_relax();
    if (i % 64) return 1;
    int64_t t = now_ns() - start;
    return t <= POOL_SPIN_NS;
}

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

/* Count k units done; the one that completes the job wakes the caller. */
static void finish(int64_t k, int64_t target, int is_caller) {
    int64_t d = atomic_fetch_add_explicit(&g_pool.done, k, memory_order_acq_rel) + k;
    if (d == target && !is_caller) {
        pthread_mutex_lock(&g_pool.lock);
        pthread_cond_signal(&g_pool.done_cv);
        pthread_mutex_unlock(&g_pool.lock);
    }
}

/* The next task of generation gen, or -1 once none is left (or the job is gone). */
static int64_t claim(unsigned gen, int64_t ntasks) {
    uint64_t s = atomic_load_explicit(&g_pool.state, memory_order_relaxed);
    for (;;) {
        if (gen_of(s) != gen || (int64_t)(uint32_t)s >= ntasks) return -1;
        if (atomic_compare_exchange_weak_explicit(&g_pool.state, &s, s + 1, memory_order_acq_rel,
                                                  memory_order_relaxed))
            return (int64_t)(uint32_t)s;
    }
}

/* Shares of a static job: S = min(ntasks, SHARES_PER_PARTICIPANT * P);
 * share s covers tasks [s*T/S, (s+1)*T/S) and participant p owns shares
 * [p*S/P, (p+1)*S/P), which is exactly tasks [p*T/P, (p+1)*T/P). */
static int64_t static_shares(int64_t ntasks, int nparts) {
    int64_t s = (int64_t)nparts * SHARES_PER_PARTICIPANT;
    return ntasks < s ? ntasks : s;
}

/* Share s of generation gen, if nobody has taken it yet. */
static int claim_share(unsigned gen, int64_t s) {
    uint64_t free_ = (uint64_t)gen << 32;
    return atomic_compare_exchange_strong_explicit(&g_pool.share[s], &free_, free_ | 1, memory_order_acq_rel,
                                                   memory_order_relaxed);
}

static void run_share(aie_task_fn fn, void *ctx, int64_t ntasks, int64_t s, int64_t nshares) {
    int64_t end = ntasks * (s + 1) / nshares;
    for (int64_t t = ntasks * s / nshares; t < end; t++) fn(ctx, t, ntasks);
}

/* Participant p's part of static job gen: its own shares in order, then any
 * share nobody has started, from the last one down (the owner of a share
 * works from the front of its range, so a helper meets it last). The tasks a
 * share runs do not depend on who runs it, so results do not either. */
static void run_static(unsigned gen, aie_task_fn fn, void *ctx, int64_t ntasks, int p, int nparts) {
    int64_t nshares = static_shares(ntasks, nparts);
    int64_t own = nshares * p / nparts, own_end = nshares * (p + 1) / nparts;
    t_in_task = 1;
    for (int64_t s = own; s < own_end; s++) {
        if (!claim_share(gen, s)) continue;
        run_share(fn, ctx, ntasks, s, nshares);
        finish(1, nshares, p == 0);
    }
    for (int64_t s = nshares - 1; s >= 0; s--) {
        if (s >= own && s < own_end) continue;
        if (!claim_share(gen, s)) continue;
        run_share(fn, ctx, ntasks, s, nshares);
        finish(1, nshares, p == 0);
    }
    t_in_task = 0;
}

/* Claim and run tasks of generation gen until none is left. */
static void run_dynamic(unsigned gen, aie_dyn_task_fn fn, void *ctx, int64_t ntasks, int64_t target, int worker) {
    int64_t t;
    t_in_task = 1;
    while ((t = claim(gen, ntasks)) >= 0) {
        fn(ctx, t, worker);
        finish(1, target, worker == 0);
    }
    t_in_task = 0;
}

/* Wait (spin, then sleep) until the generation differs from seen or the
 * pool shuts down; returns the state, or 0 with *stop set on shutdown. */
static uint64_t wait_for_job(unsigned seen, int *stop) {
    uint64_t s = atomic_load_explicit(&g_pool.state, memory_order_acquire);
    if (gen_of(s) != seen) return s;
    int64_t start = now_ns();
    for (int i = 1; poll_round(i, start); i++) {
        s = atomic_load_explicit(&g_pool.state, memory_order_acquire);
        if (gen_of(s) != seen) return s;
    }
    pthread_mutex_lock(&g_pool.lock);
    while (gen_of(s = atomic_load_explicit(&g_pool.state, memory_order_acquire)) == seen && !g_pool.shutdown)
        pthread_cond_wait(&g_pool.wake, &g_pool.lock);
    *stop = g_pool.shutdown && gen_of(s) == seen;
    pthread_mutex_unlock(&g_pool.lock);
    return s;
}

static void *worker_main(void *arg) {
    int index = ((worker_slot *)arg)->index; /* participant number, >= 1 */
    /* Not read from g_pool.state here: the request that started this worker
     * may already be published by the time the thread runs. */
    unsigned seen = ((worker_slot *)arg)->first_generation;
    for (;;) {
        int stop = 0;
        uint64_t s = wait_for_job(seen, &stop);
        if (stop) return NULL;
        unsigned gen = gen_of(s);
        seen = gen;
        int mode = atomic_load_explicit(&g_pool.mode, memory_order_relaxed);
        void *fn = atomic_load_explicit(&g_pool.fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&g_pool.ctx, memory_order_relaxed);
        int64_t ntasks = atomic_load_explicit(&g_pool.ntasks, memory_order_relaxed);
        int nparts = atomic_load_explicit(&g_pool.nparticipants, memory_order_relaxed);
        int64_t target = atomic_load_explicit(&g_pool.target, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (gen_of(atomic_load_explicit(&g_pool.state, memory_order_relaxed)) != gen) continue; /* stale read */
        if (index >= nparts) continue;
        void (*hook)(int) = atomic_load_explicit(&aie_pool_worker_hook, memory_order_relaxed);
        if (hook) hook(index);
        if (mode == JOB_STATIC) {
            run_static(gen, (aie_task_fn)fn, ctx, ntasks, index, nparts);
        } else {
            run_dynamic(gen, (aie_dyn_task_fn)fn, ctx, ntasks, target, index);
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
    for (int i = g_pool.nworkers + 1; i < g_pool.size; i++) {
        g_pool.workers[i].index = i;
        g_pool.workers[i].first_generation = gen_of(atomic_load(&g_pool.state));
        int rc = pthread_create(&g_pool.workers[i].tid, NULL, worker_main, &g_pool.workers[i]);
        if (rc != 0) {
            /* Run with the workers we have; participants beyond nworkers are
             * never asked for. */
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
    pthread_cond_init(&g_pool.done_cv, NULL);
    g_pool.nworkers = 0;
    g_pool.shutdown = 0;
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

int aie_parallel_participants(int nthreads, int64_t ntasks) {
    if (t_in_task || ntasks <= 1) return 1;
    int n = nthreads <= 0 ? aie_threads_get() : nthreads;
    if (n > ntasks) n = (int)ntasks;
    return n < 1 ? 1 : n;
}

/* Lock the pool and decide the participants; returns 0 (pool not locked)
 * when the call should run serially on the caller. */
static int begin_call(int64_t ntasks, int nthreads) {
    if (t_in_task || nthreads == 1 || ntasks <= 1) return 0;
    pthread_mutex_lock(&g_pool.call_lock);
    ensure_size();
    if (g_pool.nworkers + 1 < g_pool.size) start_workers();
    int parts = nthreads <= 0 ? g_pool.size : nthreads;
    if (parts > g_pool.nworkers + 1) parts = g_pool.nworkers + 1;
    if (parts > ntasks) parts = (int)ntasks;
    if (parts <= 1) pthread_mutex_unlock(&g_pool.call_lock);
    return parts > 1 ? parts : 0;
}

/* Publish a job as the next generation and wake the workers. */
static unsigned publish(int mode, void *fn, void *ctx, int64_t ntasks, int parts, int64_t target) {
    pthread_mutex_lock(&g_pool.lock);
    unsigned gen = gen_of(atomic_load_explicit(&g_pool.state, memory_order_relaxed)) + 1;
    /* A worker still reading the previous job's fields must see the move of
     * the generation if it sees any of these writes (seqlock writer side). */
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&g_pool.mode, mode, memory_order_relaxed);
    atomic_store_explicit(&g_pool.fn, fn, memory_order_relaxed);
    atomic_store_explicit(&g_pool.ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&g_pool.ntasks, ntasks, memory_order_relaxed);
    atomic_store_explicit(&g_pool.nparticipants, parts, memory_order_relaxed);
    atomic_store_explicit(&g_pool.target, target, memory_order_relaxed);
    atomic_store_explicit(&g_pool.done, 0, memory_order_relaxed);
    /* Every share of the previous static job was claimed (it finished), so
     * an unclaimed slot always belongs to the job being published. */
    if (mode == JOB_STATIC)
        for (int64_t s = 0; s < target; s++)
            atomic_store_explicit(&g_pool.share[s], (uint64_t)gen << 32, memory_order_relaxed);
    atomic_store_explicit(&g_pool.state, (uint64_t)gen << 32, memory_order_release);
    pthread_cond_broadcast(&g_pool.wake);
    pthread_mutex_unlock(&g_pool.lock);
    return gen;
}

/* Wait until done reaches target (spin briefly, then sleep); releases call_lock. */
static void end_call(int64_t target) {
    int64_t start = now_ns();
    for (int i = 1; atomic_load_explicit(&g_pool.done, memory_order_acquire) < target; i++) {
        if (!poll_round(i, start)) {
            pthread_mutex_lock(&g_pool.lock);
            while (atomic_load_explicit(&g_pool.done, memory_order_acquire) < target)
                pthread_cond_wait(&g_pool.done_cv, &g_pool.lock);
            pthread_mutex_unlock(&g_pool.lock);
            break;
        }
    }
    pthread_mutex_unlock(&g_pool.call_lock);
}

void aie_parallel_for(int64_t ntasks, int nthreads, aie_task_fn fn, void *ctx) {
    if (ntasks <= 0 || fn == NULL) return;
    int parts = begin_call(ntasks, nthreads);
    if (!parts) {
        for (int64_t t = 0; t < ntasks; t++) fn(ctx, t, ntasks);
        return;
    }
    int64_t nshares = static_shares(ntasks, parts);
    unsigned gen = publish(JOB_STATIC, (void *)fn, ctx, ntasks, parts, nshares);
    run_static(gen, fn, ctx, ntasks, 0, parts);
    end_call(nshares);
}

void aie_parallel_dynamic(int64_t ntasks, int nthreads, aie_dyn_task_fn fn, void *ctx) {
    if (ntasks <= 0 || fn == NULL) return;
    int parts = ntasks < INT32_MAX ? begin_call(ntasks, nthreads) : 0;
    if (!parts) {
        for (int64_t t = 0; t < ntasks; t++) fn(ctx, t, 0);
        return;
    }
    unsigned gen = publish(JOB_DYNAMIC, (void *)fn, ctx, ntasks, parts, ntasks);
    run_dynamic(gen, fn, ctx, ntasks, ntasks, 0);
    end_call(ntasks);
}
