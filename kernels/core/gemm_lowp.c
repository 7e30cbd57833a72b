/*
 * bf16 and int8 GEMM driver (contract in include/aie_gemm_lowp.h, layouts in
 * gemm_lowp_internal.h): argument checks, weight packing, A packing, tiling
 * over the thread pool and the output stages. The inner products live in the
 * per-level micro-kernels picked from the dispatch table (kernel_table.c).
 *
 * Tiling: C is cut into tiles of up to LOWP_MC rows x a column range; a task
 * packs its rows of A (all of K: the micro-kernels run whole K, so there is
 * no partial-sum pass) into its worker's workspace slot, then walks the B
 * panels of its range and, for each, the 32-row micro-tiles. The output
 * stage of a 32 x 32 block runs right after its micro-kernel, on the
 * accumulators still in L1. Each element's arithmetic depends only on the
 * level and K, never on the tiling or thread: results are bitwise equal
 * for any thread count.
 */
#include <math.h>
#include <string.h>

#include "gemm_lowp_internal.h"
#include "kernel_table.h"

/* Blocking. Measured on Sapphire Rapids (AMX): a 32 x 32 block runs ~3x
 * faster with its operands in L1 than streaming all of K from L2. So K is cut
 * into slices of 16 tile k-chunks (512 bf16 / 1024 int8: a 32-row A slice
 * is 32 KiB and stays in the 48 KiB L1d while it meets the LOWP_NB / 32
 * panels of a column block, whose B slices (256 KiB) come from L2), half
 * the partial-sum round trips of 8-chunk slices. Partial sums live in C for
 * whole bf16 tiles, else in a per-thread buffer of up to LOWP_MC x LOWP_NB
 * (128 KiB, L2). LOWP_MC = 128: the packed A block (128 x K) stays in L2.
 * (Timings on the shared 2-core development VM varied 2x between identical
 * runs, so these follow from the cache sizes rather than from a sweep.) */
#ifndef LOWP_MC
#define LOWP_MC 128
#endif
#ifndef LOWP_NB
#define LOWP_NB 256
#endif
#ifndef LOWP_KSLICE_CHUNKS
#define LOWP_KSLICE_CHUNKS 16
#endif
/* bf16 on matrix units does ~8x the work per cycle of the fp32 FMA path, so
 * a thread pays off only from a correspondingly larger problem. */
#define LOWP_MIN_FLOPS_PER_THREAD (1 << 22)

#define BF16_MAGIC "AIEBF16"
#define S8_MAGIC "AIES8B1"
typedef struct {
    char magic[8];
    int64_t K, N, kp;
    uint8_t reserved[32];
} lowp_header;
_Static_assert(sizeof(lowp_header) == 64, "the packed panels start one cache line in");

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static size_t packed_size(int64_t K, int64_t N, int chunk, int esize, int colsums) {
    if (K < 0 || N < 0) return 0;
    size_t kp = (size_t)AIE_ROUND_UP(K, chunk), np = (size_t)AIE_ROUND_UP(N, LOWP_NR);
    return sizeof(lowp_header) + kp * np * (size_t)esize + (colsums ? np * sizeof(int32_t) : 0);
}

size_t aie_gemm_bf16_packed_b_size(int64_t K, int64_t N) { return packed_size(K, N, LOWP_KCHUNK_BF16, 2, 0); }
size_t aie_gemm_s8_packed_b_size(int64_t K, int64_t N) { return packed_size(K, N, LOWP_KCHUNK_S8, 1, 1); }

/* ---- packing -------------------------------------------------------------- */

/* Rows k and k + 1 of a whole 32-column panel of a row-major B, as the
 * panel's k-pair row: one 32-bit word (lo: row k) per column. A branch-free
 * loop over contiguous words, so it vectorises: the attention packs Kt and V
 * at run time, where the per-element loop below cost as much as the products. */
static void pack_pair_row(const float *restrict r0, const float *restrict r1, aie_bf16 *restrict d) {
    for (int64_t j = 0; j < LOWP_NR; j++) {
        uint32_t w = (uint32_t)aie_f32_to_bf16(r0[j]) | (uint32_t)aie_f32_to_bf16(r1[j]) << 16;
        memcpy(d + 2 * j, &w, sizeof w); /* little-endian: row k's value first */
    }
}

