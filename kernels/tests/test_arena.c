/* Arena allocator: buckets, alignment, coalescing, exhaustion, bad frees,
 * stats invariants and concurrent use. Runs on normal pages (hugepages
 * need root and a reserved pool: the Python tests cover MAP_HUGETLB). */
#include <pthread.h>
#include <string.h>

#include "aie_kernels.h"
#include "kernel_test.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

static aie_arena *make(size_t size) {
    aie_arena_options o = {.hugepages = 0, .hugepage_size = 0, .mlock = 0, .prefault = 1};
    aie_arena *a = NULL;
    int rc = aie_arena_create(size, &o, &a);
    KT_CHECK(rc == AIE_OK && a, "create(%zu) failed: %s", size, aie_last_error());
    return a;
}

static aie_arena_stats stats(aie_arena *a) {
    aie_arena_stats s;
    KT_CHECK(aie_arena_stats_get(a, &s) == AIE_OK, "stats: %s", aie_last_error());
    return s;
}

/* Every free byte is in a free block, and the counters agree with the lists. */
static void check_invariants(aie_arena *a, const char *where) {
    aie_arena_stats s = stats(a);
    size_t free_payload = 0, free_blocks = 0;
    for (int k = 0; k < AIE_ARENA_BUCKETS; k++) {
        free_payload += s.bucket_free_bytes[k];
        free_blocks += s.bucket_free_blocks[k];
    }
    KT_CHECK(free_payload + free_blocks * AIE_ARENA_HEADER == s.free_bytes,
             "%s: free lists hold %zu+%zu*64 bytes, counters say %zu", where, free_payload, free_blocks, s.free_bytes);
    KT_CHECK(s.in_use + s.free_bytes == s.reserved, "%s: in_use + free != reserved", where);
    KT_CHECK(s.peak_in_use >= s.in_use, "%s: peak below in_use", where);
}

static void test_buckets(void) {
    KT_CHECK(aie_arena_bucket_of(0) == 0 && aie_arena_bucket_of(4096) == 0, "<=4K is bucket 0");
    KT_CHECK(aie_arena_bucket_of(4097) == 1 && aie_arena_bucket_of(64 * KIB) == 1, "4K-64K is bucket 1");
    KT_CHECK(aie_arena_bucket_of(64 * KIB + 1) == 2 && aie_arena_bucket_of(MIB) == 2, "64K-1M is bucket 2");
    KT_CHECK(aie_arena_bucket_of(MIB + 1) == 3 && aie_arena_bucket_of((size_t)1 << 40) == 3, ">1M is bucket 3");
}

static void test_alignment_and_live_counts(void) {
    aie_arena *a = make(8 * MIB);
    size_t sizes[] = {1, 63, 64, 65, 4096, 4097, 65536, 100000, MIB + 1, 3 * MIB};
    void *p[10];
    for (int i = 0; i < 10; i++) {
        p[i] = aie_arena_alloc(a, sizes[i]);
        KT_CHECK(p[i] != NULL, "alloc(%zu): %s", sizes[i], aie_last_error());
        KT_CHECK(((uintptr_t)p[i] & 63) == 0, "alloc(%zu) = %p not 64-byte aligned", sizes[i], p[i]);
        if (p[i]) memset(p[i], 0xA5, sizes[i]); /* ASan/UBSan would catch an overlap with a header */
    }
    aie_arena_stats s = stats(a);
    KT_CHECK(s.live_allocations == 10, "live %zu", s.live_allocations);
    KT_CHECK(s.bucket_live_blocks[0] == 5 && s.bucket_live_blocks[1] == 2 && s.bucket_live_blocks[2] == 1 &&
             s.bucket_live_blocks[3] == 2, "live per bucket %zu %zu %zu %zu", s.bucket_live_blocks[0],
             s.bucket_live_blocks[1], s.bucket_live_blocks[2], s.bucket_live_blocks[3]);
    size_t req = 0;
    for (int i = 0; i < 10; i++) req += sizes[i];
    KT_CHECK(s.requested == req, "requested %zu != %zu", s.requested, req);
    /* Large blocks come from the top of the arena, small ones from the bottom. */
    KT_CHECK((unsigned char *)p[9] > (unsigned char *)p[0] + 3 * MIB, "3 MiB block not at the high end");
    KT_CHECK((unsigned char *)p[8] > (unsigned char *)p[9], "large blocks should stack down from the top");
    check_invariants(a, "after mixed allocs");
    for (int i = 0; i < 10; i++) KT_CHECK(aie_arena_free(a, p[i]) == AIE_OK, "free: %s", aie_last_error());
    s = stats(a);
    KT_CHECK(s.in_use == 0 && s.live_allocations == 0 && s.requested == 0, "not empty after frees");
    KT_CHECK(s.bucket_free_blocks[3] == 1 && s.largest_free == s.reserved - AIE_ARENA_HEADER,
             "frees did not coalesce back to one block (largest %zu)", s.largest_free);
    KT_CHECK(s.fragmentation == 0.0, "fragmentation %g after full coalesce", s.fragmentation);
    KT_CHECK(s.peak_in_use > 4 * MIB, "peak %zu", s.peak_in_use);
    aie_arena_destroy(a);
}

