/*
 * Winograd F(2x2, 3x3) convolution (3x3, stride 1, dilation 1, groups 1):
 * each 2x2 block of output pixels is A^T [ sum_c (B^T d_c B) .* (G g_c G^T) ] A,
 * so the C x K products of a tile are 16 per 4 output pixels instead of 36:
 * 2.25x fewer multiply-adds. The 16 elementwise products over channels are
 * 16 GEMMs (tiles x C) * (C x K), run by the direct convolution's tile
 * kernels (one segment, the transformed tiles read in place, lda = C) on
 * weights transformed and packed once (aie_conv2d_pack_winograd).
 *
 * Work: blocks of tiles (their transformed inputs, 16 x T x C floats, sized
 * to stay in L2) x parts of the output channels; a task transforms its
 * block's tiles, then for each weight panel runs the 16 products of each
 * group of up to MR tiles into a small buffer and transforms it straight
 * into y with the epilogue (bias, residual, activation). Every output's
 * arithmetic is fixed by its tile and channel, not by the thread that
 * computes it: results are bitwise identical for any thread count.
 *
 * Accuracy: the input and output transforms only add and subtract; the
 * weight transform (halves) runs in double. The error stays within a small
 * multiple of the direct sum's (tests/kernels/test_conv_winograd.py checks
 * it against a float64 reference with the same bound as every conv path).
 */
#include <stdlib.h>
#include <string.h>

#include "conv_direct.h"
#include "conv_winograd.h"
#include "gemm_internal.h"
#include "kernel_table.h"
#include "threadpool.h"

#define WG_XI 16
/* Transformed inputs per task block: ~1 MiB (half of a 2 MiB L2; the rest
 * holds the weight panel being used and the next one being prefetched). */
#define WG_V_BYTES (1u << 20)
/* Widest weight panel of any ISA (AVX-512: 32). */
#define WG_NR_MAX 32

int aie_conv_winograd_possible(const aie_conv2d_params *p) {
    return p->R == 3 && p->S == 3 && p->stride_h == 1 && p->stride_w == 1 && p->dil_h == 1 && p->dil_w == 1 &&
           p->groups == 1 &&
           aie_kernels()->conv_direct->nr == aie_kernels()->sgemm->nr;
}

/* Tiles per block: a multiple of the widest tile height, V within WG_V_BYTES. */
static int64_t tiles_per_block(const aie_conv2d_params *p) {
    int64_t t = (int64_t)WG_V_BYTES / (WG_XI * p->C * (int64_t)sizeof(float));
    t = t / AIE_CONV_DIRECT_MR_MAX * AIE_CONV_DIRECT_MR_MAX;
    return t < AIE_CONV_DIRECT_MR_MAX ? AIE_CONV_DIRECT_MR_MAX : t;
}

static size_t slot_floats(const aie_conv2d_params *p) {
    size_t v = (size_t)(WG_XI * tiles_per_block(p) * p->C), m = (size_t)WG_XI * AIE_CONV_DIRECT_MR_MAX * WG_NR_MAX;
    return AIE_ROUND_UP((v + m) * sizeof(float), AIE_ALIGN) / sizeof(float);
}

size_t aie_conv_winograd_workspace(const aie_conv2d_params *p, int nthreads) {
    return slot_floats(p) * sizeof(float) * (size_t)(nthreads > 0 ? nthreads : 1) + AIE_ALIGN;
}

uint64_t aie_conv_winograd_xi_bytes(const aie_conv2d_params *p) {
    return AIE_ROUND_UP(aie_sgemm_packed_b_size(p->C, p->K), AIE_ALIGN);
}

