/*
 * aie_conv2d_dw_pw (aie_conv.h): MobileNetV2's inverted-residual block -- an
 * optional 1x1 expand conv, a depthwise conv and the 1x1 project conv on its
 * output -- in one pass whose intermediates never reach memory:
 *   - expand: each expanded input row is computed by the direct conv
 *     kernel's tiles into a per-thread ring of the depthwise window's rows
 *     (row h at slot h % rows: a row is overwritten only when no later
 *     output row reads it), right before the first output row that needs it;
 *   - depthwise -> project: for each tile of up to MR pixels of an output
 *     row the depthwise span kernel (dwconv_span, reading the ring or x)
 *     writes the tile's channels into a per-thread scratch and the direct
 *     kernel's tiles read them there as their one segment.
 *
 * Why: at batch > 1 the expanded tensors (6x the block's channels) do not
 * fit in L2; as separate steps each is written out to L3/DRAM and read
 * back, and that traffic, not the FMAs, was most of the block's time.
 *
 * Bits: every expanded and depthwise value comes from the same kernel and
 * the same single segment (k0 = 0, all C rows) as aie_conv2d's direct path
 * for a 1x1 stride-1 conv and its depthwise path, so y is bitwise what the
 * separate aie_conv2d calls give when the 1x1 convs take the direct path
 * (AUTO does for C <= AIE_CONV_DIRECT_MAX_ROWS and N*H*W >= half a tile).
 * Work is handed out as bands of output rows of one image; a band
 * recomputes the expanded rows its window shares with the band before, so
 * the bits do not depend on the banding or the thread count.
 */
#include "conv_direct.h"
#include "conv_kernels.h"
#include "conv_pack.h"
#include "gemm_internal.h"
#include "kernel_table.h"
#include "threadpool.h"

/* Scratch pixels per worker: the tallest tile of any ISA, so a workspace
 * sized under one ISA stays valid after tests switch it. */
#define DWPW_MR_MAX AIE_CONV_DIRECT_MR_MAX

static int is_pointwise_s1(const aie_conv2d_params *p) {
    return p->R == 1 && p->S == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_top == 0 && p->pad_left == 0 &&
           p->pad_bottom == 0 && p->pad_right == 0 && p->groups == 1;
}

/* Rows of the depthwise window: the ring of expanded rows holds that many. */
static int64_t window_rows(const aie_conv2d_params *dw) { return (dw->R - 1) * dw->dil_h + 1; }

static size_t slot_bytes(const aie_conv2d_params *ex, const aie_conv2d_params *dw) {
    size_t tile = AIE_ROUND_UP((size_t)DWPW_MR_MAX * (size_t)dw->K * sizeof(float), AIE_ALIGN);
    size_t ring = ex ? AIE_ROUND_UP((size_t)(window_rows(dw) * dw->W * dw->C) * sizeof(float), AIE_ALIGN) : 0;
    return tile + ring;
}

/* The block's shapes fit together (messages name the first mismatch). */
static int check_block(const aie_conv2d_params *ex, const aie_conv2d_params *dw, const aie_conv2d_params *pw,
                       int64_t *P, int64_t *Q) {
    int rc = aie_conv2d_output_shape(dw, P, Q);
    if (rc) return rc;
    if ((rc = aie_conv_check_params(pw, "conv2d_dw_pw"))) return rc;
    if (ex && (rc = aie_conv_check_params(ex, "conv2d_dw_pw"))) return rc;
    if (!(dw->groups == dw->C && dw->groups == dw->K && dw->C > 1))
        return aie_fail(AIE_EINVAL, "conv2d_dw_pw: the middle conv must be depthwise (groups == C == K > 1), got "
                                    "C=%lld K=%lld groups=%lld",
                        (long long)dw->C, (long long)dw->K, (long long)dw->groups);
    for (int i = 0; i < 2; i++) {
        const aie_conv2d_params *c = i ? ex : pw;
        if (c && !is_pointwise_s1(c))
            return aie_fail(AIE_EINVAL, "conv2d_dw_pw: the %s conv must be 1x1, stride 1, unpadded, groups 1 "
                                        "(got %lldx%lld, strides %lld,%lld, groups %lld)",
                            i ? "expand" : "project", (long long)c->R, (long long)c->S, (long long)c->stride_h,
                            (long long)c->stride_w, (long long)c->groups);
    }
    if (ex && (ex->N != dw->N || ex->H != dw->H || ex->W != dw->W || ex->K != dw->C))
        return aie_fail(AIE_EINVAL, "conv2d_dw_pw: the expand conv writes N=%lld H=%lld W=%lld C=%lld, the "
                                    "depthwise conv reads N=%lld H=%lld W=%lld C=%lld",
                        (long long)ex->N, (long long)ex->H, (long long)ex->W, (long long)ex->K, (long long)dw->N,
                        (long long)dw->H, (long long)dw->W, (long long)dw->C);
    if (pw->N != dw->N || pw->H != *P || pw->W != *Q || pw->C != dw->K)
        return aie_fail(AIE_EINVAL, "conv2d_dw_pw: the project conv reads N=%lld H=%lld W=%lld C=%lld, the "
                                    "depthwise conv writes N=%lld H=%lld W=%lld C=%lld",
                        (long long)pw->N, (long long)pw->H, (long long)pw->W, (long long)pw->C, (long long)dw->N,
                        (long long)*P, (long long)*Q, (long long)dw->K);
    return AIE_OK;
}