static void test_fragmentation_and_exhaustion(void) {
    aie_arena *a = make(2 * MIB);
    enum { CAP = 256 };
    void *p[CAP];
    int n = 0;
    while (n < CAP && (p[n] = aie_arena_alloc(a, 16 * KIB)) != NULL) n++; /* fill the arena */
    KT_CHECK(n == (int)(2 * MIB / (16 * KIB + AIE_ARENA_HEADER)), "fit %d blocks of 16 KiB", n);
    for (int i = 0; i < n; i += 2) aie_arena_free(a, p[i]); /* free every other block: holes */
    aie_arena_stats s = stats(a);
    KT_CHECK(s.fragmentation > 0.9, "checkerboard should be fragmented, got %g", s.fragmentation);
    KT_CHECK(s.bucket_free_blocks[1] >= (size_t)n / 2, "holes should sit in the 4K-64K bucket (%zu)", s.bucket_free_blocks[1]);
    check_invariants(a, "checkerboard");

    /* Free space exists but no 64 KiB hole: a clear ENOMEM, counted. */
    KT_CHECK(s.largest_free < 64 * KIB, "largest hole %zu", s.largest_free);
    KT_CHECK(aie_arena_alloc(a, 64 * KIB) == NULL, "alloc into fragmented arena should fail");
    KT_CHECK(strstr(aie_last_error(), "arena exhausted: requested 65536 bytes, largest free block ") != NULL,
             "message: %s", aie_last_error());
    KT_CHECK(stats(a).failed_allocations == 2, "failed_allocations not counted (fill + this)");
    for (int i = 1; i < n; i += 2) aie_arena_free(a, p[i]);
    s = stats(a);
    KT_CHECK(s.fragmentation == 0.0 && s.in_use == 0, "did not recover: frag %g", s.fragmentation);

    void *too_big = aie_arena_alloc(a, 3 * MIB);
    KT_CHECK(too_big == NULL && strstr(aie_last_error(), "more than the 2097152 reserved"), "oversize: %s",
             aie_last_error());
    void *all = aie_arena_alloc(a, 2 * MIB - AIE_ARENA_HEADER);
    KT_CHECK(all != NULL, "the whole arena in one block: %s", aie_last_error());
    KT_CHECK(aie_arena_alloc(a, 1) == NULL, "alloc from a full arena must fail");
    aie_arena_free(a, all);
    aie_arena_destroy(a);
}

static void test_bad_frees(void) {
    aie_arena *a = make(2 * MIB);
    char *p = aie_arena_alloc(a, 1000);
    KT_CHECK(aie_arena_free(a, p + 64) == AIE_EINVAL, "interior pointer accepted");
    KT_CHECK(aie_arena_free(a, NULL) == AIE_EINVAL, "NULL accepted");
    int local;
    KT_CHECK(aie_arena_free(a, &local) == AIE_EINVAL, "foreign pointer accepted");
    KT_CHECK(strstr(aie_last_error(), "is not inside this arena") != NULL, "message: %s", aie_last_error());
    KT_CHECK(aie_arena_free(a, p) == AIE_OK, "free: %s", aie_last_error());
    KT_CHECK(aie_arena_free(a, p) == AIE_EINVAL, "double free accepted");
    KT_CHECK(strstr(aie_last_error(), "not a live allocation") != NULL, "message: %s", aie_last_error());
    check_invariants(a, "after bad frees");
    aie_arena_destroy(a);

    aie_arena *none = NULL;
    KT_CHECK(aie_arena_create(0, NULL, &none) == AIE_EINVAL && none == NULL, "size 0 accepted");
    aie_arena_options o = {.hugepages = 1, .hugepage_size = 4096, .mlock = 0, .prefault = 0};
    KT_CHECK(aie_arena_create(MIB, &o, &none) == AIE_EINVAL, "4 KiB hugepage size accepted");
    KT_CHECK(strstr(aie_last_error(), "expected 2 MiB or 1 GiB") != NULL, "message: %s", aie_last_error());
}