int aie_conv_winograd_pack(const aie_conv2d_params *p, const float *w, char *body, uint64_t xi_bytes) {
    const int64_t C = p->C, K = p->K;
    float *u = malloc((size_t)(WG_XI * C * K) * sizeof(float));
    if (!u) return aie_fail(AIE_ENOMEM, "conv2d_pack_winograd: cannot allocate %lld floats", (long long)(16 * C * K));
    for (int64_t k = 0; k < K; k++)
        for (int64_t c = 0; c < C; c++) {
            const float *g = w + (k * C + c) * 9;
            /* G g G^T, G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1], in double */
            double t[4][3], v[4][4];
            for (int s = 0; s < 3; s++) {
                t[0][s] = g[s];
                t[1][s] = 0.5 * ((double)g[s] + g[3 + s] + g[6 + s]);
                t[2][s] = 0.5 * ((double)g[s] - g[3 + s] + g[6 + s]);
                t[3][s] = g[6 + s];
            }
            for (int r = 0; r < 4; r++) {
                v[r][0] = t[r][0];
                v[r][1] = 0.5 * (t[r][0] + t[r][1] + t[r][2]);
                v[r][2] = 0.5 * (t[r][0] - t[r][1] + t[r][2]);
                v[r][3] = t[r][2];
            }
            for (int xi = 0; xi < WG_XI; xi++) u[(xi * C + c) * K + k] = (float)v[xi / 4][xi % 4];
        }
    int rc = AIE_OK;
    for (int xi = 0; xi < WG_XI && rc == AIE_OK; xi++)
        rc = aie_sgemm_pack_b(0, C, K, u + xi * C * K, K, body + (size_t)xi * xi_bytes, xi_bytes);
    free(u);
    return rc;
}

typedef struct {
    aie_winograd_args a;
    aie_winograd_args a_plain; /* a without the activation: act_runs applies it (see wg_task) */
    aie_epilogue ep_plain;
    int act_runs;
    const aie_winograd_kernel *tr;
    const aie_conv_direct_shape *k;
    int nr;
    int64_t ntiles, T, parts, panels_per_part;
    const char *body;
    uint64_t xi_bytes;
    float *ws;
    size_t slot;
} wg_ctx;

static const float *panel_of(const wg_ctx *d, int xi, int64_t j) {
    /* each U_xi is an aie_sgemm_pack_b blob: a 64-byte header, then C x NR panels */
    return (const float *)(d->body + (size_t)xi * d->xi_bytes + aie_sgemm_packed_b_size(0, 0)) + j * d->a.p->C;
}

/* Activations the output transform would apply per stored pixel row of one
 * panel (act_row); the clamps stay there, a min/max before the store. */
static int act_in_runs(int act) { return act != AIE_U_IDENTITY && act != AIE_U_RELU && act != AIE_U_CLIP; }

/* The activation over the output pixels of tiles [t0, t0 + nt), all K
 * channels: per tile row, each of its two pixel rows is one contiguous run
 * of y. */
static void act_tiles(const wg_ctx *d, int64_t t0, int64_t nt) {
    const aie_winograd_args *a = &d->a;
    const int64_t K = a->p->K, per_image = a->th * a->tw, t_end = t0 + nt;
    for (int64_t t = t0; t < t_end;) {
        const int64_t n = t / per_image, ti = t % per_image / a->tw, tj = t % a->tw;
        const int64_t len = a->tw - tj < t_end - t ? a->tw - tj : t_end - t; /* tiles left in this tile row */
        const int64_t q0 = 2 * tj, q1 = 2 * (tj + len) < a->Q ? 2 * (tj + len) : a->Q;
        for (int64_t oh = 2 * ti; oh < 2 * ti + 2 && oh < a->P; oh++) {
            float *r = a->y + ((n * a->P + oh) * a->Q + q0) * K;
            aie_kernels()->vm->unary(a->ep->act, r, r, (q1 - q0) * K, a->ep->p0, a->ep->p1);
        }
        t += len;
    }
}

