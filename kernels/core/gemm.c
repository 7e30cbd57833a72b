/*
 * SGEMM driver (contract in include/aie_gemm.h, design in gemm_internal.h):
 * argument checks, path choice, cache blocking, threading, epilogue and the
 * weight pre-packing API. The arithmetic lives in the per-ISA kernels.
 *
 * Paths:
 *  - small: M <= GEMM_SMALL_M (GEMV and the like): no packing; B rows (or,
 *    for B stored N x K, dot products along K) are streamed once.
 *  - blocked: BLIS loops jc (NC) -> pc (KC) -> ic (MC) -> jr (NR) -> ir (MR)
 *    around the packed micro-kernel.
 *    On one thread the classic order: per KC slice, B packed once and swept
 *    over every MC block. On several, B is packed whole-K for a block of
 *    columns first (unless pre-packed), by parallel tasks into one shared
 *    buffer; then C tiles (MC rows x a column range) run as tasks, each
 *    packing its own A block into its worker's slot and running all of K --
 *    or, when several tiles share rows and A is small (GEMM_A_SHARED_BYTES),
 *    reading all of A packed once beforehand by parallel tasks.
 *    Either way the epilogue is fused into the micro-kernel's store on the
 *    last K slice.
 * Threading: tasks are handed out dynamically (aie_parallel_dynamic), ~4 per
 * thread, so a descheduled or slow-to-wake worker does not hold the others
 * up. Exception: a small-path call whose flops are too few to thread but
 * whose B is large (a batch-1 dense layer) is threaded by B's bytes, one
 * column range per thread. Every element's arithmetic (K order, KC split,
 * epilogue) depends only on the shape and the ISA, never on the tiling or
 * the thread, so results are bitwise equal for any thread count.
 */
#include <string.h>

#include "gemm_internal.h"
#include "kernel_table.h"

/* Below ~0.5 MFLOP per thread the wake-up of a pool worker (a few us) costs
 * more than the work it would take over. */
#define GEMM_MIN_FLOPS_PER_THREAD (1 << 19)
/* The small path streams B once for few flops per byte: its time is B's
 * trip from L3/DRAM, not arithmetic. 256 KiB (~10 us from L3 on one core)
 * per thread outweighs a wake-up. Such a call is cut into one column range
 * per thread: the caller, first to claim, mostly takes the first, so on an
 * idle machine each core streams the same columns every call and a batch-1
 * model's weights (the MLP's 2.7 MB) stay split across the cores' L2s
 * instead of all crossing one; the ranges are still claimed dynamically, so a descheduled worker's
 * share falls to the caller. Measured on the MLP at 2 threads under load:
 * best-decile call 155 -> 138 us, median unchanged; a static split was
 * faster at best (128) but slower at the median (191 -> 230). */
#define GEMM_SMALL_MIN_B_BYTES_PER_THREAD (256u << 10)
/* Column ranges of the small path are cut at multiples of this (a full
 * m = 1 tile of the AVX-512 kernel is 128 columns). */
#define GEMM_SMALL_SPLIT_UNIT 128
/* The streaming small-M kernel (see gemm_kernels_body.h) replaces the
 * register-tile one for m <= the ISA's stream_max_m when B is larger than
 * this: then B comes from L3 or DRAM and long sequential runs matter more
 * than accumulator traffic. Measured at 1 and 2 rows (1 x 4096 x K:
 * +15-35%, AVX-512); the rows above that, per ISA: see GEMM_STREAM_MAX_M. */
#define GEMM_STREAM_MIN_BYTES (1u << 20)
/* Column ranges of the streaming kernel are at least one 4 KiB page wide. */
#define GEMM_STREAM_SPLIT_UNIT 1024
/* On several threads a C tile packs the A rows it needs itself, so when the
 * tiles of one row range are cut into several column ranges (M within one or
 * two MC blocks: bert's 128-row GEMMs, a late conv layer's 49 pixels) A is
 * packed once per column range. Up to this size the driver instead packs all
 * of A once, in parallel, into the workspace before the tiles run: measured
 * on Zen 3 at 128 x 256 x 1024 on 2 threads, the repeated packing was 16% of
 * the call's cycles (the micro-kernel 52%). */
#define GEMM_A_SHARED_BYTES (2u << 20)
/* ... and only when the packing it saves, (times A would be packed - 1) x
 * M x K values at ~0.5 ns each, clearly outweighs the extra hand-out and
 * wait of the packing step (a few us with the workers awake): 16 Ki values. */
#define GEMM_A_SHARED_MIN_SAVED (1 << 14)