/* Random alloc/free sequences against a shadow list; fills detect overlaps. */
static void test_random_sequences(void) {
    aie_arena *a = make(16 * MIB);
    enum { SLOTS = 256 };
    unsigned char *p[SLOTS] = {0};
    size_t n[SLOTS] = {0};
    uint64_t s = 12345;
    for (int step = 0; step < 20000; step++) {
        int i = (int)(kt_next(&s) % SLOTS);
        if (p[i]) {
            for (size_t j = 0; j < n[i]; j += 97)
                if (p[i][j] != (unsigned char)i) {
                    KT_CHECK(0, "block %d overwritten at %zu", i, j);
                    break;
                }
            KT_CHECK(aie_arena_free(a, p[i]) == AIE_OK, "free: %s", aie_last_error());
            p[i] = NULL;
        } else {
            uint64_t r = kt_next(&s);
            size_t sz = (r & 3) == 3 ? (size_t)(r >> 8) % (2 * MIB) : (size_t)(r >> 8) % (8 * KIB);
            p[i] = aie_arena_alloc(a, sz);
            n[i] = sz;
            if (p[i]) memset(p[i], i, sz);
        }
        if (step % 1000 == 0) check_invariants(a, "random sequence");
    }
    for (int i = 0; i < SLOTS; i++)
        if (p[i]) aie_arena_free(a, p[i]);
    aie_arena_stats st = stats(a);
    KT_CHECK(st.in_use == 0 && st.fragmentation == 0.0, "not fully coalesced after random run");
    aie_arena_reset(a);
    KT_CHECK(stats(a).bucket_free_blocks[3] == 1, "reset leaves one free block");
    aie_arena_destroy(a);
}

typedef struct {
    aie_arena *a;
    int failures;
} worker_arg;

static void *worker(void *arg) {
    worker_arg *w = arg;
    void *mine[64];
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 64; i++) {
            mine[i] = aie_arena_alloc(w->a, (size_t)(64 + 97 * i));
            if (!mine[i]) w->failures++;
            else memset(mine[i], round, 64);
        }
        for (int i = 0; i < 64; i++)
            if (mine[i] && aie_arena_free(w->a, mine[i]) != AIE_OK) w->failures++;
    }
    return NULL;
}

static void test_threads(void) {
    aie_arena *a = make(8 * MIB);
    pthread_t t[4];
    worker_arg w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker_arg){a, 0};
        pthread_create(&t[i], NULL, worker, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        KT_CHECK(w[i].failures == 0, "thread %d: %d failures", i, w[i].failures);
    }
    aie_arena_stats s = stats(a);
    KT_CHECK(s.in_use == 0 && s.total_allocations == 4u * 200u * 64u, "threads: in_use %zu total %llu", s.in_use,
             (unsigned long long)s.total_allocations);
    aie_arena_destroy(a);
}

static void test_backing_report(void) {
    aie_arena *a = make(3 * MIB);
    aie_arena_stats s = stats(a);
    KT_CHECK(s.reserved == 4 * MIB, "3 MiB rounds up to 4 MiB (2 MiB multiples), got %zu", s.reserved);
    KT_CHECK(strcmp(s.backing_reason, "hugepages not requested") == 0 ||
             strncmp(s.backing_reason, "hugepages not requested;", 24) == 0, "reason: %s", s.backing_reason);
    KT_CHECK(s.backing == AIE_ARENA_THP || s.backing == AIE_ARENA_NORMAL, "backing %d", s.backing);
    KT_CHECK(s.hugepage_bytes == 0 && s.page_size == 4096, "no hugetlb bytes on normal pages");
    KT_CHECK(s.hugepage_fallback == AIE_ARENA_FALLBACK_NONE, "not asked for hugepages is no fallback (%d)",
             s.hugepage_fallback);
    KT_CHECK(((uintptr_t)aie_arena_base(a) & (2 * MIB - 1)) == 0, "base not 2 MiB aligned (THP needs it)");
    KT_CHECK(aie_arena_stats_size() == sizeof(aie_arena_stats), "stats size");
    aie_arena_destroy(a);

    /* 1 GiB pages where the kernel has no such pool (most VMs): a fallback with its class.
     * Where the pool exists but is empty, the class is "no free pages". */
    aie_arena_options o = {.hugepages = 1, .hugepage_size = (size_t)1 << 30, .mlock = 0, .prefault = 0};
    KT_CHECK(aie_arena_create(2 * MIB, &o, &a) == AIE_OK, "create: %s", aie_last_error());
    s = stats(a);
    if (s.backing != AIE_ARENA_HUGETLB_1G)
        KT_CHECK(s.hugepage_fallback == AIE_ARENA_FALLBACK_UNSUPPORTED ||
                 s.hugepage_fallback == AIE_ARENA_FALLBACK_NO_FREE_PAGES,
                 "fallback class %d for: %s", s.hugepage_fallback, s.backing_reason);
    aie_arena_destroy(a);
}

int main(void) {
    test_buckets();
    test_alignment_and_live_counts();
    test_fragmentation_and_exhaustion();
    test_bad_frees();
    test_random_sequences();
    test_threads();
    test_backing_report();
    return kt_report("test_arena");
}