void aie_lowp_pack_b_bf16(int trans_b, int64_t K, int64_t N, const void *Bv, int64_t ldb, void *panels) {
    const float *B = Bv;
    aie_bf16 *dst = panels;
    const int64_t kp = AIE_ROUND_UP(K, LOWP_KCHUNK_BF16), np = AIE_ROUND_UP(N, LOWP_NR);
    for (int64_t p = 0; p < np; p += LOWP_NR) {
        aie_bf16 *panel = dst + p * kp;
        int64_t k0 = 0;
        if (!trans_b && p + LOWP_NR <= N)
            for (; k0 + 2 <= K; k0 += 2)
                pack_pair_row(B + k0 * ldb + p, B + (k0 + 1) * ldb + p, panel + k0 * LOWP_NR);
        for (int64_t k = k0; k < kp; k++)
            for (int64_t j = 0; j < LOWP_NR; j++) {
                float v = 0.0f;
                if (k < K && p + j < N) v = trans_b ? B[(p + j) * ldb + k] : B[k * ldb + p + j];
                panel[(k / 2) * 2 * LOWP_NR + j * 2 + (k & 1)] = aie_f32_to_bf16(v);
            }
    }
}

void aie_lowp_pack_b_s8(int trans_b, int64_t K, int64_t N, const void *Bv, int64_t ldb, void *panels) {
    const int8_t *B = Bv;
    int8_t *dst = panels;
    const int64_t kp = AIE_ROUND_UP(K, LOWP_KCHUNK_S8), np = AIE_ROUND_UP(N, LOWP_NR);
    int32_t *colsum = (int32_t *)(dst + np * kp);
    for (int64_t p = 0; p < np; p += LOWP_NR) {
        int8_t *panel = dst + p * kp;
        for (int64_t j = 0; j < LOWP_NR; j++) colsum[p + j] = 0;
        for (int64_t k = 0; k < kp; k++)
            for (int64_t j = 0; j < LOWP_NR; j++) {
                int8_t v = 0;
                if (k < K && p + j < N) v = trans_b ? B[(p + j) * ldb + k] : B[k * ldb + p + j];
                panel[(k / 4) * 4 * LOWP_NR + j * 4 + (k & 3)] = v;
                colsum[p + j] += v;
            }
    }
}

/* Rows [i0, i0 + mc) of A into 16-row strips (layout in gemm_lowp_internal.h),
 * converting fp32 to bf16 on the way; zero rows and columns pad the strips.
 * Each k-chunk of a row is a contiguous run on both sides: the copy loops
 * vectorise. */
static void pack_a_bf16(const void *A, int a_type, int64_t lda, int64_t i0, int64_t mc, int64_t K, int64_t kp,
                        aie_bf16_cvt_fn cvt, aie_bf16 *dst) {
    const int64_t strips = (mc + LOWP_STRIP - 1) / LOWP_STRIP, ss = kp * LOWP_STRIP;
    for (int64_t r = 0; r < strips * LOWP_STRIP; r++) {
        aie_bf16 *d = dst + (r / LOWP_STRIP) * ss + (r % LOWP_STRIP) * LOWP_KCHUNK_BF16;
        for (int64_t c = 0; c < kp; c += LOWP_KCHUNK_BF16) {
            aie_bf16 *restrict dc = d + c * LOWP_STRIP;
            int64_t take = r < mc ? min64(LOWP_KCHUNK_BF16, max64(0, K - c)) : 0;
            if (take == LOWP_KCHUNK_BF16 && a_type == AIE_A_F32) {
                /* the level's vector conversion: scalar rounding here cost
                 * as much as the AMX products of a 128 x 256 x 256 GEMM */
                cvt((const float *)A + (i0 + r) * lda + c, dc, LOWP_KCHUNK_BF16);
                continue;
            }
            for (int64_t e = 0; e < take; e++)
                dc[e] = a_type == AIE_A_F32 ? aie_f32_to_bf16(((const float *)A)[(i0 + r) * lda + c + e])
                                            : ((const aie_bf16 *)A)[(i0 + r) * lda + c + e];
            for (int64_t e = take; e < LOWP_KCHUNK_BF16; e++) dc[e] = 0;
        }
    }
}

typedef struct {
    const uint8_t *A;
    int64_t lda;
} dense_a;