#define PACKED_MAGIC "AIEPKB1"
typedef struct {
    char magic[8];
    int32_t isa, nr;
    int64_t K, N;
    uint8_t reserved[32];
} packed_b_header;
_Static_assert(sizeof(packed_b_header) == 64, "the packed data starts one cache line in");

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Split n into the fewest pieces of at most `block`, of near-equal size
 * rounded up to `unit` (so K = 784 runs as 4 x 196, not 3 x 256 + 16). */
static int64_t even_block(int64_t n, int64_t block, int64_t unit) {
    if (n <= 0) return unit;
    int64_t pieces = (n + block - 1) / block;
    return AIE_ROUND_UP((n + pieces - 1) / pieces, unit);
}

typedef struct {
    int64_t mc, kc, nc; /* nc: columns of B packed (whole K) at a time */
} gemm_blocking;

static gemm_blocking blocking_for(const gemm_kernels *kt, int64_t M, int64_t N, int64_t K) {
    int64_t nc_cap = (int64_t)(GEMM_B_BLOCK_BYTES / ((size_t)max64(K, 1) * sizeof(float))) / kt->nr * kt->nr;
    nc_cap = max64(kt->nr, min64(nc_cap, GEMM_NC));
    gemm_blocking b = {even_block(M, GEMM_MC, kt->mr), even_block(K, GEMM_KC, 1), even_block(N, nc_cap, kt->nr)};
    return b;
}

static size_t a_block_bytes(const gemm_blocking *b) {
    return AIE_ROUND_UP((size_t)b->mc * (size_t)b->kc * sizeof(float), AIE_ALIGN);
}

static size_t b_block_bytes(const gemm_blocking *b, int64_t K) {
    return AIE_ROUND_UP((size_t)b->nc * (size_t)K * sizeof(float), AIE_ALIGN);
}

/* All of A packed (every KC slice, rows rounded up to whole MR panels), or 0
 * when it exceeds GEMM_A_SHARED_BYTES or one thread runs (nothing to share). */
static size_t a_shared_bytes(const gemm_kernels *kt, int64_t M, int64_t K, int nthreads) {
    size_t n = (size_t)AIE_ROUND_UP(M, kt->mr) * (size_t)K * sizeof(float);
    return nthreads > 1 && n <= GEMM_A_SHARED_BYTES ? AIE_ROUND_UP(n, AIE_ALIGN) : 0;
}

/* Workspace: the shared packed B block (unless B is pre-packed), then one
 * packed A block per participating thread or all of A packed, the larger. */
static size_t ws_bytes(int64_t M, int64_t N, int64_t K, int nthreads, int pack_b) {
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    if (nthreads <= 0) nthreads = aie_threads_get();
    /* The largest over every compiled ISA, so a size queried before an
     * aie_set_isa() still fits after it. */
    size_t need = 0;
    for (int isa = 0; isa < AIE_ISA_COUNT; isa++) {
        const gemm_kernels *kt = aie_gemm_kernels_for((aie_isa)isa);
        gemm_blocking b = blocking_for(kt, M, N, K);
        size_t a = a_block_bytes(&b) * (size_t)nthreads, a_shared = a_shared_bytes(kt, M, K, nthreads);
        size_t t = (a > a_shared ? a : a_shared) + (pack_b ? b_block_bytes(&b, K) : 0);
        if (t > need) need = t;
    }
    return need + AIE_ALIGN;
}

size_t aie_sgemm_workspace_size(int64_t M, int64_t N, int64_t K, int nthreads) {
    return ws_bytes(M, N, K, nthreads, 1);
}

size_t aie_sgemm_packed_workspace_size(int64_t M, int64_t N, int64_t K, int nthreads) {
    return ws_bytes(M, N, K, nthreads, 0);
}

/* ---- argument checks ---------------------------------------------------- */

int aie_gemm_check_epilogue(const char *fn, const aie_epilogue *ep) {
    if (!ep) return AIE_OK;
    if (ep->bias_kind < AIE_BIAS_NONE || ep->bias_kind > AIE_BIAS_ROW)
        return aie_fail(AIE_EINVAL, "%s: epilogue bias_kind=%d is not an aie_bias_kind (0 none, 1 col, 2 row)", fn,
                        ep->bias_kind);
    if (ep->bias_kind != AIE_BIAS_NONE && !ep->bias)
        return aie_fail(AIE_EINVAL, "%s: epilogue bias_kind=%s but bias is NULL", fn,
                        ep->bias_kind == AIE_BIAS_COL ? "col" : "row");
    if (ep->act < AIE_U_IDENTITY || ep->act > AIE_U_TANH)
        return aie_fail(AIE_EINVAL, "%s: epilogue act=%d is not an epilogue activation (0..%d)", fn, ep->act,
                        AIE_U_TANH);
    return AIE_OK;
}