size_t aie_conv2d_dw_pw_workspace_size(const aie_conv2d_params *ex, const aie_conv2d_params *dw,
                                       const aie_conv2d_params *pw, int nthreads) {
    int64_t P, Q;
    if (!dw || !pw || check_block(ex, dw, pw, &P, &Q)) return 0;
    int nt = nthreads > 0 ? nthreads : aie_threads_get();
    return slot_bytes(ex, dw) * (size_t)(nt > 0 ? nt : 1) + AIE_ALIGN;
}

/* The direct kernel's tile shape for a 1x1 conv with k output channels over
 * rows of `pixels`: narrow when every channel fits in half a panel and a
 * row fills half a narrow tile (the direct path's rule). */
static const aie_conv_direct_shape *shape_for(const aie_conv_direct_kernel *kern, int64_t k, int64_t pixels) {
    return k <= kern->narrow.ncols && pixels >= kern->narrow.mr / 2 ? &kern->narrow : &kern->wide;
}

typedef struct {
    const float *a;       /* pixel i's C inputs at a + i * C */
    const float *pb;      /* the packed weight panels (C rows each) */
    const float *bias;
    const aie_epilogue *ep;
} pw_conv;

/* `pixels` consecutive outputs of a 1x1 conv (C -> K) into c (rows ldc
 * apart), residual res (or NULL) likewise: balanced tiles of the shape. */
static void pointwise_run(const pw_conv *cv, const aie_conv_direct_shape *k, int nr, int64_t C, int64_t K,
                          int64_t pixels, const float *res, float *c, int64_t ldc) {
    const int64_t ntiles = (pixels + k->mr - 1) / k->mr, base = pixels / ntiles, extra = pixels % ntiles;
    for (int64_t t = 0, i0 = 0; t < ntiles; t++) {
        const int64_t mt = base + (t < extra);
        const aie_conv_seg seg = {cv->a + i0 * C, C, 0, C};
        const aie_conv_direct_tile_fn tile = k->tile[mt];
        for (int64_t j = 0; j < K; j += nr) {
            const int ncols = (int)(K - j < k->ncols ? K - j : k->ncols);
            tile(1, &seg, cv->pb + j * C, cv->bias ? cv->bias + j : NULL, res ? res + i0 * ldc + j : NULL,
                 c + i0 * ldc + j, ldc, ncols, cv->ep, cv->pb, 0);
        }
        i0 += mt;
    }
}

typedef struct {
    aie_dwconv_args dw;
    const aie_conv2d_params *ex, *pw;
    const aie_conv_direct_shape *kx, *k;
    int nr;
    int64_t bands, band; /* output rows of an image in `bands` bands of `band` rows */
    pw_conv expand, project;
    const float *x, *res;
    float *y;
    char *scratch;
    size_t slot;
} dwpw_ctx;

static void dwpw_task(void *ctx, int64_t task, int worker) {
    const dwpw_ctx *d = ctx;
    const aie_conv2d_params *dp = d->dw.p;
    const int64_t P = d->dw.P, Q = d->dw.Q, C = dp->K, K = d->pw->K, mr = d->k->mr;
    const int64_t n = task / d->bands, p0 = task % d->bands * d->band;
    const int64_t p1 = p0 + d->band < P ? p0 + d->band : P;
    float *scratch = (float *)(d->scratch + (size_t)worker * d->slot);
    aie_dwconv_args a = d->dw;
    aie_dwconv_span_fn *const span = aie_kernels()->dwconv_span;
    const int64_t span_h = window_rows(dp), pitch = dp->W * dp->C;
    float *ring = scratch + AIE_ROUND_UP((size_t)DWPW_MR_MAX * (size_t)C * sizeof(float), AIE_ALIGN) / sizeof(float);
    if (d->ex) {
        a.ring = ring;
        a.ring_rows = span_h;
    }
    int64_t next = 0; /* the first expanded row not computed yet */
    const int64_t ntiles = (Q + mr - 1) / mr, base = Q / ntiles, extra = Q % ntiles;
    for (int64_t p = p0; p < p1; p++) {
        if (d->ex) {
            int64_t lo = p * dp->stride_h - dp->pad_top, hi = lo + span_h;
            if (lo < 0) lo = 0;
            if (hi > dp->H) hi = dp->H;
            if (next < lo) next = lo;
            for (; next < hi; next++) {
                pw_conv e = d->expand;
                e.a = d->x + (n * dp->H + next) * dp->W * d->ex->C;
                pointwise_run(&e, d->kx, d->nr, d->ex->C, dp->C, dp->W, NULL, ring + next % span_h * pitch, dp->C);
            }
        }
        const int64_t row = n * P + p;
        for (int64_t t = 0, q0 = 0; t < ntiles; t++) {
            const int64_t mt = base + (t < extra);
            span(&a, row, q0, q0 + mt, scratch);
            pw_conv pj = d->project;
            pj.a = scratch;
            const int64_t off = (row * Q + q0) * K;
            pointwise_run(&pj, d->k, d->nr, C, K, mt, d->res ? d->res + off : NULL, d->y + off, K);
            q0 += mt;
        }
    }
}