static void pack_a_u8(const void *ctx, int64_t i0, int64_t mc, int64_t K, int64_t kp, uint8_t *dst) {
    const uint8_t *A = ((const dense_a *)ctx)->A;
    const int64_t lda = ((const dense_a *)ctx)->lda;
    const int64_t strips = (mc + LOWP_STRIP - 1) / LOWP_STRIP, ss = kp * LOWP_STRIP;
    for (int64_t r = 0; r < strips * LOWP_STRIP; r++) {
        uint8_t *d = dst + (r / LOWP_STRIP) * ss + (r % LOWP_STRIP) * LOWP_KCHUNK_S8;
        const uint8_t *src = A + (i0 + r) * lda;
        for (int64_t c = 0; c < kp; c += LOWP_KCHUNK_S8) {
            uint8_t *dc = d + c * LOWP_STRIP;
            int64_t take = r < mc ? min64(LOWP_KCHUNK_S8, max64(0, K - c)) : 0;
            if (take > 0) memcpy(dc, src + c, (size_t)take);
            if (take < LOWP_KCHUNK_S8) memset(dc + take, 0, (size_t)(LOWP_KCHUNK_S8 - take));
        }
    }
}

/* ---- the job ---------------------------------------------------------------- */

typedef struct {
    int s8; /* 0: bf16, 1: u8 x s8 */
    const aie_kernel_table_entry *kt;
    int64_t M, N, K, kp;
    const void *A;
    int a_type;
    int64_t lda;
    const void *bpanels;
    const int32_t *colsum;
    void *C;
    int64_t ldc;
    const aie_epilogue *ep; /* fp32 outputs: NULL when nothing to apply */
    int32_t a_zero;
    const aie_qepilogue *q;
    int need_mult;
    lowp_pack_a_u8_fn pack_a_u8; /* int8: writes a task's rows of A into strips */
    const void *pack_ctx;
    const int32_t *bias; /* U8: per column, in the workspace (zeros when the call has none) */
    const float *mult; /* per column, in the workspace: a_scale * b_scale[j] (F32), / y_scale too (U8) */
    char *a_slots; /* per worker: the packed A block, then up to LOWP_MC x LOWP_NB partial sums */
    size_t a_bytes, slot_bytes;
    int64_t acc_ld; /* row stride of the partial sums */
    int64_t tile_m, tile_n, tiles_n;
} lowp_job;

static void apply_ep(const lowp_job *j, float *c, int m, int n, int64_t row0, int64_t col0) {
    const aie_epilogue *ep = j->ep;
    /* bf16 products: a GELU more exact than bf16 is wasted work (a third of bert_mini's FFN GEMM) */
    (j->s8 ? j->kt->sgemm->epilogue : j->kt->sgemm->epilogue_bf16)(c, j->ldc, m, n, ep->bias_kind == AIE_BIAS_COL ? ep->bias + col0 : NULL,
                           ep->bias_kind == AIE_BIAS_ROW ? ep->bias + row0 : NULL, ep->act, ep->p0, ep->p1);
}

/* Whole 32 x 32 bf16 blocks accumulate in C itself (fp32 like the partial
 * sums: no copy); the others in the partial-sum buffer. */
static int in_c(int m, int64_t jp, int64_t nb) { return m == LOWP_MR && jp + LOWP_NR <= nb; }

/* Columns of a 32-row block of partial sums (row stride acc_ld) that are not
 * in C yet into C, then the epilogue on the block while it is in L2. */
static void store_bf16(const lowp_job *j, const float *acc, int m, int n, int64_t row0, int64_t col0) {
    float *c = (float *)j->C + row0 * j->ldc + col0;
    for (int x0 = 0; x0 < n; x0 += LOWP_NR)
        if (!in_c(m, x0, n))
            for (int r = 0; r < m; r++)
                for (int x = x0; x < n && x < x0 + LOWP_NR; x++) c[r * j->ldc + x] = acc[r * j->acc_ld + x];
    if (j->ep) apply_ep(j, c, m, n, row0, col0);
}

#include "gemm_s8_store_body.h"