int aie_gemm_check_matrix(const char *fn, const char *name, const void *p, int64_t rows, int64_t cols, int64_t ld,
                          int trans) {
    /* rows x cols is the stored matrix; ld is its row stride */
    if (rows > 0 && cols > 0 && !p) return aie_fail(AIE_EINVAL, "%s: %s is NULL for a %lldx%lld operand", fn, name,
                                                    (long long)rows, (long long)cols);
    if (ld < max64(1, cols))
        return aie_fail(AIE_EINVAL, "%s: ld%s=%lld is less than the row length %lld of the stored %s%s", fn, name,
                        (long long)ld, (long long)max64(1, cols), name, trans ? " (transposed)" : "");
    return AIE_OK;
}

static int check_common(const char *fn, int64_t M, int64_t N, int64_t K, int trans_a, const float *A, int64_t lda,
                        float *C, int64_t ldc, const aie_epilogue *ep) {
    if (M < 0 || N < 0 || K < 0)
        return aie_fail(AIE_EINVAL, "%s: dimensions must be >= 0, got M=%lld N=%lld K=%lld", fn, (long long)M,
                        (long long)N, (long long)K);
    int rc = aie_gemm_check_matrix(fn, "A", A, trans_a ? K : M, trans_a ? M : K, lda, trans_a);
    if (rc == AIE_OK) rc = aie_gemm_check_matrix(fn, "C", C, M, N, ldc, 0);
    if (rc == AIE_OK) rc = aie_gemm_check_epilogue(fn, ep);
    return rc;
}

/* ---- the job shared by all tasks of one call ---------------------------- */

typedef struct {
    const gemm_kernels *kt;
    int trans_a, trans_b, small;
    int64_t M, N, K;
    float alpha, beta;
    const float *A;
    int64_t lda;
    const float *B; /* unpacked B, or NULL when bpacked is set */
    int64_t ldb;
    const float *bpacked; /* K x nr panels of a pre-packed B */
    gemm_pack_a_fn pack_a; /* implicit A (A is NULL): packs A blocks itself */
    const void *a_src;
    float *C;
    int64_t ldc;
    const aie_epilogue *ep; /* NULL when there is nothing to apply */
    gemm_blocking blk;
    float *bshared;  /* this column block's packed B (K x nr panels), shared */
    char *a_slots;   /* one packed A block per worker */
    size_t a_bytes;
    /* All of A packed once (NULL: each tile packs its own): the KC slice at
     * pc starts at + pc * a_rows, its rows from i0 (a multiple of mr) at
     * + i0 * kc within it. */
    float *a_shared;
    int64_t a_rows;      /* M rounded up to whole MR panels */
    int64_t a_pack_rows; /* rows per packing task of a_shared */
    int64_t jc, nc;  /* the current column block */
    int64_t pc0, pc1; /* the K range tile tasks run (all of K, or one KC slice) */
    const float *bblock; /* packed B of the block: panel p at + p * b_stride, row k at + (k - b_k0) * nr */
    int64_t b_stride, b_k0;
    /* C tiles of the current block: tile_m rows x tile_n columns, row-major grid */
    int64_t tile_m, tile_n, tiles_m, tiles_n;
    int64_t pack_panels; /* B panels per packing task */
} gemm_job;

static void apply_epilogue(const gemm_job *j, float *c, int64_t m, int64_t n, int64_t row0, int64_t col0) {
    const aie_epilogue *ep = j->ep;
    j->kt->epilogue(c, j->ldc, m, n, ep->bias_kind == AIE_BIAS_COL ? ep->bias + col0 : NULL,
                    ep->bias_kind == AIE_BIAS_ROW ? ep->bias + row0 : NULL, ep->act, ep->p0, ep->p1);
}

static int use_stream(const gemm_job *j) {
    return !j->bpacked && !j->trans_b && j->M <= j->kt->stream_max_m &&
           (double)j->K * (double)j->N * sizeof(float) >= (double)GEMM_STREAM_MIN_BYTES;
}