static void wg_task(void *ctx, int64_t task, int worker) {
    const wg_ctx *d = ctx;
    const int64_t C = d->a.p->C, K = d->a.p->K, nr = d->nr, mr = d->k->mr;
    const int64_t t0 = task / d->parts * d->T, nt = t0 + d->T < d->ntiles ? d->T : d->ntiles - t0;
    const int64_t npanels = (K + nr - 1) / nr, part = task % d->parts;
    const int64_t pa = part * d->panels_per_part;
    const int64_t pb = pa + d->panels_per_part < npanels ? pa + d->panels_per_part : npanels;
    float *v = d->ws + (size_t)worker * d->slot, *m = v + WG_XI * d->T * C;
    if (pa >= pb) return;
    /* A transcendental activation (SiLU in YOLO-style networks) over the
     * block's whole output rows afterwards, through the standalone unary
     * loop, when this task computes every output channel: per pixel row of
     * one 16-wide panel (AVX2) act_row ran two vectors at a time, and the
     * fused SiLU cost ~2x a standalone pass (Zen 3, thread time, 3x3
     * 96->64 @40: 1.7-2.3 vs 0.9 ns per element). The block's outputs are
     * still in L2. Same function on the same values: the same bits. */
    const int act_runs = d->act_runs && pa == 0 && pb == npanels;
    const aie_winograd_args *args = act_runs ? &d->a_plain : &d->a;
    d->tr->input(&d->a, t0, nt, v, d->T * C);
    /* groups of tiles: ceil(nt / mr) of balanced heights (no tile twice) */
    const int64_t ngroups = (nt + mr - 1) / mr, base = nt / ngroups, extra = nt % ngroups;
    for (int64_t jp = pa; jp < pb; jp++) {
        const int64_t j = jp * nr;
        const int ncols = (int)(K - j < nr ? K - j : nr);
        for (int64_t g = 0, i0 = 0; g < ngroups; g++) {
            const int64_t mt = base + (g < extra);
            const aie_conv_direct_tile_fn tile = d->k->tile[mt];
            /* while this panel runs from L2, bring the next one's 16 slices:
             * alternate groups take alternate cache lines of it */
            const int pf_on = jp + 1 < pb;
            for (int xi = 0; xi < WG_XI; xi++) {
                const aie_conv_seg seg = {v + xi * d->T * C + i0 * C, C, 0, C};
                const float *w = panel_of(d, xi, j);
                const float *pf = pf_on ? w + nr * C + (g & 1) * 16 : w;
                tile(1, &seg, w, NULL, NULL, m + xi * mr * nr, nr, (int)nr, NULL, pf, pf_on ? nr : 0);
            }
            d->tr->output(args, t0 + i0, mt, m, mr * nr, nr, j, ncols);
            i0 += mt;
        }
    }
    if (act_runs) act_tiles(d, t0, nt);
}

int aie_conv_winograd_run(const aie_conv2d_params *p, int64_t P, int64_t Q, const float *x, const char *body,
                          uint64_t xi_bytes, const float *bias, const float *residual, const aie_epilogue *ep,
                          float *y, void *workspace, size_t workspace_size, int nthreads) {
    size_t need = aie_conv_winograd_workspace(p, nthreads);
    if (!workspace || workspace_size < need)
        return aie_fail(AIE_ENOMEM, "conv2d: workspace of %zu bytes, need %zu (aie_conv2d_workspace_size)",
                        workspace ? workspace_size : 0, need);
    const aie_conv_direct_kernel *kern = aie_kernels()->conv_direct;
    const int64_t th = (P + 1) / 2, tw = (Q + 1) / 2, ntiles = p->N * th * tw;
    const int64_t npanels = (p->K + kern->nr - 1) / kern->nr;
    int64_t T = tiles_per_block(p), nblocks = (ntiles + T - 1) / T;
    /* ~4 tasks per thread: tile blocks first, then parts of the output
     * channels (each part transforms its block's tiles again: cheap beside
     * the products, and it keeps small images busy on every thread) */
    const int64_t want = nthreads > 1 ? 4 * (int64_t)nthreads : 1;
    if (kern->winograd_block_min && nblocks < want) {
        /* smaller blocks before channel parts, where the ISA says so */
        int64_t t = AIE_ROUND_UP((ntiles + want - 1) / want, kern->wide.mr);
        if (t < kern->winograd_block_min) t = kern->winograd_block_min;
        if (t < T) {
            T = t;
            nblocks = (ntiles + T - 1) / T;
        }
    }
    int64_t parts = nblocks >= want ? 1 : (want + nblocks - 1) / nblocks;
    if (parts > npanels) parts = npanels;
    const int64_t per_part = (npanels + parts - 1) / parts;
    parts = (npanels + per_part - 1) / per_part;
    wg_ctx d = {
        .a = {p, P, Q, th, tw, x, bias, residual, ep, y},
        .tr = aie_kernels()->winograd,
        .k = &kern->wide, .nr = kern->nr,
        .ntiles = ntiles, .T = T, .parts = parts, .panels_per_part = per_part,
        .body = body, .xi_bytes = xi_bytes,
        .ws = (float *)AIE_ROUND_UP((uintptr_t)workspace, AIE_ALIGN), .slot = slot_floats(p),
    };
    if (ep && act_in_runs(ep->act)) {
        d.act_runs = 1;
        d.ep_plain = *ep;
        d.ep_plain.act = AIE_U_IDENTITY;
        d.a_plain = d.a;
        d.a_plain.ep = &d.ep_plain;
    }
    aie_parallel_dynamic(nblocks * parts, nthreads, wg_task, &d);
    return AIE_OK;
}