/* acc: partial sums, row stride acc_ld. */
static void store_s8(const lowp_job *j, const int32_t *acc, int m, int n, int64_t row0, int64_t col0) {
    const int32_t *cs = j->colsum + col0;
    const uint32_t za = (uint32_t)j->a_zero;
    const aie_qepilogue *q = j->q;
    const lowp_s8_row_f32_fn row_f32 = j->kt->s8->row_f32 ? j->kt->s8->row_f32 : s8_row_f32;
    const lowp_s8_row_u8_fn row_u8 = j->kt->s8->row_u8 ? j->kt->s8->row_u8 : s8_row_u8;
    for (int r = 0; r < m; r++) {
        const int32_t *a = acc + r * j->acc_ld;
        const int64_t at = (row0 + r) * j->ldc + col0;
        if (q->out == AIE_QOUT_S32) s8_row_s32(a, cs, za, n, (int32_t *)j->C + at);
        else if (q->out == AIE_QOUT_F32) row_f32(a, cs, za, j->mult + col0, n, (float *)j->C + at);
        else {
            uint8_t *c = (uint8_t *)j->C + at;
            row_u8(a, cs, za, j->bias + col0, j->mult + col0, q->y_zero, n, c);
            if (q->lut_u8)
                for (int x = 0; x < n; x++) c[x] = q->lut_u8[(col0 + x) * 256 + c[x]];
        }
    }
    if (q->out == AIE_QOUT_F32 && j->ep) apply_ep(j, (float *)j->C + row0 * j->ldc + col0, m, n, row0, col0);
}

/* One task: rows [i0, i0 + mc) x columns [n0, n1). A is packed once; per
 * LOWP_NB-column block, K slice by K slice, each 32-row pair of A meets every
 * panel of the block (blocking above), then the output stage writes C. */
static void tile_task(void *ctx, int64_t t, int worker) {
    const lowp_job *j = ctx;
    int64_t i0 = (t / j->tiles_n) * j->tile_m, mc = min64(j->tile_m, j->M - i0);
    int64_t n0 = (t % j->tiles_n) * j->tile_n, n1 = min64(j->N, n0 + j->tile_n);
    if (mc <= 0 || n0 >= n1) return;
    char *slot = j->a_slots + (size_t)worker * j->slot_bytes;
    void *pa = slot, *acc = slot + j->a_bytes;
    const int64_t ss = j->kp * LOWP_STRIP; /* elements of one strip */
    const int64_t kchunk = j->s8 ? LOWP_KCHUNK_S8 : LOWP_KCHUNK_BF16;
    /* int8 runs all of K in one slice: its C tiles stay in the tile registers over the whole sum (no
     * partial-sum round trips); measured a few % faster on ResNet-18's 3x3 layers than 16-chunk slices */
    const int64_t kslice = j->s8 ? max64(kchunk, j->kp) : kchunk * LOWP_KSLICE_CHUNKS; /* K = 0: one empty slice */
    const lowp_bf16_kernels *kb = j->kt->bf16;
    const lowp_s8_kernels *ks = j->kt->s8;
    const lowp_thread_fn begin = j->s8 ? ks->begin : kb->begin, end = j->s8 ? ks->end : kb->end;
    if (j->s8) j->pack_a_u8(j->pack_ctx, i0, mc, j->K, j->kp, pa);
    else pack_a_bf16(j->A, j->a_type, j->lda, i0, mc, j->K, j->kp, j->kt->bf16_cvt, pa);
    if (begin) begin();
    for (int64_t cb = n0; cb < n1; cb += LOWP_NB) {
        const int64_t nb = min64(LOWP_NB, n1 - cb);
        for (int64_t pc = 0; pc < j->kp || pc == 0; pc += kslice) {
            const int64_t kc = min64(kslice, j->kp - pc);
            for (int64_t ir = 0; ir < mc; ir += LOWP_MR) {
                const int m = (int)min64(LOWP_MR, mc - ir);
                for (int64_t jp = 0; jp < nb; jp += LOWP_NR) {
                    const int64_t b_off = (cb + jp) * j->kp + pc * LOWP_NR;
                    const int64_t a_off = (ir / LOWP_STRIP) * ss + pc * LOWP_STRIP;
                    if (j->s8)
                        ks->ukernel(kc, (const uint8_t *)pa + a_off, ss, (const int8_t *)j->bpanels + b_off, m,
                                    (int32_t *)acc + ir * j->acc_ld + jp, j->acc_ld, pc > 0);
                    else if (in_c(m, jp, nb))
                        kb->ukernel(kc, (const aie_bf16 *)pa + a_off, ss, (const aie_bf16 *)j->bpanels + b_off, m,
                                    (float *)j->C + (i0 + ir) * j->ldc + cb + jp, j->ldc, pc > 0);
                    else
                        kb->ukernel(kc, (const aie_bf16 *)pa + a_off, ss, (const aie_bf16 *)j->bpanels + b_off, m,
                                    (float *)acc + ir * j->acc_ld + jp, j->acc_ld, pc > 0);
                }
            }
        }
        for (int64_t ir = 0; ir < mc; ir += LOWP_MR) {
            const int m = (int)min64(LOWP_MR, mc - ir);
            if (j->s8) store_s8(j, (const int32_t *)acc + ir * j->acc_ld, m, (int)nb, i0 + ir, cb);
            else store_bf16(j, (const float *)acc + ir * j->acc_ld, m, (int)nb, i0 + ir, cb);
        }
    }
    if (end) end();
}