static void run_small(const gemm_job *j, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    const gemm_kernels *kt = j->kt;
    for (int64_t i0 = m0; i0 < m1; i0 += GEMM_SMALL_M) {
        int64_t m = min64(GEMM_SMALL_M, m1 - i0);
        const float *a = j->trans_a ? j->A + i0 : j->A + i0 * j->lda;
        float *c = j->C + i0 * j->ldc;
        if (j->bpacked) { /* n0 is a multiple of nr: a panel boundary */
            kt->small_packed(m, n1 - n0, j->K, j->alpha, j->trans_a, a, j->lda,
                             j->bpacked + (n0 / kt->nr) * j->K * kt->nr, j->beta, c + n0, j->ldc);
        } else if (!j->trans_b) {
            (use_stream(j) ? kt->small_stream : kt->small)(m, n0, n1, j->K, j->alpha, j->trans_a, a, j->lda, j->B,
                                                           j->ldb, j->beta, c, j->ldc);
        } else {
            kt->small_bt(m, n0, n1, j->K, j->alpha, a, j->lda, j->B, j->ldb, j->beta, c, j->ldc);
        }
        if (j->ep) apply_epilogue(j, c + n0, m, n1 - n0, i0, n0);
    }
}

/* Small path: task t is columns [t*tile_n, (t+1)*tile_n) of every row. */
static void small_task(void *ctx, int64_t t, int worker) {
    const gemm_job *j = ctx;
    (void)worker;
    int64_t n0 = t * j->tile_n;
    run_small(j, 0, j->M, n0, min64(j->N, n0 + j->tile_n));
}

/* Pack B panels [t*pack_panels, ...) of the current column block, rows
 * [b_k0, pc1) of K, into bshared with panel stride b_stride. */
static void pack_b_task(void *ctx, int64_t t, int worker) {
    const gemm_job *j = ctx;
    const int nr = j->kt->nr;
    (void)worker;
    int64_t p0 = t * j->pack_panels * nr, cols = min64(j->pack_panels * nr, j->nc - p0);
    if (cols > 0)
        aie_gemm_pack_b(j->trans_b, j->B, j->ldb, j->b_k0, j->pc1 - j->b_k0, j->jc + p0, cols, nr,
                        j->bshared + (p0 / nr) * j->b_stride, j->b_stride);
}

/* Pack task t of a_shared: KC slice t / row groups, row group t % row groups. */
static void pack_a_task(void *ctx, int64_t t, int worker) {
    const gemm_job *j = ctx;
    (void)worker;
    int64_t groups = (j->M + j->a_pack_rows - 1) / j->a_pack_rows;
    int64_t pc = (t / groups) * j->blk.kc, kc = min64(j->blk.kc, j->K - pc);
    int64_t i0 = (t % groups) * j->a_pack_rows, mc = min64(j->a_pack_rows, j->M - i0);
    float *dst = j->a_shared + pc * j->a_rows + i0 * kc;
    if (j->pack_a) j->pack_a(j->a_src, i0, mc, pc, kc, j->kt->mr, dst);
    else j->kt->pack_a(j->trans_a, j->A, j->lda, i0, mc, pc, kc, j->kt->mr, dst);
}

/* One C tile: rows [i0, i0+mc) x block columns [n0, n1), K slices [pc0, pc1).
 * The arithmetic of every element (KC split, order, epilogue) is the same
 * whichever tile or thread computes it. */
static void tile_task(void *ctx, int64_t t, int worker) {
    const gemm_job *j = ctx;
    const gemm_kernels *kt = j->kt;
    const int mr = kt->mr, nr = kt->nr;
    int64_t i0 = (t / j->tiles_n) * j->tile_m, mc = min64(j->tile_m, j->M - i0);
    int64_t n0 = (t % j->tiles_n) * j->tile_n, n1 = min64(j->nc, n0 + j->tile_n);
    if (mc <= 0 || n0 >= n1) return;
    float *pa = (float *)(j->a_slots + (size_t)worker * j->a_bytes);
    const aie_epilogue *ep = j->ep;
    gemm_tile_ep tep = {NULL, NULL, ep ? ep->act : AIE_U_IDENTITY, ep ? ep->p0 : 0.f, ep ? ep->p1 : 0.f};
    for (int64_t pc = j->pc0; pc < j->pc1; pc += j->blk.kc) {
        int64_t kc = min64(j->blk.kc, j->K - pc);
        /* beta applies once, on the first K slice; later slices accumulate */
        float beta = pc == 0 ? j->beta : 1.0f;
        int last = pc + kc >= j->K;
        if (j->a_shared) pa = j->a_shared + pc * j->a_rows + i0 * kc;
        else if (j->pack_a) j->pack_a(j->a_src, i0, mc, pc, kc, mr, pa);
        else j->kt->pack_a(j->trans_a, j->A, j->lda, i0, mc, pc, kc, mr, pa);
        for (int64_t jr = n0; jr < n1; jr += nr) {
            int n = (int)min64(nr, n1 - jr);
            const float *bpanel = j->bblock + (jr / nr) * j->b_stride + (pc - j->b_k0) * nr;
            int64_t col = j->jc + jr;
            for (int64_t ir = 0; ir < mc; ir += mr) {
                int m = (int)min64(mr, mc - ir);
                float *c = j->C + (i0 + ir) * j->ldc + col;
                const gemm_tile_ep *e = NULL;
                if (last && ep) {
                    tep.bias_col = ep->bias_kind == AIE_BIAS_COL ? ep->bias + col : NULL;
                    tep.bias_row = ep->bias_kind == AIE_BIAS_ROW ? ep->bias + i0 + ir : NULL;
                    e = &tep;
                }
                kt->ukernel(kc, pa + ir * kc, bpanel, c, j->ldc, m, n, j->alpha, beta, e);
            }
        }
    }
}

