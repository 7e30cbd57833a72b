/*
 * Direct NHWC convolution driver (groups == 1): tiles of up to MR consecutive
 * output pixels of one output row x the NR-wide weight panels, computed by
 * the per-ISA micro-kernel (conv_kernels.h: aie_conv_direct_kernel) straight
 * from the input. Border taps are copied into a per-worker scratch with
 * zeros for the padding; everything else reads x in place. Output rows are
 * handed out dynamically; every output element's arithmetic is the same
 * whatever thread computes it, so results are bitwise identical for any
 * thread count (and per ISA).
 */
#include <string.h>

#include "conv_direct.h"
#include "gemm_internal.h"
#include "kernel_table.h"
#include "threadpool.h"

/* Scratch rows per border tap: the largest tile height of any ISA, so a
 * workspace stays valid when tests switch the ISA between sizing and call. */
#define CD_MR_MAX AIE_CONV_DIRECT_MR_MAX

static int g_algo = AIE_CONV_ALGO_AUTO;

int aie_conv2d_set_algo(int algo) {
    int old = g_algo;
    if (algo >= AIE_CONV_ALGO_AUTO && algo <= AIE_CONV_ALGO_DIRECT) g_algo = algo;
    return old;
}

static int is_pointwise_s1(const aie_conv2d_params *p) {
    return p->R == 1 && p->S == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_top == 0 && p->pad_left == 0 &&
           p->pad_bottom == 0 && p->pad_right == 0;
}

/* Output pixels along the tiled axis: a 1x1 stride-1 conv is one row of
 * N*H*W pixels (a GEMM on x, no padding), anything else rows of Q. */
static int64_t row_pixels(const aie_conv2d_params *p, int64_t Q) { return is_pointwise_s1(p) ? p->N * p->H * p->W : Q; }

/* The tile shape: narrow when every output channel fits in half a panel and
 * rows are long enough for its taller tiles. */
static const aie_conv_direct_shape *shape_for(const aie_conv_direct_kernel *k, const aie_conv2d_params *p,
                                              int64_t Q) {
    return p->K <= k->narrow.ncols && row_pixels(p, Q) >= k->narrow.mr / 2 ? &k->narrow : &k->wide;
}

/* Rows shorter than half a tile leave too few independent FMA chains (and
 * there the implicit GEMM, whose tiles span output rows, does better). */
int aie_conv_direct_possible(const aie_conv2d_params *p, int64_t Q) {
    const aie_kernel_table_entry *kt = aie_kernels();
    const aie_conv_direct_kernel *k = kt->conv_direct;
    return p->groups == 1 && row_pixels(p, Q) >= (k->wide.mr + 1) / 2 && p->R * p->S <= AIE_CONV_DIRECT_MAX_TAPS &&
           k->nr == kt->sgemm->nr;
}

/* Where the direct kernel beats implicit GEMM: see AIE_CONV_DIRECT_MAX_ROWS. */
static int direct_wins(const aie_conv2d_params *p) { return p->R * p->S * p->C <= AIE_CONV_DIRECT_MAX_ROWS; }

int aie_conv_direct_chosen(const aie_conv2d_params *p, int64_t Q) {
    if (g_algo == AIE_CONV_ALGO_GEMM || !aie_conv_direct_possible(p, Q)) return 0;
    return g_algo == AIE_CONV_ALGO_DIRECT || direct_wins(p);
}

int aie_conv2d_algo(const aie_conv2d_params *p) {
    int64_t P, Q;
    if (aie_conv2d_output_shape(p, &P, &Q)) return -1;
    if (p->groups == p->C && p->groups == p->K && p->C > 1) return AIE_CONV_ALGO_DEPTHWISE;
    return aie_conv_direct_chosen(p, Q) ? AIE_CONV_ALGO_DIRECT : AIE_CONV_ALGO_GEMM;
}

static size_t scratch_floats(const aie_conv2d_params *p) { return (size_t)(CD_MR_MAX * p->R * p->S * p->C); }

