/*
 * aie_conv2d_dw_pw (aie_conv.h): a depthwise conv and the 1x1 stride-1 conv
 * that reads its output (MobileNet's depthwise -> project pair) in one pass,
 * the depthwise output never written to y's memory: for each tile of up to
 * MR pixels of an output row, the depthwise span kernel writes the tile's C
 * channels into a per-thread scratch (L1/L2-sized: MR x C floats) and the
 * direct conv kernel's tiles read it there as their one segment.
 *
 * Why: at batch > 1 that intermediate (C = 6x the block's channels) does not
 * fit in L2; unfused it is written out to L3/DRAM by one step and read back
 * by the next.
 *
 * Bits: the depthwise pixels come from the same kernel as aie_conv2d's
 * (dwconv_span: the rows kernel's arithmetic), and each 1x1 tile sums one
 * segment of C rows from k0 = 0, as aie_conv2d's direct path does for a 1x1
 * stride-1 conv, so y is bitwise what the two aie_conv2d calls give when the
 * second takes the direct path (AUTO does for C <= AIE_CONV_DIRECT_MAX_ROWS
 * and N*H*W >= half a tile). Output rows are handed out dynamically; the
 * arithmetic does not depend on the worker, so any thread count gives the
 * same bits.
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

static size_t slot_bytes(const aie_conv2d_params *pw) {
    return AIE_ROUND_UP((size_t)DWPW_MR_MAX * (size_t)pw->C * sizeof(float), AIE_ALIGN);
}

/* The pair's shapes fit together (messages name the first mismatch). */
static int check_pair(const aie_conv2d_params *dw, const aie_conv2d_params *pw, int64_t *P, int64_t *Q) {
    int rc = aie_conv2d_output_shape(dw, P, Q);
    if (rc) return rc;
    if ((rc = aie_conv_check_params(pw, "conv2d_dw_pw"))) return rc;
    if (!(dw->groups == dw->C && dw->groups == dw->K && dw->C > 1))
        return aie_fail(AIE_EINVAL, "conv2d_dw_pw: the first conv must be depthwise (groups == C == K > 1), got "
                                    "C=%lld K=%lld groups=%lld",
                        (long long)dw->C, (long long)dw->K, (long long)dw->groups);
    if (!is_pointwise_s1(pw))
        return aie_fail(AIE_EINVAL, "conv2d_dw_pw: the second conv must be 1x1, stride 1, unpadded, groups 1 "
                                    "(got %lldx%lld, strides %lld,%lld, groups %lld)",
                        (long long)pw->R, (long long)pw->S, (long long)pw->stride_h, (long long)pw->stride_w,
                        (long long)pw->groups);
    if (pw->N != dw->N || pw->H != *P || pw->W != *Q || pw->C != dw->K)
        return aie_fail(AIE_EINVAL, "conv2d_dw_pw: the 1x1 conv reads N=%lld H=%lld W=%lld C=%lld, the depthwise "
                                    "conv writes N=%lld H=%lld W=%lld C=%lld",
                        (long long)pw->N, (long long)pw->H, (long long)pw->W, (long long)pw->C, (long long)dw->N,
                        (long long)*P, (long long)*Q, (long long)dw->K);
    return AIE_OK;
}

size_t aie_conv2d_dw_pw_workspace_size(const aie_conv2d_params *dw, const aie_conv2d_params *pw, int nthreads) {
    int64_t P, Q;
    if (!dw || !pw || check_pair(dw, pw, &P, &Q)) return 0;
    int nt = nthreads > 0 ? nthreads : aie_threads_get();
    return slot_bytes(pw) * (size_t)(nt > 0 ? nt : 1) + AIE_ALIGN;
}

typedef struct {
    aie_dwconv_args dw;
    const aie_conv2d_params *pw;
    const aie_conv_direct_shape *k;
    int nr;
    int64_t rows_per_task;
    const float *pb, *bias, *res;
    const aie_epilogue *ep;
    float *y;
    char *scratch;
    size_t slot;
} dwpw_ctx;