/* Cut an M x N block of C into tiles: one per MC block (and the whole block
 * wide) on one thread; with more threads, ~4 tiles per thread so that the
 * dynamic hand-out can balance a slow or descheduled worker, but never
 * narrower than 4 micro-panels (A is re-packed once per tile column) nor
 * shorter than one micro-tile. */
void aie_gemm_plan_tiles(int64_t M, int64_t N, int64_t mc, int64_t mr, int64_t nr, int nt, int64_t *tile_m,
                         int64_t *tile_n) {
    int64_t mblocks = (M + mc - 1) / mc, panels = (N + nr - 1) / nr;
    int64_t cols = 1, rows = mblocks;
    if (nt > 1) {
        int64_t want = 4 * (int64_t)nt;
        cols = min64((want + mblocks - 1) / mblocks, max64(1, panels / 4));
        rows = min64(max64(mblocks, (want + cols - 1) / cols), (M + mr - 1) / mr);
    }
    *tile_n = (panels + cols - 1) / cols * nr;
    *tile_m = AIE_ROUND_UP((M + rows - 1) / rows, mr);
}

static void plan_tiles(gemm_job *j, int nt) {
    aie_gemm_plan_tiles(j->M, j->nc, j->blk.mc, j->kt->mr, j->kt->nr, nt, &j->tile_m, &j->tile_n);
    j->tiles_n = (j->nc + j->tile_n - 1) / j->tile_n;
    j->tiles_m = (j->M + j->tile_m - 1) / j->tile_m;
}

int aie_workspace_layout(const char *fn, const char *size_fn, void *workspace, size_t workspace_size, size_t shared,
                         size_t slot, int64_t M, int64_t N, int64_t K, char **base, int *nt) {
    char *b = workspace ? (char *)AIE_ROUND_UP((uintptr_t)workspace, AIE_ALIGN) : NULL;
    size_t usable = b && (size_t)(b - (char *)workspace) <= workspace_size
                        ? workspace_size - (size_t)(b - (char *)workspace) : 0;
    if (usable < shared + slot)
        return aie_fail(AIE_ENOMEM,
                        "%s: workspace too small for M=%lld N=%lld K=%lld: need %zu bytes for one thread "
                        "(%s(M, N, K, nthreads) gives the size), got %zu",
                        fn, (long long)M, (long long)N, (long long)K, shared + slot + AIE_ALIGN, size_fn,
                        workspace_size);
    if (slot && (size_t)*nt > (usable - shared) / slot) *nt = (int)((usable - shared) / slot);
    *base = b;
    return AIE_OK;
}

/* C = beta * C, then the epilogue: what is left when K == 0 or alpha == 0
 * (BLAS semantics: A and B are then not read). */
static void scale_only(const gemm_job *j) {
    for (int64_t i = 0; i < j->M; i++) {
        float *row = j->C + i * j->ldc;
        if (j->beta == 0.0f) memset(row, 0, (size_t)j->N * sizeof(float));
        else if (j->beta != 1.0f)
            for (int64_t x = 0; x < j->N; x++) row[x] *= j->beta;
    }
    if (j->ep) apply_epilogue(j, j->C, j->M, j->N, 0, 0);
}

static int has_work(const aie_epilogue *ep) {
    return ep && (ep->bias_kind != AIE_BIAS_NONE || ep->act != AIE_U_IDENTITY);
}

