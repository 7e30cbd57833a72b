/* Arena allocator (see include/aie_arena.h for the contract). */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "aie_arena.h"
#include "aie_internal.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)
#define SMALL_PAGE ((size_t)4096)
#define MIN_BLOCK ((size_t)(2 * AIE_ARENA_HEADER)) /* header + 64 bytes of payload */

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif

enum { BLOCK_LIVE = 0xA11C0C8Du, BLOCK_FREE = 0xF4EEB10Cu };

/* Boundary-tag header in front of every block; exactly one alignment unit so
 * payloads stay 64-byte aligned. */
typedef struct block {
    size_t size;          /* whole block, header included; multiple of 64 */
    size_t prev_size;     /* size of the block just below; 0 for the first */
    size_t requested;     /* caller's nbytes while live */
    struct block *next;   /* bucket free list links while free */
    struct block *prev;
    uint32_t magic;       /* BLOCK_LIVE or BLOCK_FREE */
    uint32_t bucket;      /* free: list it is on; live: size class of the request */
    uint64_t unused[2];  /* pads the header to 64 bytes */
} block;
_Static_assert(sizeof(block) == AIE_ARENA_HEADER, "block header must be one 64-byte unit");

struct aie_arena {
    pthread_mutex_t lock;
    unsigned char *base;
    size_t reserved;
    size_t mapped;        /* what munmap must release (== reserved) */
    block *free_list[AIE_ARENA_BUCKETS];
    aie_arena_stats st;   /* counters kept up to date; free-list figures filled on demand */
};

int aie_arena_bucket_of(size_t nbytes) {
    if (nbytes <= 4 * KIB) return 0;
    if (nbytes <= 64 * KIB) return 1;
    if (nbytes <= MIB) return 2;
    return 3;
}

const char *aie_arena_backing_name(int backing) {
    switch (backing) {
    case AIE_ARENA_NORMAL: return "normal";
    case AIE_ARENA_THP: return "thp";
    case AIE_ARENA_HUGETLB_2M: return "hugetlb-2M";
    case AIE_ARENA_HUGETLB_1G: return "hugetlb-1G";
    default: return "unknown";
    }
}

static void reason(char *dst, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reason(char *dst, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, AIE_ARENA_REASON_LEN, fmt, ap);
    va_end(ap);
}

/* One integer from a sysfs/procfs file; -1 when unreadable. */
static long read_long(const char *path) {
    FILE *f = fopen(path, "r");
    long v = -1;
    if (!f) return -1;
    if (fscanf(f, "%ld", &v) != 1) v = -1;
    fclose(f);
    return v;
}

static const char *page_label(size_t page) { return page == GIB ? "1 GiB" : "2 MiB"; }

/* ---- free lists -------------------------------------------------------------- */
static block *block_at(const aie_arena *a, size_t off) { return (block *)(void *)(a->base + off); }
static size_t offset_of(const aie_arena *a, const block *b) { return (size_t)((const unsigned char *)b - a->base); }
static block *next_block(const aie_arena *a, block *b) {
    size_t end = offset_of(a, b) + b->size;
    return end < a->reserved ? block_at(a, end) : NULL;
}

static void list_push(aie_arena *a, block *b) {
    int k = aie_arena_bucket_of(b->size - AIE_ARENA_HEADER);
    b->magic = BLOCK_FREE;
    b->bucket = (uint32_t)k;
    b->prev = NULL;
    b->next = a->free_list[k];
    if (b->next) b->next->prev = b;
    a->free_list[k] = b;
}

static void list_remove(aie_arena *a, block *b) {
    if (b->prev) b->prev->next = b->next;
    else a->free_list[b->bucket] = b->next;
    if (b->next) b->next->prev = b->prev;
    b->next = b->prev = NULL;
}

static void init_blocks(aie_arena *a) {
    for (int k = 0; k < AIE_ARENA_BUCKETS; k++) a->free_list[k] = NULL;
    block *b = block_at(a, 0);
    b->size = a->reserved;
    b->prev_size = 0;
    b->requested = 0;
    list_push(a, b);
    a->st.in_use = a->st.requested = a->st.live_allocations = 0;
    memset(a->st.bucket_live_blocks, 0, sizeof a->st.bucket_live_blocks);
}