/* Rows of a task (and of its packed A block) and columns of its partial
 * sums, at most: small problems need small slots. */
static int64_t block_rows(int64_t M) { return min64(LOWP_MC, AIE_ROUND_UP(M, LOWP_MR)); }
static int64_t acc_cols(int64_t N) { return min64(LOWP_NB, AIE_ROUND_UP(N, LOWP_NR)); }

static size_t a_block_bytes(int64_t M, int64_t kp, int esize) {
    return AIE_ROUND_UP((size_t)block_rows(M) * (size_t)kp * (size_t)esize, AIE_ALIGN);
}

/* A worker's slot: its packed A block, then its partial sums (4-byte each). */
static size_t slot_bytes(int64_t M, int64_t N, int64_t kp, int esize) {
    return a_block_bytes(M, kp, esize) + AIE_ROUND_UP((size_t)block_rows(M) * (size_t)acc_cols(N) * 4, AIE_ALIGN);
}

static size_t ws_size(int64_t M, int64_t N, int64_t K, int nthreads, int chunk, int esize, int mult) {
    if (M <= 0 || N <= 0 || K < 0) return 0;
    if (nthreads <= 0) nthreads = aie_threads_get();
    /* per column: the scale multipliers, the int32 bias */
    size_t extra = mult ? 2 * AIE_ROUND_UP((size_t)N * sizeof(float), AIE_ALIGN) : 0;
    return slot_bytes(M, N, AIE_ROUND_UP(K, chunk), esize) * (size_t)nthreads + extra + AIE_ALIGN;
}

size_t aie_gemm_bf16_workspace_size(int64_t M, int64_t N, int64_t K, int nthreads) {
    return ws_size(M, N, K, nthreads, LOWP_KCHUNK_BF16, 2, 0);
}

size_t aie_gemm_u8s8_workspace_size(int64_t M, int64_t N, int64_t K, int nthreads) {
    return ws_size(M, N, K, nthreads, LOWP_KCHUNK_S8, 1, 1);
}

/* Tiles as the fp32 GEMM cuts them (aie_gemm_plan_tiles), except when all
 * of M fits one task's A block: then every task takes all rows and a 1/nt
 * share of the columns. The fp32 cut would split M too (49 x 512: 8 tiles
 * of 32 x 128), so each task re-packs A for its column range and every
 * column range of B (the weights: 4.7 MB for a 3x3 512-channel conv) is
 * streamed once per row tile; here A is packed nt times and B read once.
 * Shared with the bf16 convolution (core/conv_lowp.c). */
void aie_lowp_plan_tiles(int64_t M, int64_t N, int64_t mc, int nt, int64_t *tile_m, int64_t *tile_n) {
    if (M > mc || nt < 2) {
        aie_gemm_plan_tiles(M, N, mc, LOWP_MR, LOWP_NR, nt, tile_m, tile_n);
        return;
    }
    *tile_m = M;
    *tile_n = AIE_ROUND_UP((N + nt - 1) / nt, LOWP_NR);
}