/* Shared by aie_sgemm and aie_sgemm_packed once the arguments are valid. */
static int run_job(const char *fn, gemm_job *j, void *workspace, size_t workspace_size, int nthreads) {
    if (j->M == 0 || j->N == 0) return AIE_OK;
    if (j->K == 0 || j->alpha == 0.0f) {
        scale_only(j);
        return AIE_OK;
    }
    int nt = nthreads <= 0 ? aie_threads_get() : nthreads;
    double flops = 2.0 * (double)j->M * (double)j->N * (double)j->K;
    if (flops / GEMM_MIN_FLOPS_PER_THREAD < nt) nt = (int)max64(1, (int64_t)(flops / GEMM_MIN_FLOPS_PER_THREAD));

    j->small = j->M <= GEMM_SMALL_M && !j->pack_a && (j->bpacked || !j->trans_b || !j->trans_a);
    if (j->small) {
        int64_t unit = j->bpacked      ? 4 * (int64_t)j->kt->nr
                       : use_stream(j) ? GEMM_STREAM_SPLIT_UNIT
                                       : GEMM_SMALL_SPLIT_UNIT;
        /* ~4 column chunks per thread, whole vectors of the widest m = 1 tile */
        int64_t pieces = nt > 1 ? 4 * (int64_t)nt : 1;
        int want = nthreads <= 0 ? aie_threads_get() : nthreads;
        int64_t by_bytes = (int64_t)((double)j->K * (double)j->N * sizeof(float) / GEMM_SMALL_MIN_B_BYTES_PER_THREAD);
        if (by_bytes > nt && nt < want) { /* B-bound: one column range per thread (see above) */
            nt = (int)min64(min64(by_bytes, want), (j->N + unit - 1) / unit);
            pieces = nt;
        }
        j->tile_n = AIE_ROUND_UP((j->N + pieces - 1) / pieces, unit);
        aie_parallel_dynamic((j->N + j->tile_n - 1) / j->tile_n, nt, small_task, j);
        return AIE_OK;
    }
    j->blk = blocking_for(j->kt, j->M, j->N, j->K);
    if (j->bpacked) j->blk.nc = AIE_ROUND_UP(j->N, j->kt->nr); /* B is packed whole already */
    j->a_bytes = a_block_bytes(&j->blk);
    size_t b_bytes = j->bpacked ? 0 : b_block_bytes(&j->blk, j->K);
    const int64_t nr = j->kt->nr;
    /* Share one packing of A when tiles would repeat it (several column
     * ranges of one row range, or several column blocks) and the caller's
     * workspace has the room (one sized for an older layout may not). */
    size_t a_shared = a_shared_bytes(j->kt, j->M, j->K, nt);
    if (a_shared) {
        j->nc = min64(j->blk.nc, j->N);
        plan_tiles(j, nt);
        double packs = (double)j->tiles_n * (double)((j->N + j->blk.nc - 1) / j->blk.nc);
        if ((packs - 1.0) * (double)j->M * (double)j->K < GEMM_A_SHARED_MIN_SAVED ||
            workspace_size < b_bytes + a_shared + AIE_ALIGN)
            a_shared = 0;
    }
    char *base;
    int rc = aie_workspace_layout(fn, "aie_sgemm_workspace_size", workspace, workspace_size, b_bytes + a_shared,
                                  a_shared ? 0 : j->a_bytes, j->M, j->N, j->K, &base, &nt);
    if (rc != AIE_OK) return rc;
    j->bshared = (float *)base;
    j->a_slots = base + b_bytes;
    if (a_shared) {
        j->a_shared = (float *)(base + b_bytes);
        j->a_rows = AIE_ROUND_UP(j->M, j->kt->mr);
        /* ~2 row groups per thread in every KC slice */
        j->a_pack_rows = AIE_ROUND_UP((j->M + 2 * nt - 1) / (2 * nt), j->kt->mr);
        int64_t slices = (j->K + j->blk.kc - 1) / j->blk.kc;
        aie_parallel_dynamic(slices * ((j->M + j->a_pack_rows - 1) / j->a_pack_rows), nt, pack_a_task, j);
    }
    /* One thread: the classic order, one KC slice of B packed at a time and
     * swept over every row block while it is in L2. Several: B packed whole
     * K up front, so tile tasks need no barrier per KC slice. */
    const int64_t kstep = nt > 1 ? j->K : j->blk.kc;
    if (nt == 1 && !j->bpacked) { /* a KC slice of B needs less room: widen the block to fill it */
        int64_t wide = (j->blk.nc * j->K / j->blk.kc) / nr * nr;
        j->blk.nc = even_block(j->N, min64(wide, GEMM_NC), nr);
    }
    for (j->jc = 0; j->jc < j->N; j->jc += j->blk.nc) {
        j->nc = min64(j->blk.nc, j->N - j->jc);
        plan_tiles(j, nt);
        for (j->pc0 = 0; j->pc0 < j->K; j->pc0 += kstep) {
            j->pc1 = min64(j->K, j->pc0 + kstep);
            if (j->bpacked) {
                j->bblock = j->bpacked + (j->jc / nr) * j->K * nr;
                j->b_stride = j->K * nr;
                j->b_k0 = 0;
            } else {
                int64_t panels = (j->nc + nr - 1) / nr;
                int64_t pieces = min64(panels, nt > 1 ? 4 * (int64_t)nt : 1);
                j->bblock = j->bshared;
                j->b_stride = (j->pc1 - j->pc0) * nr;
                j->b_k0 = j->pc0;
                j->pack_panels = (panels + pieces - 1) / pieces;
                aie_parallel_dynamic((panels + j->pack_panels - 1) / j->pack_panels, nt, pack_b_task, j);
            }
            aie_parallel_dynamic(j->tiles_m * j->tiles_n, nt, tile_task, j);
        }
    }
    return AIE_OK;
}