/* ---- creation -------------------------------------------------------------------- */
static void *map_hugetlb(size_t size, size_t page, int prefault, char *why, int *fallback) {
    int shift = page == GIB ? 30 : 21;
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (shift << MAP_HUGE_SHIFT);
    if (prefault) flags |= MAP_POPULATE;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p != MAP_FAILED) return p;
    int err = errno;
    char dir[96], path[128];
    snprintf(dir, sizeof dir, "/sys/kernel/mm/hugepages/hugepages-%zukB", page / KIB);
    snprintf(path, sizeof path, "%s/free_hugepages", dir);
    long free_pages = read_long(path);
    snprintf(path, sizeof path, "%s/resv_hugepages", dir);
    long resv = read_long(path);
    size_t need = size / page;
    if (free_pages < 0) {
        *fallback = AIE_ARENA_FALLBACK_UNSUPPORTED;
        reason(why, "%s hugepages not supported by this kernel/CPU (%s missing)", page_label(page), dir);
    } else if (resv > 0 && (size_t)(free_pages - resv) < need) {
        *fallback = AIE_ARENA_FALLBACK_NO_FREE_PAGES;
        reason(why, "no free %s hugepages: HugePages_Free=%ld but %ld reserved by other mappings, need %zu",
               page_label(page), free_pages, resv, need);
    } else if ((size_t)free_pages < need) {
        *fallback = AIE_ARENA_FALLBACK_NO_FREE_PAGES;
        reason(why, "no free %s hugepages: HugePages_Free=%ld, need %zu", page_label(page), free_pages, need);
    } else {
        *fallback = AIE_ARENA_FALLBACK_MMAP_FAILED;
        reason(why, "mmap(MAP_HUGETLB, %s) failed: %s (HugePages_Free=%ld, need %zu)",
               page_label(page), strerror(err), free_pages, need);
    }
    return NULL;
}

/* Normal pages on a 2 MiB-aligned range (THP can only use aligned 2 MiB
 * extents), with MADV_HUGEPAGE. Returns the backing kind or -1. */
static int map_normal(aie_arena *a, size_t size, char *why) {
    size_t span = size + 2 * MIB;
    unsigned char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return -1;
    unsigned char *aligned = (unsigned char *)AIE_ROUND_UP((uintptr_t)raw, 2 * MIB);
    if (aligned > raw) munmap(raw, (size_t)(aligned - raw));
    size_t tail = (size_t)((raw + span) - (aligned + size));
    if (tail) munmap(aligned + size, tail);
    a->base = aligned;
    a->mapped = size;

    char mode[64] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        if (!fgets(mode, sizeof mode, f)) mode[0] = '\0';
        fclose(f);
    }
    if (madvise(aligned, size, MADV_HUGEPAGE) != 0) {
        size_t n = strlen(why);
        snprintf(why + n, AIE_ARENA_REASON_LEN - n, "%smadvise(MADV_HUGEPAGE) failed: %s", n ? "; " : "",
                 strerror(errno));
        return AIE_ARENA_NORMAL;
    }
    if (strstr(mode, "[never]")) {
        size_t n = strlen(why);
        snprintf(why + n, AIE_ARENA_REASON_LEN - n, "%stransparent hugepages disabled (enabled=never)",
                 n ? "; " : "");
        return AIE_ARENA_NORMAL;
    }
    return AIE_ARENA_THP;
}

static void prefault_range(unsigned char *p, size_t size) {
#ifdef MADV_POPULATE_WRITE
    if (madvise(p, size, MADV_POPULATE_WRITE) == 0) return;
#endif
    /* Older kernels: one write per small page faults it in as a private page. */
    for (size_t off = 0; off < size; off += SMALL_PAGE) ((volatile unsigned char *)p)[off] = 0;
}

