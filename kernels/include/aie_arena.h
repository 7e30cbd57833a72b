/*
 * Arena allocator: one memory reservation per arena, made at creation, from
 * which a model's weights, activations and scratch are carved at plan/load
 * time. After aie_arena_create() returns, no call makes a system call
 * (no mmap, no brk, no page fault when prefaulted): inference memory is
 * predictable, and the only lock is a mutex taken for allocation, never per
 * inference.
 *
 * Backing, in order of preference:
 *  1. hugepages requested: mmap(MAP_HUGETLB) with 2 MiB pages (x86-64 PMD
 *     size) or 1 GiB pages when asked (PUD size; needs pdpe1gb and reserved
 *     1 GiB pages). The size is rounded up to the page size. Pages come from
 *     the pool in /proc/sys/vm/nr_hugepages and are never swapped.
 *  2. otherwise (or when no hugepages are free): normal pages on a 2 MiB-
 *     aligned range with madvise(MADV_HUGEPAGE), so transparent hugepages
 *     back it where THP is "madvise" or "always". The reason for the fallback
 *     is recorded in the stats (e.g. "no free 2 MiB hugepages:
 *     HugePages_Free=0, need 128").
 *  Optional mlock(); a failure (RLIMIT_MEMLOCK, no CAP_IPC_LOCK) is recorded,
 *  not fatal. Optional prefault touches every page at creation.
 *
 * Allocation: blocks carry a 64-byte header and are 64-byte aligned and
 * sized. Free blocks sit in one of four size-class buckets by payload size:
 *     0: <= 4 KiB   1: 4 KiB - 64 KiB   2: 64 KiB - 1 MiB   3: > 1 MiB
 * A request is served best-fit from its own bucket, else from the next
 * non-empty larger bucket, splitting the block; blocks > 1 MiB are cut from
 * the high end of a free block and smaller ones from the low end, so
 * long-lived small blocks do not pin the middle of the arena. Freed blocks
 * coalesce with free neighbours at once (boundary tags).
 *
 * Fragmentation ratio: 1 - largest_free / (sum of free blocks' payloads), in
 * [0, 1): 0 when the free space is one block (any request that fits in the
 * free space succeeds), near 1 when it is scattered in small pieces; 0 when
 * nothing is free.
 */
#ifndef AIE_ARENA_H
#define AIE_ARENA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aie_arena aie_arena;

typedef enum {
    AIE_ARENA_NORMAL = 0,      /* 4 KiB pages, THP unavailable or disabled */
    AIE_ARENA_THP = 1,         /* 4 KiB pages + madvise(MADV_HUGEPAGE) accepted */
    AIE_ARENA_HUGETLB_2M = 2,  /* MAP_HUGETLB, 2 MiB pages */
    AIE_ARENA_HUGETLB_1G = 3   /* MAP_HUGETLB, 1 GiB pages */
} aie_arena_backing;

/* Why an arena that asked for hugepages got 4 KiB pages instead: a short,
 * fixed set (metrics label it), the details in backing_reason. */
typedef enum {
    AIE_ARENA_FALLBACK_NONE = 0,           /* hugepages obtained, or not requested */
    AIE_ARENA_FALLBACK_NO_FREE_PAGES = 1,  /* the pool has fewer free pages than the arena needs */
    AIE_ARENA_FALLBACK_UNSUPPORTED = 2,    /* no pool of that page size in this kernel/CPU */
    AIE_ARENA_FALLBACK_MMAP_FAILED = 3     /* enough free pages, mmap(MAP_HUGETLB) refused all the same */
} aie_arena_fallback;

#define AIE_ARENA_BUCKETS 4
#define AIE_ARENA_HEADER 64    /* bytes of header before every block's payload */
#define AIE_ARENA_REASON_LEN 192

typedef struct {
    int hugepages;          /* 1: try MAP_HUGETLB first */
    size_t hugepage_size;   /* 2 MiB (also when 0) or 1 GiB */
    int mlock;              /* 1: mlock the whole reservation */
    int prefault;           /* 1: fault every page in at creation */
} aie_arena_options;

typedef struct {
    size_t reserved;             /* bytes mapped (requested size rounded up to page_size) */
    size_t page_size;            /* 4096, 2 MiB or 1 GiB */
    size_t in_use;               /* bytes of live blocks, headers and rounding included */
    size_t requested;            /* bytes asked for by live allocations */
    size_t peak_in_use;          /* high-water mark of in_use */
    size_t free_bytes;           /* reserved - in_use (headers of free blocks included) */
    size_t largest_free;         /* payload bytes of the largest free block */
    size_t live_allocations;
    size_t bucket_free_blocks[AIE_ARENA_BUCKETS];
    size_t bucket_free_bytes[AIE_ARENA_BUCKETS];
    size_t bucket_live_blocks[AIE_ARENA_BUCKETS]; /* live allocations by request size class */
    uint64_t total_allocations;  /* successful aie_arena_alloc calls since creation */
    uint64_t failed_allocations; /* requests that found no block */
    double fragmentation;        /* see the header comment */
    size_t hugepage_bytes;       /* bytes backed by MAP_HUGETLB pages */
    int backing;                 /* aie_arena_backing */
    int mlocked;                 /* 1 when mlock succeeded */
    int prefaulted;
    int hugepages_requested;
    int hugepage_fallback;       /* aie_arena_fallback */
    char backing_reason[AIE_ARENA_REASON_LEN]; /* why this backing ("" when as asked) */
    char mlock_reason[AIE_ARENA_REASON_LEN];   /* why mlock failed or was not asked */
} aie_arena_stats;

/* Reserve `size` bytes. opts may be NULL (hugepages, 2 MiB, no mlock, prefault).
 * AIE_EINVAL for size 0 or a page size other than 2 MiB / 1 GiB; AIE_ENOMEM
 * when even normal pages cannot be mapped. */
int aie_arena_create(size_t size, const aie_arena_options *opts, aie_arena **out);
/* Unmaps everything; every pointer from the arena becomes invalid. NULL is a no-op. */
void aie_arena_destroy(aie_arena *arena);

/* A 64-byte aligned block of at least nbytes (0 is served as 1), or NULL
 * with aie_last_error() saying why (exhausted: requested size, largest free
 * block, free and reserved bytes). Thread-safe. */
void *aie_arena_alloc(aie_arena *arena, size_t nbytes);
/* AIE_EINVAL (and nothing changed) for a pointer that is not a live block
 * of this arena: a double free, a foreign or interior pointer. */
int aie_arena_free(aie_arena *arena, void *ptr);
/* Free every block at once (a plan being rebuilt); peak and counters stay. */
void aie_arena_reset(aie_arena *arena);

void *aie_arena_base(const aie_arena *arena);
size_t aie_arena_reserved(const aie_arena *arena);
int aie_arena_stats_get(aie_arena *arena, aie_arena_stats *out);
/* sizeof(aie_arena_stats): lets bindings check their mirror of the struct. */
size_t aie_arena_stats_size(void);
/* Size class (0..3) of a request of nbytes. */
int aie_arena_bucket_of(size_t nbytes);
const char *aie_arena_backing_name(int backing);

#ifdef __cplusplus
}
#endif

#endif /* AIE_ARENA_H */