static void plan_tiles(lowp_job *j, int nt) {
    /* int8: the fp32 cut still (its tiling is the i8perf work's; the rule would serve it too) */
    if (j->s8) aie_gemm_plan_tiles(j->M, j->N, LOWP_MC, LOWP_MR, LOWP_NR, nt, &j->tile_m, &j->tile_n);
    else aie_lowp_plan_tiles(j->M, j->N, LOWP_MC, nt, &j->tile_m, &j->tile_n);
    j->tiles_n = (j->N + j->tile_n - 1) / j->tile_n;
}

static int run(const char *fn, lowp_job *j, int esize, void *workspace, size_t workspace_size, int nthreads) {
    int nt = nthreads <= 0 ? aie_threads_get() : nthreads;
    double flops = 2.0 * (double)j->M * (double)j->N * (double)max64(j->K, 1);
    if (flops / LOWP_MIN_FLOPS_PER_THREAD < nt) nt = (int)max64(1, (int64_t)(flops / LOWP_MIN_FLOPS_PER_THREAD));
    j->a_bytes = a_block_bytes(j->M, j->kp, esize);
    j->slot_bytes = slot_bytes(j->M, j->N, j->kp, esize);
    j->acc_ld = acc_cols(j->N);
    size_t extra = j->need_mult ? 2 * AIE_ROUND_UP((size_t)j->N * sizeof(float), AIE_ALIGN) : 0;
    char *base;
    int rc = aie_workspace_layout(fn, j->s8 ? "aie_gemm_u8s8_workspace_size" : "aie_gemm_bf16_workspace_size",
                                  workspace, workspace_size, extra, j->slot_bytes, j->M, j->N, j->K, &base, &nt);
    if (rc != AIE_OK) return rc;
    float *mult = (float *)base;
    int32_t *bias = (int32_t *)(base + extra / 2);
    j->a_slots = base + extra;
    if (j->need_mult) { /* per column, once per call: every path multiplies by the same fp32 numbers */
        const aie_qepilogue *q = j->q;
        for (int64_t x = 0; x < j->N; x++) {
            mult[x] = q->out == AIE_QOUT_U8 ? q->a_scale * q->b_scale[x] / q->y_scale : q->a_scale * q->b_scale[x];
            bias[x] = q->out == AIE_QOUT_U8 && q->bias_s32 ? q->bias_s32[x] : 0;
        }
        j->mult = mult;
        j->bias = bias;
    }
    plan_tiles(j, nt);
    int64_t tiles = (j->M + j->tile_m - 1) / j->tile_m * j->tiles_n;
    aie_parallel_dynamic(tiles, nt, tile_task, j);
    return AIE_OK;
}

static int check_dims(const char *fn, int64_t M, int64_t N, int64_t K) {
    if (M < 0 || N < 0 || K < 0)
        return aie_fail(AIE_EINVAL, "%s: dimensions must be >= 0, got M=%lld N=%lld K=%lld", fn, (long long)M,
                        (long long)N, (long long)K);
    return AIE_OK;
}

static int pack_common(const char *fn, const char *size_fn, const char *magic, int chunk, size_t need,
                       lowp_pack_b_fn pack, int trans_b, int64_t K, int64_t N, const void *B, int64_t ldb,
                       void *packed, size_t size) {
    int rc = aie_gemm_check_pack_b(fn, size_fn, trans_b, K, N, B, ldb, packed, size, need);
    if (rc != AIE_OK) return rc;
    lowp_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, magic, strlen(magic) + 1);
    h.K = K;
    h.N = N;
    h.kp = AIE_ROUND_UP(K, chunk);
    memcpy(packed, &h, sizeof h);
    pack(trans_b, K, N, B, ldb, (char *)packed + sizeof h);
    return AIE_OK;
}

int aie_gemm_bf16_pack_b(int trans_b, int64_t K, int64_t N, const float *B, int64_t ldb, void *packed,
                         size_t packed_size) {
    return pack_common("aie_gemm_bf16_pack_b", "aie_gemm_bf16_packed_b_size", BF16_MAGIC, LOWP_KCHUNK_BF16,
                       aie_gemm_bf16_packed_b_size(K, N), aie_kernels()->bf16->pack_b, trans_b, K, N, B, ldb, packed,
                       packed_size);
}