int aie_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
              const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const aie_epilogue *ep,
              void *workspace, size_t workspace_size, int nthreads) {
    const char *fn = "aie_sgemm";
    int rc = aie_ensure_init();
    if (rc != AIE_OK) return aie_init();
    rc = check_common(fn, M, N, K, trans_a, A, lda, C, ldc, ep);
    if (rc == AIE_OK) rc = aie_gemm_check_matrix(fn, "B", B, trans_b ? N : K, trans_b ? K : N, ldb, trans_b);
    if (rc != AIE_OK) return rc;
    gemm_job j = {
        .kt = aie_kernels()->sgemm,
        .trans_a = trans_a != 0,
        .trans_b = trans_b != 0,
        .M = M, .N = N, .K = K,
        .alpha = alpha, .beta = beta,
        .A = A, .lda = lda, .B = B, .ldb = ldb,
        .C = C, .ldc = ldc,
        .ep = has_work(ep) ? ep : NULL,
    };
    return run_job(fn, &j, workspace, workspace_size, nthreads);
}

/* ---- pre-packed B --------------------------------------------------------- */

size_t aie_sgemm_packed_b_size(int64_t K, int64_t N) {
    if (K < 0 || N < 0) return 0;
    int nr = 0; /* the widest NR of any ISA: a buffer sized now fits any path */
    for (int isa = 0; isa < AIE_ISA_COUNT; isa++) {
        int r = aie_gemm_kernels_for((aie_isa)isa)->nr;
        if (r > nr) nr = r;
    }
    return sizeof(packed_b_header) + (size_t)K * (size_t)AIE_ROUND_UP(N, nr) * sizeof(float);
}

int aie_gemm_check_pack_b(const char *fn, const char *size_fn, int trans_b, int64_t K, int64_t N, const void *B,
                          int64_t ldb, const void *packed, size_t packed_size, size_t need) {
    int rc = aie_ensure_init();
    if (rc != AIE_OK) return aie_init();
    if (K < 0 || N < 0)
        return aie_fail(AIE_EINVAL, "%s: dimensions must be >= 0, got K=%lld N=%lld", fn, (long long)K, (long long)N);
    rc = aie_gemm_check_matrix(fn, "B", B, trans_b ? N : K, trans_b ? K : N, ldb, trans_b);
    if (rc != AIE_OK) return rc;
    if (!packed) return aie_fail(AIE_EINVAL, "%s: packed buffer is NULL", fn);
    /* every packed layout (fp32, bf16, s8) is read in 4-byte words */
    if ((uintptr_t)packed % 4)
        return aie_fail(AIE_EINVAL, "%s: packed buffer %p is not 4-byte aligned", fn, packed);
    if (packed_size < need)
        return aie_fail(AIE_ENOMEM, "%s: packed buffer too small for K=%lld N=%lld: need %zu bytes (%s), got %zu",
                        fn, (long long)K, (long long)N, need, size_fn, packed_size);
    return AIE_OK;
}

int aie_sgemm_pack_b(int trans_b, int64_t K, int64_t N, const float *B, int64_t ldb, void *packed,
                     size_t packed_size) {
    int rc = aie_gemm_check_pack_b("aie_sgemm_pack_b", "aie_sgemm_packed_b_size", trans_b, K, N, B, ldb, packed,
                                   packed_size, aie_sgemm_packed_b_size(K, N));
    if (rc != AIE_OK) return rc;
    const gemm_kernels *kt = aie_kernels()->sgemm;
    packed_b_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, PACKED_MAGIC, sizeof PACKED_MAGIC);
    h.isa = kt->isa;
    h.nr = kt->nr;
    h.K = K;
    h.N = N;
    memcpy(packed, &h, sizeof h);
    if (K > 0 && N > 0)
        aie_gemm_pack_b(trans_b, B, ldb, 0, K, 0, N, kt->nr, (float *)((char *)packed + sizeof h), K * kt->nr);
    return AIE_OK;
}