int aie_arena_create(size_t size, const aie_arena_options *opts, aie_arena **out) {
    aie_arena_options o = {.hugepages = 1, .hugepage_size = 2 * MIB, .mlock = 0, .prefault = 1};
    if (opts) o = *opts;
    if (!o.hugepage_size) o.hugepage_size = 2 * MIB;
    if (!out) return aie_fail(AIE_EINVAL, "aie_arena_create: out is NULL");
    *out = NULL;
    if (size == 0) return aie_fail(AIE_EINVAL, "aie_arena_create: size is 0 (expected > 0 bytes)");
    if (o.hugepage_size != 2 * MIB && o.hugepage_size != GIB)
        return aie_fail(AIE_EINVAL, "aie_arena_create: hugepage size %zu not supported (expected 2 MiB or 1 GiB)",
                        o.hugepage_size);
    if (size > ((size_t)1 << 46))
        return aie_fail(AIE_EINVAL, "aie_arena_create: size %zu bytes is larger than 64 TiB", size);

    aie_arena *a = calloc(1, sizeof *a);
    if (!a) return aie_fail(AIE_ENOMEM, "aie_arena_create: out of memory for the arena descriptor");
    a->st.hugepages_requested = o.hugepages;
    a->st.backing_reason[0] = '\0';
    if (o.hugepages) {
        size_t rounded = AIE_ROUND_UP(size, o.hugepage_size);
        void *p = map_hugetlb(rounded, o.hugepage_size, o.prefault, a->st.backing_reason, &a->st.hugepage_fallback);
        if (p) {
            a->base = p;
            a->mapped = a->reserved = rounded;
            a->st.page_size = o.hugepage_size;
            a->st.hugepage_bytes = rounded;
            a->st.backing = o.hugepage_size == GIB ? AIE_ARENA_HUGETLB_1G : AIE_ARENA_HUGETLB_2M;
        }
    } else {
        reason(a->st.backing_reason, "hugepages not requested");
    }
    if (!a->base) {
        size_t rounded = AIE_ROUND_UP(size, 2 * MIB);
        int kind = map_normal(a, rounded, a->st.backing_reason);
        if (kind < 0) {
            int err = errno;
            free(a);
            return aie_fail(AIE_ENOMEM, "aie_arena_create: mmap of %zu bytes failed: %s", rounded, strerror(err));
        }
        a->reserved = rounded;
        a->st.page_size = SMALL_PAGE;
        a->st.backing = kind;
        if (o.prefault) prefault_range(a->base, a->reserved);
    }
    a->st.reserved = a->reserved;
    a->st.prefaulted = o.prefault;

    if (!o.mlock) {
        reason(a->st.mlock_reason, "mlock not requested");
    } else if (mlock(a->base, a->reserved) == 0) {
        a->st.mlocked = 1;
        a->st.mlock_reason[0] = '\0';
    } else {
        int err = errno;
        struct rlimit rl;
        if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
            reason(a->st.mlock_reason, "mlock of %zu bytes failed: %s (RLIMIT_MEMLOCK=%llu bytes; raise it or grant CAP_IPC_LOCK)",
                   a->reserved, strerror(err), (unsigned long long)rl.rlim_cur);
        else
            reason(a->st.mlock_reason, "mlock of %zu bytes failed: %s", a->reserved, strerror(err));
    }

    if (pthread_mutex_init(&a->lock, NULL) != 0) {
        munmap(a->base, a->mapped);
        free(a);
        return aie_fail(AIE_EINTERNAL, "aie_arena_create: pthread_mutex_init failed");
    }
    init_blocks(a);
    *out = a;
    return AIE_OK;
}

void aie_arena_destroy(aie_arena *a) {
    if (!a) return;
    pthread_mutex_destroy(&a->lock);
    munmap(a->base, a->mapped);
    free(a);
}

/* ---- allocation ---------------------------------------------------------------------- */
static block *best_fit(block *head, size_t need) {
    block *best = NULL;
    for (block *b = head; b; b = b->next)
        if (b->size >= need && (!best || b->size < best->size)) {
            best = b;
            if (b->size == need) break;
        }
    return best;
}

static size_t largest_free_payload(const aie_arena *a) {
    size_t best = 0;
    for (int k = 0; k < AIE_ARENA_BUCKETS; k++)
        for (const block *b = a->free_list[k]; b; b = b->next)
            if (b->size - AIE_ARENA_HEADER > best) best = b->size - AIE_ARENA_HEADER;
    return best;
}

void *aie_arena_alloc(aie_arena *a, size_t nbytes) {
    if (!a) {
        aie_fail(AIE_EINVAL, "aie_arena_alloc: arena is NULL");
        return NULL;
    }
    size_t want = nbytes ? nbytes : 1;
    if (want > a->reserved) {
        pthread_mutex_lock(&a->lock);
        a->st.failed_allocations++;
        pthread_mutex_unlock(&a->lock);
        aie_fail(AIE_ENOMEM, "arena exhausted: requested %zu bytes, more than the %zu reserved", nbytes, a->reserved);
        return NULL;
    }
    size_t need = AIE_ROUND_UP(want, (size_t)AIE_ARENA_HEADER) + AIE_ARENA_HEADER;
    int k = aie_arena_bucket_of(want);

    pthread_mutex_lock(&a->lock);
    block *b = best_fit(a->free_list[k], need);
    for (int j = k + 1; !b && j < AIE_ARENA_BUCKETS; j++) b = best_fit(a->free_list[j], need);
    if (!b) {
        size_t largest = largest_free_payload(a), free_bytes = a->reserved - a->st.in_use;
        a->st.failed_allocations++;
        pthread_mutex_unlock(&a->lock);
        aie_fail(AIE_ENOMEM, "arena exhausted: requested %zu bytes, largest free block %zu bytes, "
                 "%zu of %zu reserved bytes free", nbytes, largest, free_bytes, a->reserved);
        return NULL;
    }
    list_remove(a, b);
    if (b->size - need >= MIN_BLOCK) {
        block *low, *high; /* the two halves, in address order */
        if (k == 3) {      /* large: take the high end, the low part stays free */
            low = b;
            high = block_at(a, offset_of(a, b) + b->size - need);
            b = high;
        } else {
            low = b;
            high = block_at(a, offset_of(a, b) + need);
        }
        size_t total = low->size;
        block *after = next_block(a, low); /* neighbour above the whole block, before the cut */
        low->size = (b == low) ? need : total - need;
        high->size = total - low->size;
        high->prev_size = low->size;
        if (after) after->prev_size = high->size;
        list_push(a, b == low ? high : low);
    }
    b->magic = BLOCK_LIVE;
    b->bucket = (uint32_t)k;
    b->requested = nbytes;
    b->next = b->prev = NULL;
    a->st.in_use += b->size;
    a->st.requested += nbytes;
    a->st.live_allocations++;
    a->st.bucket_live_blocks[k]++;
    a->st.total_allocations++;
    if (a->st.in_use > a->st.peak_in_use) a->st.peak_in_use = a->st.in_use;
    pthread_mutex_unlock(&a->lock);
    return (unsigned char *)b + AIE_ARENA_HEADER;
}