size_t aie_conv_direct_workspace(const aie_conv2d_params *p, int nthreads) {
    size_t slot = AIE_ROUND_UP(scratch_floats(p) * sizeof(float), AIE_ALIGN);
    return slot * (size_t)(nthreads > 0 ? nthreads : 1) + AIE_ALIGN;
}

typedef struct {
    const aie_conv2d_params *p;
    const aie_conv_direct_shape *k;
    int nr;                       /* weight panel width */
    int64_t P, Q, units_per_task; /* units: (output row, column chunk) pairs */
    int64_t unit_tasks;           /* tasks per panel block (task = block * unit_tasks + unit range) */
    int64_t q_chunk, nqc;         /* column chunks of q_chunk pixels (a multiple of mr), nqc per row */
    int64_t panel_block;          /* output channels per pass over a task's tiles (a multiple of nr) */
    int64_t nthreads;             /* a worker's next task is about nthreads on (dynamic hand-out) */
    const float *x, *pb, *bias, *res;
    const aie_epilogue *ep;
    float *y;
    float *scratch;
    size_t slot_floats;
} cd_ctx;

/* The segments of the tile at output pixels (n, p, q0 .. q0 + mr - 1). */
static int tile_segments(const cd_ctx *d, int64_t n, int64_t p, int64_t q0, int64_t mr, aie_conv_seg *seg,
                         float *scratch) {
    const aie_conv2d_params *cp = d->p;
    const int64_t C = cp->C, W = cp->W, S = cp->S;
    const int64_t lda = cp->stride_w * C;
    const int64_t w_first = q0 * cp->stride_w - cp->pad_left, w_last = w_first + (mr - 1) * cp->stride_w;
    int nseg = 0;
    for (int64_t r = 0; r < cp->R; r++) {
        int64_t h = p * cp->stride_h + r * cp->dil_h - cp->pad_top;
        if (h < 0 || h >= cp->H) continue; /* the whole tap row is padding */
        const float *row = d->x + (n * cp->H + h) * W * C;
        if (cp->dil_w == 1 && w_first >= 0 && w_last + S - 1 < W) {
            /* S taps x C channels are one contiguous run per pixel */
            seg[nseg++] = (aie_conv_seg){row + w_first * C, lda, r * S * C, S * C};
            continue;
        }
        if (cp->dil_w == 1 && cp->stride_w <= S) {
            /* A border tile: the input strip its pixels span, zero-padded,
             * is one memcpy into scratch, and the S taps stay one run per
             * pixel -- not mr copies of C floats per border tap and S short
             * segments (with 3-16 channels those copies cost about as much
             * as the tile's FMAs). (mr - 1) * stride_w + S <= mr * S pixels:
             * within the scratch's share for this tap row. The padding taps
             * then add 0 * w, as a partly padded tap does on the other path. */
            const int64_t span = (mr - 1) * cp->stride_w + S;
            /* pixels [0, a) of the strip are left padding, [a, b) input, [b, span) right padding */
            int64_t a = -w_first, b = W - w_first;
            a = a < 0 ? 0 : a > span ? span : a;
            b = b < a ? a : b > span ? span : b;
            float *strip = scratch;
            if (a > 0) memset(strip, 0, (size_t)(a * C) * sizeof(float));
            if (b > a) memcpy(strip + a * C, row + (w_first + a) * C, (size_t)((b - a) * C) * sizeof(float));
            if (b < span) memset(strip + b * C, 0, (size_t)((span - b) * C) * sizeof(float));
            seg[nseg++] = (aie_conv_seg){strip, lda, r * S * C, S * C};
            scratch += span * C;
            continue;
        }
        for (int64_t s = 0; s < S; s++) {
            int64_t lo = w_first + s * cp->dil_w, hi = w_last + s * cp->dil_w;
            if (hi < 0 || lo >= W) continue;
            if (lo >= 0 && hi < W) {
                seg[nseg++] = (aie_conv_seg){row + lo * C, lda, (r * S + s) * C, C};
                continue;
            }
            for (int64_t i = 0; i < mr; i++) {
                int64_t w = lo + i * cp->stride_w;
                if (w >= 0 && w < W) memcpy(scratch + i * C, row + w * C, (size_t)C * sizeof(float));
                else memset(scratch + i * C, 0, (size_t)C * sizeof(float));
            }
            seg[nseg++] = (aie_conv_seg){scratch, C, (r * S + s) * C, C};
            scratch += mr * C;
        }
    }
    return nseg;
}