int aie_gemm_s8_pack_b(int trans_b, int64_t K, int64_t N, const int8_t *B, int64_t ldb, void *packed,
                       size_t packed_size) {
    if (K > AIE_GEMM_S8_MAX_K)
        return aie_fail(AIE_EINVAL, "aie_gemm_s8_pack_b: K=%lld is above %d, where int32 sums could overflow",
                        (long long)K, AIE_GEMM_S8_MAX_K);
    return pack_common("aie_gemm_s8_pack_b", "aie_gemm_s8_packed_b_size", S8_MAGIC, LOWP_KCHUNK_S8,
                       aie_gemm_s8_packed_b_size(K, N), aie_kernels()->s8->pack_b, trans_b, K, N, B, ldb, packed,
                       packed_size);
}

/* packed_b was written by the matching pack function for K x N. */
static int check_packed(const char *fn, const char *magic, const char *packer, const void *packed_b, int64_t K,
                        int64_t N) {
    if (!packed_b) return aie_fail(AIE_EINVAL, "%s: packed_b is NULL", fn);
    if ((uintptr_t)packed_b % sizeof(int32_t))
        return aie_fail(AIE_EINVAL, "%s: packed_b %p is not 4-byte aligned", fn, packed_b);
    lowp_header h;
    memcpy(&h, packed_b, sizeof h);
    if (memcmp(h.magic, magic, strlen(magic) + 1) != 0)
        return aie_fail(AIE_EINVAL, "%s: packed_b was not written by %s (bad magic)", fn, packer);
    if (h.K != K || h.N != N)
        return aie_fail(AIE_EINVAL, "%s: packed_b holds a %lldx%lld B (KxN) but the call has K=%lld N=%lld", fn,
                        (long long)h.K, (long long)h.N, (long long)K, (long long)N);
    return AIE_OK;
}

static int has_work(const aie_epilogue *ep) {
    return ep && (ep->bias_kind != AIE_BIAS_NONE || ep->act != AIE_U_IDENTITY);
}

int aie_gemm_bf16(int64_t M, int64_t N, int64_t K, const void *A, int a_type, int64_t lda, const void *packed_b,
                  float *C, int64_t ldc, const aie_epilogue *ep, void *workspace, size_t workspace_size,
                  int nthreads) {
    const char *fn = "aie_gemm_bf16";
    int rc = aie_ensure_init();
    if (rc != AIE_OK) return aie_init();
    rc = check_dims(fn, M, N, K);
    if (rc == AIE_OK && a_type != AIE_A_F32 && a_type != AIE_A_BF16)
        rc = aie_fail(AIE_EINVAL, "%s: a_type=%d is not an aie_a_type (0 fp32, 1 bf16)", fn, a_type);
    if (rc == AIE_OK) rc = aie_gemm_check_matrix(fn, "A", A, M, K, lda, 0);
    if (rc == AIE_OK) rc = aie_gemm_check_matrix(fn, "C", C, M, N, ldc, 0);
    if (rc == AIE_OK) rc = aie_gemm_check_epilogue(fn, ep);
    if (rc == AIE_OK) rc = check_packed(fn, BF16_MAGIC, "aie_gemm_bf16_pack_b", packed_b, K, N);
    if (rc != AIE_OK || M == 0 || N == 0) return rc;
    lowp_job j = {
        .kt = aie_kernels(),
        .M = M, .N = N, .K = K, .kp = AIE_ROUND_UP(K, LOWP_KCHUNK_BF16),
        .A = A, .a_type = a_type, .lda = lda,
        .bpanels = (const char *)packed_b + sizeof(lowp_header),
        .C = C, .ldc = ldc,
        .ep = has_work(ep) ? ep : NULL,
    };
    return run(fn, &j, 2, workspace, workspace_size, nthreads);
}