/* packed_b was written by aie_sgemm_pack_b for this ISA and K x N. */
static int check_packed_b(const char *fn, const gemm_kernels *kt, const void *packed_b, int64_t K, int64_t N) {
    if (!packed_b) return aie_fail(AIE_EINVAL, "%s: packed_b is NULL", fn);
    if ((uintptr_t)packed_b % sizeof(float))
        return aie_fail(AIE_EINVAL, "%s: packed_b %p is not 4-byte aligned", fn, packed_b);
    packed_b_header h;
    memcpy(&h, packed_b, sizeof h);
    if (memcmp(h.magic, PACKED_MAGIC, sizeof PACKED_MAGIC) != 0)
        return aie_fail(AIE_EINVAL, "%s: packed_b was not written by aie_sgemm_pack_b (bad magic)", fn);
    if (h.isa != (int32_t)kt->isa || h.nr != kt->nr)
        return aie_fail(AIE_EINVAL, "%s: packed_b was packed for ISA %s but the selected ISA is %s: pack it again", fn,
                        aie_isa_name((aie_isa)h.isa), aie_isa_name(kt->isa));
    if (h.K != K || h.N != N)
        return aie_fail(AIE_EINVAL, "%s: packed_b holds a %lldx%lld B (KxN) but the call has K=%lld N=%lld", fn,
                        (long long)h.K, (long long)h.N, (long long)K, (long long)N);
    return AIE_OK;
}

int aie_sgemm_packed(int trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const void *packed_b, float beta, float *C, int64_t ldc, const aie_epilogue *ep,
                     void *workspace, size_t workspace_size, int nthreads) {
    const char *fn = "aie_sgemm_packed";
    int rc = aie_ensure_init();
    if (rc != AIE_OK) return aie_init();
    rc = check_common(fn, M, N, K, trans_a, A, lda, C, ldc, ep);
    if (rc != AIE_OK) return rc;
    const gemm_kernels *kt = aie_kernels()->sgemm;
    rc = check_packed_b(fn, kt, packed_b, K, N);
    if (rc != AIE_OK) return rc;
    gemm_job j = {
        .kt = kt,
        .trans_a = trans_a != 0,
        .M = M, .N = N, .K = K,
        .alpha = alpha, .beta = beta,
        .A = A, .lda = lda,
        .bpacked = (const float *)((const char *)packed_b + sizeof(packed_b_header)),
        .C = C, .ldc = ldc,
        .ep = has_work(ep) ? ep : NULL,
    };
    return run_job(fn, &j, workspace, workspace_size, nthreads);
}

int aie_sgemm_packed_implicit_a(int64_t M, int64_t N, int64_t K, gemm_pack_a_fn pack_a, const void *src,
                                const void *packed_b, float beta, float *C, int64_t ldc, const aie_epilogue *ep,
                                void *workspace, size_t workspace_size, int nthreads) {
    const char *fn = "aie_sgemm_packed_implicit_a";
    int rc = aie_ensure_init();
    if (rc != AIE_OK) return aie_init();
    if (M < 0 || N < 0 || K < 0)
        return aie_fail(AIE_EINVAL, "%s: dimensions must be >= 0, got M=%lld N=%lld K=%lld", fn, (long long)M,
                        (long long)N, (long long)K);
    if (!pack_a) return aie_fail(AIE_EINVAL, "%s: pack_a is NULL", fn);
    rc = aie_gemm_check_matrix(fn, "C", C, M, N, ldc, 0);
    if (rc == AIE_OK) rc = aie_gemm_check_epilogue(fn, ep);
    const gemm_kernels *kt = aie_kernels()->sgemm;
    if (rc == AIE_OK) rc = check_packed_b(fn, kt, packed_b, K, N);
    if (rc != AIE_OK) return rc;
    gemm_job j = {
        .kt = kt,
        .M = M, .N = N, .K = K,
        .alpha = 1.0f, .beta = beta,
        .pack_a = pack_a, .a_src = src,
        .bpacked = (const float *)((const char *)packed_b + sizeof(packed_b_header)),
        .C = C, .ldc = ldc,
        .ep = has_work(ep) ? ep : NULL,
    };
    return run_job(fn, &j, workspace, workspace_size, nthreads);
}