static void cd_task(void *ctx, int64_t task, int worker) {
    const cd_ctx *d = ctx;
    const aie_conv2d_params *cp = d->p;
    const int64_t units = cp->N * d->P * d->nqc, K = cp->K, mr = d->k->mr, nr = d->nr, ncols_max = d->k->ncols;
    const int64_t kd = cp->R * cp->S * cp->C;
    const int64_t u0 = (task % d->unit_tasks) * d->units_per_task;
    const int64_t u1 = u0 + d->units_per_task < units ? u0 + d->units_per_task : units;
    float *scratch = d->scratch + (size_t)worker * d->slot_floats;
    aie_conv_seg seg[AIE_CONV_DIRECT_MAX_TAPS];
    /* One block of weight panels (all of them when they fit in L2) over the
     * task's tiles: weights larger than L2 are read once per block, not once
     * per output row, and x, the smaller then, is re-read instead. */
    const int64_t jb = task / d->unit_tasks * d->panel_block;
    const int64_t jb_end = jb + d->panel_block < K ? jb + d->panel_block : K;
    /* While this block runs from L2, its tiles prefetch the block this
     * worker will most likely take next (tasks go out in order, so about
     * nthreads on): spread over the block's k-loops, the stream from memory
     * overlaps the FMAs instead of stalling the next block's first pass.
     * Measured on ResNet-18's 3x3 512@7, 1 thread, weights not in cache
     * (8 weight sets in rotation): 2.39 -> 1.64 ms, onnxruntime 1.85 ms. */
    const float *pf = d->pb, *pf_end = d->pb;
    int64_t pf_step = 0;
    {
        const int64_t next_block = (task + d->nthreads) / d->unit_tasks * d->panel_block;
        if (next_block != jb && next_block < K) {
            const int64_t nb_end = next_block + d->panel_block < K ? next_block + d->panel_block : K;
            pf = d->pb + next_block * kd;
            pf_end = d->pb + AIE_ROUND_UP(nb_end, nr) * kd;
            const int64_t calls = (u1 - u0) * ((d->q_chunk + mr - 1) / mr) * ((jb_end - jb + nr - 1) / nr);
            const int64_t iters = calls * kd; /* weight rows the block's tiles walk, at most */
            pf_step = ((pf_end - pf) + iters - 1) / iters;
        }
    }
    for (int64_t u = u0; u < u1; u++) {
        const int64_t row = u / d->nqc, n = row / d->P, p = row % d->P;
        const int64_t qa = (u % d->nqc) * d->q_chunk, qb = qa + d->q_chunk < d->Q ? qa + d->q_chunk : d->Q;
        /* balanced tiles: ceil(len / mr) of them, heights differing by
         * at most one, so no pixel is computed twice */
        const int64_t len = qb - qa, ntiles = (len + mr - 1) / mr, base = len / ntiles, extra = len % ntiles;
        for (int64_t t = 0, q0 = qa; t < ntiles; t++) {
            const int64_t mt = base + (t < extra);
            const int nseg = tile_segments(d, n, p, q0, mt, seg, scratch);
            int64_t klen = 0;
            for (int s = 0; s < nseg; s++) klen += seg[s].len;
            const int64_t off = (row * d->Q + q0) * K;
            const aie_conv_direct_tile_fn tile = d->k->tile[mt];
            for (int64_t j = jb; j < jb_end; j += nr) {
                int ncols = (int)(K - j < ncols_max ? K - j : ncols_max);
                /* the prefetch cursor stays inside the blob: the last call
                 * may get a shorter step (or none) */
                int64_t step = pf_step;
                if (step && (pf_end - pf) < step * klen) step = (pf_end - pf) / klen;
                tile(nseg, seg, d->pb + j * kd, d->bias ? d->bias + j : NULL, d->res ? d->res + off + j : NULL,
                     d->y + off + j, K, ncols, d->ep, pf, step);
                pf += step * klen;
            }
            q0 += mt;
        }
    }
}