static int check_qepilogue(const char *fn, const aie_qepilogue *q, int64_t N) {
    if (!q) return aie_fail(AIE_EINVAL, "%s: q (the output description) is NULL", fn);
    if (q->out < AIE_QOUT_S32 || q->out > AIE_QOUT_U8)
        return aie_fail(AIE_EINVAL, "%s: q->out=%d is not an aie_qout_kind (0 s32, 1 f32, 2 u8)", fn, q->out);
    if (q->out == AIE_QOUT_S32) return AIE_OK;
    if (!(q->a_scale > 0.0f) || !isfinite(q->a_scale))
        return aie_fail(AIE_EINVAL, "%s: a_scale=%g must be finite and > 0", fn, (double)q->a_scale);
    if (N > 0 && !q->b_scale)
        return aie_fail(AIE_EINVAL, "%s: b_scale is NULL (expected N=%lld scales)", fn, (long long)N);
    for (int64_t x = 0; x < N; x++)
        if (!(q->b_scale[x] >= 0.0f) || !isfinite(q->b_scale[x]))
            return aie_fail(AIE_EINVAL, "%s: b_scale[%lld]=%g must be finite and >= 0", fn, (long long)x,
                            (double)q->b_scale[x]);
    if (q->out == AIE_QOUT_F32) return aie_gemm_check_epilogue(fn, q->ep);
    if (!(q->y_scale > 0.0f) || !isfinite(q->y_scale))
        return aie_fail(AIE_EINVAL, "%s: y_scale=%g must be finite and > 0", fn, (double)q->y_scale);
    if (q->y_zero < 0 || q->y_zero > 255)
        return aie_fail(AIE_EINVAL, "%s: y_zero=%d is outside the uint8 range 0..255", fn, (int)q->y_zero);
    for (int64_t x = 0; x < N; x++)
        if (!isfinite(q->a_scale * q->b_scale[x] / q->y_scale))
            return aie_fail(AIE_EINVAL,
                            "%s: the requantisation multiplier a_scale*b_scale[%lld]/y_scale overflows fp32", fn,
                            (long long)x);
    return AIE_OK;
}

int aie_gemm_u8s8_implicit(const char *fn, int64_t M, int64_t N, int64_t K, lowp_pack_a_u8_fn pack_a,
                           const void *pack_ctx, int32_t a_zero, const void *packed_b, void *C, int64_t ldc,
                           const aie_qepilogue *q, void *workspace, size_t workspace_size, int nthreads) {
    int rc = check_dims(fn, M, N, K);
    if (rc == AIE_OK && (a_zero < 0 || a_zero > 255))
        rc = aie_fail(AIE_EINVAL, "%s: a_zero=%d is outside the uint8 range 0..255", fn, (int)a_zero);
    if (rc == AIE_OK) rc = aie_gemm_check_matrix(fn, "C", C, M, N, ldc, 0);
    if (rc == AIE_OK) rc = check_qepilogue(fn, q, N);
    if (rc == AIE_OK) rc = check_packed(fn, S8_MAGIC, "aie_gemm_s8_pack_b", packed_b, K, N);
    if (rc != AIE_OK || M == 0 || N == 0) return rc;
    const int64_t kp = AIE_ROUND_UP(K, LOWP_KCHUNK_S8), np = AIE_ROUND_UP(N, LOWP_NR);
    const char *panels = (const char *)packed_b + sizeof(lowp_header);
    lowp_job j = {
        .s8 = 1,
        .kt = aie_kernels(),
        .M = M, .N = N, .K = K, .kp = kp,
        .bpanels = panels,
        .colsum = (const int32_t *)(panels + kp * np),
        .C = C, .ldc = ldc,
        .ep = q->out == AIE_QOUT_F32 && has_work(q->ep) ? q->ep : NULL,
        .a_zero = a_zero,
        .q = q,
        .need_mult = q->out != AIE_QOUT_S32,
        .pack_a_u8 = pack_a,
        .pack_ctx = pack_ctx,
    };
    return run(fn, &j, 1, workspace, workspace_size, nthreads);
}

int aie_gemm_u8s8(int64_t M, int64_t N, int64_t K, const uint8_t *A, int64_t lda, int32_t a_zero,
                  const void *packed_b, void *C, int64_t ldc, const aie_qepilogue *q, void *workspace,
                  size_t workspace_size, int nthreads) {
    const char *fn = "aie_gemm_u8s8";
    int rc = aie_ensure_init();
    if (rc != AIE_OK) return aie_init();
    rc = check_dims(fn, M, N, K);
    if (rc == AIE_OK) rc = aie_gemm_check_matrix(fn, "A", A, M, K, lda, 0);
    if (rc != AIE_OK) return rc;
    const dense_a ctx = {A, lda};
    return aie_gemm_u8s8_implicit(fn, M, N, K, pack_a_u8, &ctx, a_zero, packed_b, C, ldc, q, workspace,
                                  workspace_size, nthreads);
}