static void dwpw_task(void *ctx, int64_t task, int worker) {
    const dwpw_ctx *d = ctx;
    const int64_t Q = d->dw.Q, C = d->pw->C, K = d->pw->K, mr = d->k->mr, nr = d->nr, ncols_max = d->k->ncols;
    const int64_t rows = d->dw.p->N * d->dw.P;
    const int64_t r0 = task * d->rows_per_task, r1 = r0 + d->rows_per_task < rows ? r0 + d->rows_per_task : rows;
    float *scratch = (float *)(d->scratch + (size_t)worker * d->slot);
    aie_dwconv_span_fn *const span = aie_kernels()->dwconv_span;
    /* balanced tiles: ceil(Q / mr) of them, heights differing by at most one */
    const int64_t ntiles = (Q + mr - 1) / mr, base = Q / ntiles, extra = Q % ntiles;
    for (int64_t row = r0; row < r1; row++) {
        for (int64_t t = 0, q0 = 0; t < ntiles; t++) {
            const int64_t mt = base + (t < extra);
            span(&d->dw, row, q0, q0 + mt, scratch);
            const aie_conv_seg seg = {scratch, C, 0, C};
            const int64_t off = (row * Q + q0) * K;
            const aie_conv_direct_tile_fn tile = d->k->tile[mt];
            for (int64_t j = 0; j < K; j += nr) {
                const int ncols = (int)(K - j < ncols_max ? K - j : ncols_max);
                tile(1, &seg, d->pb + j * C, d->bias ? d->bias + j : NULL, d->res ? d->res + off + j : NULL,
                     d->y + off + j, K, ncols, d->ep, d->pb, 0);
            }
            q0 += mt;
        }
    }
}

int aie_conv2d_dw_pw(const aie_conv2d_params *dw, const float *x, const void *dw_packed, const float *dw_bias,
                     const aie_epilogue *dw_ep, const aie_conv2d_params *pw, const void *pw_packed,
                     const float *pw_bias, const float *residual, const aie_epilogue *pw_ep, float *y,
                     void *workspace, size_t workspace_size, int nthreads) {
    int rc = aie_ensure_init();
    if (rc) return aie_init();
    if (!dw || !pw) return aie_fail(AIE_EINVAL, "conv2d_dw_pw: params is NULL");
    int64_t P, Q;
    if ((rc = check_pair(dw, pw, &P, &Q))) return rc;
    aie_epilogue dwe, pwe;
    /* x stands in for the intermediate the pair never stores: only non-NULL matters */
    if ((rc = aie_conv_check_call(dw, x, dw_packed, x, dw_ep, AIE_CONV_PACK_DEPTHWISE, "conv2d_dw_pw (depthwise)",
                                  &dwe)))
        return rc;
    if ((rc = aie_conv_check_call(pw, x, pw_packed, y, pw_ep, AIE_CONV_PACK_GEMM, "conv2d_dw_pw (1x1)", &pwe)))
        return rc;
    if (dw->N == 0) return AIE_OK;
    int nt = nthreads > 0 ? nthreads : aie_threads_get();
    if (nt < 1) nt = 1;
    const size_t slot = slot_bytes(pw), need = slot * (size_t)nt + AIE_ALIGN;
    if (!workspace || workspace_size < need)
        return aie_fail(AIE_ENOMEM, "conv2d_dw_pw: workspace of %zu bytes, need %zu (aie_conv2d_dw_pw_workspace_size)",
                        workspace ? workspace_size : 0, need);
    const aie_conv_direct_kernel *kern = aie_kernels()->conv_direct;
    /* narrow tiles when every output channel fits in half a panel and a row
     * fills half of one (the direct path's rule, per output row here) */
    const aie_conv_direct_shape *k = pw->K <= kern->narrow.ncols && Q >= kern->narrow.mr / 2 ? &kern->narrow
                                                                                              : &kern->wide;
    const int64_t rows = dw->N * P, pieces = nt > 1 ? 4 * (int64_t)nt : 1;
    const aie_conv_pack_header *dh = dw_packed, *ph = pw_packed;
    dwpw_ctx d = {
        .dw = {dw, P, Q, x, (const float *)(const void *)(dh + 1), dw_bias, NULL, &dwe, NULL},
        .pw = pw, .k = k, .nr = kern->nr,
        .rows_per_task = (rows + pieces - 1) / pieces,
        /* group 0's body is an aie_sgemm_pack_b blob: a 64-byte header
         * (aie_sgemm_packed_b_size(0, 0)), then the panels */
        .pb = (const float *)((const char *)(ph + 1) + aie_sgemm_packed_b_size(0, 0)),
        .bias = pw_bias, .res = residual, .ep = &pwe, .y = y,
        .scratch = (char *)AIE_ROUND_UP((uintptr_t)workspace, AIE_ALIGN), .slot = slot,
    };
    aie_parallel_dynamic((rows + d.rows_per_task - 1) / d.rows_per_task, nt, dwpw_task, &d);
    return AIE_OK;
}