int aie_conv_direct_run(const aie_conv2d_params *p, int64_t P, int64_t Q, const float *x, const void *packed_b,
                        const float *bias, const float *residual, const aie_epilogue *ep, float *y, void *workspace,
                        size_t workspace_size, int nthreads) {
    size_t need = aie_conv_direct_workspace(p, nthreads);
    if (!workspace || workspace_size < need)
        return aie_fail(AIE_ENOMEM, "conv2d: workspace of %zu bytes, need %zu (aie_conv2d_workspace_size)",
                        workspace ? workspace_size : 0, need);
    const aie_conv_direct_kernel *kern = aie_kernels()->conv_direct;
    const aie_conv_direct_shape *k = shape_for(kern, p, Q);
    /* A 1x1 stride-1 conv is one row of N*H*W pixels: its tiles run on
     * across image rows and images. */
    aie_conv2d_params flat = *p;
    if (is_pointwise_s1(p)) {
        flat.W = p->N * p->H * p->W;
        flat.N = flat.H = 1;
        P = 1;
        Q = flat.W;
        p = &flat;
    }
    /* Panels per block: their weights within ~1 MiB (half a 2 MiB L2, the
     * rest for x and y); all of K when the whole weight set fits. */
    const int64_t panel_bytes = p->R * p->S * p->C * kern->nr * (int64_t)sizeof(float);
    int64_t panel_block = ((int64_t)1 << 20) / panel_bytes * kern->nr;
    if (panel_block < kern->nr) panel_block = kern->nr;
    const int64_t nblocks = (p->K + panel_block - 1) / panel_block;
    /* ~4 tasks per thread, handed out dynamically: panel blocks first, then
     * output rows, then column chunks of rows when there are still too few. */
    const int64_t pieces = nthreads > 1 ? 4 * (int64_t)nthreads : 1, rows = p->N * P;
    const int64_t want = (pieces + nblocks - 1) / nblocks; /* tasks per block */
    int64_t q_chunk = Q, nqc = 1;
    if (rows < want) {
        int64_t per_row = (want + rows - 1) / rows;
        q_chunk = AIE_ROUND_UP((Q + per_row - 1) / per_row, k->mr);
        nqc = (Q + q_chunk - 1) / q_chunk;
    }
    const int64_t units = rows * nqc, units_per_task = (units + want - 1) / want;
    const int64_t unit_tasks = (units + units_per_task - 1) / units_per_task;
    cd_ctx d = {
        .p = p, .k = k, .nr = kern->nr, .P = P, .Q = Q,
        .units_per_task = units_per_task, .unit_tasks = unit_tasks,
        .q_chunk = q_chunk, .nqc = nqc, .panel_block = panel_block, .nthreads = nthreads > 1 ? nthreads : 1,
        /* the GEMM's packed-B blob: a 64-byte header (aie_sgemm_packed_b_size(0, 0)), then the panels */
        .pb = (const float *)((const char *)packed_b + aie_sgemm_packed_b_size(0, 0)),
        .x = x, .bias = bias, .res = residual, .ep = ep, .y = y,
        .scratch = (float *)AIE_ROUND_UP((uintptr_t)workspace, AIE_ALIGN),
        .slot_floats = AIE_ROUND_UP(scratch_floats(p) * sizeof(float), AIE_ALIGN) / sizeof(float),
    };
    aie_parallel_dynamic(nblocks * unit_tasks, nthreads, cd_task, &d);
    return AIE_OK;
}