/* The panels of a GEMM-kind conv blob: group 0's body is an aie_sgemm_pack_b
 * blob, a 64-byte header (aie_sgemm_packed_b_size(0, 0)) then the panels. */
static const float *panels(const void *packed) {
    return (const float *)((const char *)packed + sizeof(aie_conv_pack_header) + aie_sgemm_packed_b_size(0, 0));
}

int aie_conv2d_dw_pw(const aie_conv_stage *ex, const aie_conv_stage *dw, const aie_conv_stage *pw, const float *x,
                     const float *residual, float *y, void *workspace, size_t workspace_size, int nthreads) {
    int rc = aie_ensure_init();
    if (rc) return aie_init();
    if (!dw || !pw || !dw->p || !pw->p || (ex && !ex->p))
        return aie_fail(AIE_EINVAL, "conv2d_dw_pw: a stage or its params is NULL");
    const aie_conv2d_params *xp = ex ? ex->p : NULL, *dp = dw->p, *pp = pw->p;
    int64_t P, Q;
    if ((rc = check_block(xp, dp, pp, &P, &Q))) return rc;
    aie_epilogue xe, de, pe;
    /* x stands in for the intermediates the block never stores: only non-NULL matters */
    if (ex && (rc = aie_conv_check_call(xp, x, ex->packed, x, ex->ep, AIE_CONV_PACK_GEMM, "conv2d_dw_pw (expand)",
                                        &xe)))
        return rc;
    if ((rc = aie_conv_check_call(dp, x, dw->packed, x, dw->ep, AIE_CONV_PACK_DEPTHWISE,
                                  "conv2d_dw_pw (depthwise)", &de)))
        return rc;
    if ((rc = aie_conv_check_call(pp, x, pw->packed, y, pw->ep, AIE_CONV_PACK_GEMM, "conv2d_dw_pw (project)", &pe)))
        return rc;
    if (dp->N == 0) return AIE_OK;
    int nt = nthreads > 0 ? nthreads : aie_threads_get();
    if (nt < 1) nt = 1;
    const size_t slot = slot_bytes(xp, dp), need = slot * (size_t)nt + AIE_ALIGN;
    if (!workspace || workspace_size < need)
        return aie_fail(AIE_ENOMEM, "conv2d_dw_pw: workspace of %zu bytes, need %zu (aie_conv2d_dw_pw_workspace_size)",
                        workspace ? workspace_size : 0, need);
    const aie_conv_direct_kernel *kern = aie_kernels()->conv_direct;
    /* ~4 bands per thread over all images; with an expand conv a band
     * recomputes up to window - stride expanded rows, so bands stay >= 8
     * rows unless that leaves a thread without one (batch 1, 7x7) */
    const int64_t pieces = nt > 1 ? 4 * (int64_t)nt : 1;
    int64_t bands = (pieces + dp->N - 1) / dp->N;
    const int64_t min_band = ex ? 8 : 1, per_thread = (nt + dp->N - 1) / dp->N;
    int64_t cap = (P + min_band - 1) / min_band;
    if (cap < per_thread) cap = per_thread;
    if (bands > cap) bands = cap;
    if (bands > P) bands = P;
    const int64_t band = (P + bands - 1) / bands;
    bands = (P + band - 1) / band;
    const aie_conv_pack_header *dh = dw->packed;
    dwpw_ctx d = {
        .dw = {dp, P, Q, x, (const float *)(const void *)(dh + 1), dw->bias, NULL, &de, NULL, NULL, 0},
        .ex = xp, .pw = pp,
        .kx = ex ? shape_for(kern, dp->C, dp->W) : NULL, .k = shape_for(kern, pp->K, Q), .nr = kern->nr,
        .bands = bands, .band = band,
        .expand = {NULL, ex ? panels(ex->packed) : NULL, ex ? ex->bias : NULL, &xe},
        .project = {NULL, panels(pw->packed), pw->bias, &pe},
        .x = x, .res = residual, .y = y,
        .scratch = (char *)AIE_ROUND_UP((uintptr_t)workspace, AIE_ALIGN), .slot = slot,
    };
    aie_parallel_dynamic(dp->N * bands, nt, dwpw_task, &d);
    return AIE_OK;
}