int aie_arena_free(aie_arena *a, void *ptr) {
    if (!a) return aie_fail(AIE_EINVAL, "aie_arena_free: arena is NULL");
    unsigned char *p = ptr;
    if (!p || p < a->base + AIE_ARENA_HEADER || p >= a->base + a->reserved ||
        (size_t)(p - a->base) % AIE_ARENA_HEADER != 0)
        return aie_fail(AIE_EINVAL, "aie_arena_free: %p is not inside this arena [%p, +%zu) on a block boundary",
                        ptr, (void *)a->base, a->reserved);
    pthread_mutex_lock(&a->lock);
    block *b = (block *)(void *)(p - AIE_ARENA_HEADER);
    if (b->magic != BLOCK_LIVE) {
        pthread_mutex_unlock(&a->lock);
        return aie_fail(AIE_EINVAL, "aie_arena_free: %p (offset %zu) is not a live allocation "
                        "(double free, or an interior pointer)", ptr, (size_t)(p - a->base));
    }
    a->st.in_use -= b->size;
    a->st.requested -= b->requested;
    a->st.live_allocations--;
    a->st.bucket_live_blocks[b->bucket]--;
    b->requested = 0;

    block *nb = next_block(a, b);
    if (nb && nb->magic == BLOCK_FREE) {
        list_remove(a, nb);
        nb->magic = 0;
        b->size += nb->size;
    }
    if (b->prev_size) {
        block *pb = block_at(a, offset_of(a, b) - b->prev_size);
        if (pb->magic == BLOCK_FREE) {
            list_remove(a, pb);
            b->magic = 0;
            pb->size += b->size;
            b = pb;
        }
    }
    nb = next_block(a, b);
    if (nb) nb->prev_size = b->size;
    list_push(a, b);
    pthread_mutex_unlock(&a->lock);
    return AIE_OK;
}

void aie_arena_reset(aie_arena *a) {
    if (!a) return;
    pthread_mutex_lock(&a->lock);
    init_blocks(a);
    pthread_mutex_unlock(&a->lock);
}

void *aie_arena_base(const aie_arena *a) { return a ? a->base : NULL; }
size_t aie_arena_reserved(const aie_arena *a) { return a ? a->reserved : 0; }
size_t aie_arena_stats_size(void) { return sizeof(aie_arena_stats); }

int aie_arena_stats_get(aie_arena *a, aie_arena_stats *out) {
    if (!a || !out) return aie_fail(AIE_EINVAL, "aie_arena_stats_get: NULL argument");
    pthread_mutex_lock(&a->lock);
    *out = a->st;
    out->largest_free = 0;
    for (int k = 0; k < AIE_ARENA_BUCKETS; k++) {
        out->bucket_free_blocks[k] = out->bucket_free_bytes[k] = 0;
        for (const block *b = a->free_list[k]; b; b = b->next) {
            out->bucket_free_blocks[k]++;
            out->bucket_free_bytes[k] += b->size - AIE_ARENA_HEADER;
            if (b->size - AIE_ARENA_HEADER > out->largest_free) out->largest_free = b->size - AIE_ARENA_HEADER;
        }
    }
    out->free_bytes = a->reserved - a->st.in_use;
    size_t free_payload = 0;
    for (int k = 0; k < AIE_ARENA_BUCKETS; k++) free_payload += out->bucket_free_bytes[k];
    out->fragmentation = free_payload ? 1.0 - (double)out->largest_free / (double)free_payload : 0.0;
    pthread_mutex_unlock(&a->lock);
    return AIE_OK;
}
