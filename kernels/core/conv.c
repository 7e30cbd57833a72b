/*
 * aie_conv2d driver: validates params, packs weights, picks the algorithm
 * (depthwise direct / 1x1 GEMM / implicit-GEMM with im2col packed straight
 * into the GEMM's A panels, see aie_conv.h) and
 * splits the work over threads. The arithmetic lives in the GEMM and in the
 * per-ISA depthwise kernels.
 */
#include <stdlib.h>
#include <string.h>

#include "conv_direct.h"
#include "conv_kernels.h"
#include "conv_pack.h"
#include "conv_winograd.h"
#include "gemm_internal.h"
#include "kernel_table.h"
#include "threadpool.h"

int aie_conv_check_params(const aie_conv2d_params *p, const char *op) {
    if (!p) return aie_fail(AIE_EINVAL, "%s: params is NULL", op);
    if (p->N < 0 || p->H < 1 || p->W < 1 || p->C < 1 || p->K < 1 || p->R < 1 || p->S < 1)
        return aie_fail(AIE_EINVAL,
                        "%s: bad shape N=%lld H=%lld W=%lld C=%lld K=%lld R=%lld S=%lld (expected N >= 0, others >= 1)",
                        op, (long long)p->N, (long long)p->H, (long long)p->W, (long long)p->C, (long long)p->K,
                        (long long)p->R, (long long)p->S);
    if (p->stride_h < 1 || p->stride_w < 1 || p->dil_h < 1 || p->dil_w < 1)
        return aie_fail(AIE_EINVAL, "%s: strides (%lld, %lld) and dilations (%lld, %lld) must be >= 1", op,
                        (long long)p->stride_h, (long long)p->stride_w, (long long)p->dil_h, (long long)p->dil_w);
    if (p->pad_top < 0 || p->pad_left < 0 || p->pad_bottom < 0 || p->pad_right < 0)
        return aie_fail(AIE_EINVAL, "%s: pads (%lld, %lld, %lld, %lld) must be >= 0", op, (long long)p->pad_top,
                        (long long)p->pad_left, (long long)p->pad_bottom, (long long)p->pad_right);
    if (p->groups < 1 || p->C % p->groups || p->K % p->groups)
        return aie_fail(AIE_EINVAL, "%s: groups=%lld must be >= 1 and divide C=%lld and K=%lld", op,
                        (long long)p->groups, (long long)p->C, (long long)p->K);
    return AIE_OK;
}

int aie_conv2d_output_shape(const aie_conv2d_params *p, int64_t *P, int64_t *Q) {
    int rc = aie_conv_check_params(p, "conv2d");
    if (rc) return rc;
    int64_t span_h = (p->R - 1) * p->dil_h + 1, span_w = (p->S - 1) * p->dil_w + 1;
    int64_t in_h = p->H + p->pad_top + p->pad_bottom, in_w = p->W + p->pad_left + p->pad_right;
    if (span_h > in_h || span_w > in_w)
        return aie_fail(AIE_EINVAL, "conv2d: dilated kernel %lldx%lld is larger than the padded input %lldx%lld",
                        (long long)span_h, (long long)span_w, (long long)in_h, (long long)in_w);
    if (P) *P = (in_h - span_h) / p->stride_h + 1;
    if (Q) *Q = (in_w - span_w) / p->stride_w + 1;
    return AIE_OK;
}

static int is_depthwise(const aie_conv2d_params *p) { return p->groups == p->C && p->groups == p->K && p->C > 1; }

static int is_pointwise(const aie_conv2d_params *p) {
    return p->R == 1 && p->S == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_top == 0 && p->pad_left == 0 &&
           p->pad_bottom == 0 && p->pad_right == 0;
}

/* ---- packing ------------------------------------------------------------ */

static int64_t gemm_rows(const aie_conv2d_params *p) { return p->R * p->S * (p->C / p->groups); }

size_t aie_conv2d_packed_size(const aie_conv2d_params *p) {
    if (aie_conv_check_params(p, "conv2d_packed_size")) return 0;
    size_t body;
    if (is_depthwise(p)) {
        body = (size_t)(p->R * p->S * p->C) * sizeof(float);
    } else {
        body = AIE_ROUND_UP(aie_sgemm_packed_b_size(gemm_rows(p), p->K / p->groups), AIE_ALIGN) * (size_t)p->groups;
    }
    return sizeof(aie_conv_pack_header) + body;
}

int aie_conv2d_pack_weights(const aie_conv2d_params *p, const float *w, void *packed, size_t packed_size) {
    int rc = aie_conv_check_params(p, "conv2d_pack_weights");
    if (rc) return rc;
    if (!w || !packed) return aie_fail(AIE_EINVAL, "conv2d_pack_weights: NULL weights or destination");
    size_t need = aie_conv2d_packed_size(p);
    if (packed_size < need)
        return aie_fail(AIE_ENOMEM, "conv2d_pack_weights: destination holds %zu bytes, need %zu", packed_size, need);
    aie_conv_pack_header *h = packed;
    aie_conv_pack_header_fill(h, p, is_depthwise(p) ? AIE_CONV_PACK_DEPTHWISE : AIE_CONV_PACK_GEMM);
    char *body = (char *)packed + sizeof *h;
    const int64_t RS = p->R * p->S, Cg = p->C / p->groups, Kg = p->K / p->groups;
    if (h->kind == AIE_CONV_PACK_DEPTHWISE) {
        /* OIHW with I = 1 -> [tap][channel]: one vector load per tap */
        float *dw = (float *)body;
        for (int64_t c = 0; c < p->C; c++)
            for (int64_t t = 0; t < RS; t++) dw[t * p->C + c] = w[c * RS + t];
        return AIE_OK;
    }
    /* B of group g: rows (r, s, c) — the im2col row order, taps outer so
     * each tap is one contiguous NHWC channel run — columns k of the group. */
    const int64_t rows = gemm_rows(p);
    float *b = malloc((size_t)(rows * Kg) * sizeof(float));
    if (!b) return aie_fail(AIE_ENOMEM, "conv2d_pack_weights: cannot allocate %lld floats", (long long)(rows * Kg));
    rc = AIE_OK;
    for (int64_t g = 0; g < p->groups && rc == AIE_OK; g++) {
        for (int64_t k = 0; k < Kg; k++)
            for (int64_t c = 0; c < Cg; c++)
                for (int64_t t = 0; t < RS; t++) b[(t * Cg + c) * Kg + k] = w[((g * Kg + k) * Cg + c) * RS + t];
        rc = aie_sgemm_pack_b(0, rows, Kg, b, Kg, body + (size_t)g * h->group_bytes, h->group_bytes);
    }
    free(b);
    return rc;
}

/* ---- Winograd weights ---------------------------------------------------- */

int aie_conv2d_winograd_wins(const aie_conv2d_params *p) {
    if (!p) return 0;
    /* H = W = 0: the spatial size is not known yet (a converter packing
     * weights ahead of any input); decide from the channels alone */
    aie_conv2d_params q = *p;
    const int unknown = p->H == 0 && p->W == 0;
    if (unknown) q.H = q.W = 3;
    if (aie_conv_check_params(&q, "conv2d_winograd_wins") || !aie_conv_winograd_possible(&q)) return 0;
    /* Measured (benchmarks/bench_conv.py, AVX-512, 1 thread; the input
     * channel minimum is the ISA's, see winograd_min_c): 2.25x fewer
     * FMAs win wherever the 16/9 larger transformed weights still stream
     * from L2/L3 faster than the FMAs they save: up to 256 x 256 channels;
     * 512 x 512 at 7x7 (16 tiles) is bound by that stream and slower than
     * the direct kernel. Too few tiles, or tiny channel counts, leave the
     * 16 products too short to pay for the transforms. */
    if (p->C < aie_kernels()->conv_direct->winograd_min_c || p->K < 16 || p->C * p->K > 256 * 256) return 0;
    if (unknown) return 1;
    int64_t P, Q;
    if (aie_conv2d_output_shape(p, &P, &Q)) return 0;
    return ((P + 1) / 2) * ((Q + 1) / 2) >= AIE_CONV_WINOGRAD_MIN_TILES;
}

size_t aie_conv2d_winograd_packed_size(const aie_conv2d_params *p) {
    if (aie_conv_check_params(p, "conv2d_winograd_packed_size")) return 0;
    if (!aie_conv_winograd_possible(p)) {
        aie_fail(AIE_EINVAL, "conv2d_winograd_packed_size: Winograd needs a 3x3, stride-1, dilation-1, "
                             "ungrouped convolution (got %lldx%lld, strides %lld,%lld, dilations %lld,%lld, groups %lld)",
                 (long long)p->R, (long long)p->S, (long long)p->stride_h, (long long)p->stride_w,
                 (long long)p->dil_h, (long long)p->dil_w, (long long)p->groups);
        return 0;
    }
    return sizeof(aie_conv_pack_header) + 16 * (size_t)aie_conv_winograd_xi_bytes(p);
}

int aie_conv2d_pack_winograd(const aie_conv2d_params *p, const float *w, void *packed, size_t packed_size) {
    size_t need = aie_conv2d_winograd_packed_size(p);
    if (need == 0) return AIE_EINVAL;
    if (!w || !packed) return aie_fail(AIE_EINVAL, "conv2d_pack_winograd: NULL weights or destination");
    if (packed_size < need)
        return aie_fail(AIE_ENOMEM, "conv2d_pack_winograd: destination holds %zu bytes, need %zu", packed_size, need);
    aie_conv_pack_header *h = packed;
    aie_conv_pack_header_fill(h, p, AIE_CONV_PACK_WINOGRAD);
    return aie_conv_winograd_pack(p, w, (char *)packed + sizeof *h, h->group_bytes);
}

/* ---- workspace ---------------------------------------------------------- */

static int eff_threads(int nthreads) {
    int pool = aie_threads_get();
    return nthreads <= 0 ? (pool > 0 ? pool : 1) : nthreads;
}

/* Workspace: the GEMM's (one packed A block per thread; B is pre-packed).
 * The general path packs its im2col rows straight into those A blocks
 * (aie_gemm_pack_a_im2col), so it needs nothing more. */
static size_t workspace_total(const aie_conv2d_params *p, int64_t P, int64_t Q, int nt) {
    if (is_depthwise(p)) return 0;
    int64_t kd = is_pointwise(p) ? p->C / p->groups : gemm_rows(p);
    size_t g = aie_sgemm_packed_workspace_size(p->N * P * Q, p->K / p->groups, kd, nt);
    /* + AIE_ALIGN: the caller's pointer may be unaligned */
    g = g ? AIE_ROUND_UP(g, AIE_ALIGN) + AIE_ALIGN : 0;
    /* Room for the direct path wherever it can run, whatever the algo
     * setting: a workspace sized once stays valid if it changes. */
    if (p->groups == 1 && p->R * p->S <= AIE_CONV_DIRECT_MAX_TAPS) {
        size_t d = aie_conv_direct_workspace(p, nt);
        if (d > g) g = d;
    }
    /* ... and for Winograd: the blob decides, the size must not depend on it */
    if (aie_conv_winograd_possible(p)) {
        size_t w = aie_conv_winograd_workspace(p, nt);
        if (w > g) g = w;
    }
    return g;
}

size_t aie_conv2d_workspace_size(const aie_conv2d_params *p, int nthreads) {
    int64_t P, Q;
    if (aie_conv2d_output_shape(p, &P, &Q)) return 0;
    return workspace_total(p, P, Q, eff_threads(nthreads));
}

/* ---- execution ---------------------------------------------------------- */

/* Depthwise: output rows [t * dw_rows, ...) per task, handed out dynamically. */
typedef struct {
    aie_dwconv_args a;
    int64_t rows_per_task;
} dw_ctx;

static void dw_task(void *ctx, int64_t task, int worker) {
    const dw_ctx *d = ctx;
    const aie_dwconv_args *a = &d->a;
    (void)worker;
    int64_t rows = a->p->N * a->P;
    int64_t r0 = task * d->rows_per_task, r1 = r0 + d->rows_per_task < rows ? r0 + d->rows_per_task : rows;
    if (r0 < r1) aie_kernels()->dwconv(a, r0, r1);
}

int aie_conv2d(const aie_conv2d_params *p, const float *x, const void *packed_w, const float *bias,
               const float *residual, const aie_epilogue *ep, float *y, void *workspace, size_t workspace_size,
               int nthreads) {
    int64_t P, Q;
    int rc = aie_ensure_init();
    if (rc) return aie_init();
    if ((rc = aie_conv2d_output_shape(p, &P, &Q))) return rc;
    if (p->N == 0) return AIE_OK;
    aie_epilogue e;
    /* Weights packed by aie_conv2d_pack_winograd choose the Winograd path */
    const int winograd = packed_w && ((const aie_conv_pack_header *)packed_w)->magic == AIE_CONV_PACK_MAGIC &&
                         ((const aie_conv_pack_header *)packed_w)->kind == AIE_CONV_PACK_WINOGRAD;
    const int kind = winograd ? AIE_CONV_PACK_WINOGRAD
                              : is_depthwise(p) ? AIE_CONV_PACK_DEPTHWISE : AIE_CONV_PACK_GEMM;
    if ((rc = aie_conv_check_call(p, x, packed_w, y, ep, kind, "conv2d", &e))) return rc;
    const aie_conv_pack_header *h = packed_w;
    const char *body = (const char *)packed_w + sizeof *h;
    int nt = eff_threads(nthreads);
    const int64_t M = p->N * P * Q;

    /* One workspace contract for every path: what aie_conv2d_workspace_size
     * says for these params, whichever path the blob and params pick. */
    size_t need = workspace_total(p, P, Q, nt), gemm_bytes = need ? need - AIE_ALIGN : 0;
    if (need && (!workspace || workspace_size < need))
        return aie_fail(AIE_ENOMEM, "conv2d: workspace of %zu bytes, need %zu (aie_conv2d_workspace_size)",
                        workspace ? workspace_size : 0, need);

    if (winograd) {
        if (!aie_conv_winograd_possible(p))
            return aie_fail(AIE_EINVAL, "conv2d: weights packed for Winograd need a 3x3, stride-1, dilation-1, "
                                        "ungrouped convolution (these params: strides %lld,%lld, dilations %lld,%lld)",
                            (long long)p->stride_h, (long long)p->stride_w, (long long)p->dil_h, (long long)p->dil_w);
        return aie_conv_winograd_run(p, P, Q, x, body, h->group_bytes, bias, residual, &e, y, workspace,
                                     workspace_size, nt);
    }

    if (is_depthwise(p)) {
        int64_t rows = p->N * P, pieces = nt > 1 ? 4 * (int64_t)nt : 1;
        dw_ctx d = {{p, P, Q, x, (const float *)body, bias, residual, &e, y, NULL, 0}, (rows + pieces - 1) / pieces};
        aie_parallel_dynamic((rows + d.rows_per_task - 1) / d.rows_per_task, nt, dw_task, &d);
        return AIE_OK;
    }

    if (aie_conv_direct_chosen(p, Q))
        return aie_conv_direct_run(p, P, Q, x, body, bias, residual, &e, y, workspace, workspace_size, nt);

    char *ws = need ? (char *)AIE_ROUND_UP((uintptr_t)workspace, AIE_ALIGN) : NULL;

    /* The residual rides on GEMM's beta: y holds the residual, beta = 1, and
     * the epilogue (bias, activation) runs after alpha/beta. */
    float beta = 0.f;
    if (residual) {
        if (residual != y) memcpy(y, residual, (size_t)(M * p->K) * sizeof(float));
        beta = 1.f;
    }
    const int64_t Cg = p->C / p->groups, Kg = p->K / p->groups;
    if (is_pointwise(p)) {
        for (int64_t g = 0; g < p->groups; g++) {
            e.bias = bias ? bias + g * Kg : NULL;
            e.bias_kind = bias ? AIE_BIAS_COL : AIE_BIAS_NONE;
            rc = aie_sgemm_packed(0, M, Kg, Cg, 1.f, x + g * Cg, p->C, body + (size_t)g * h->group_bytes, beta,
                                  y + g * Kg, p->K, &e, ws, gemm_bytes, nt);
            if (rc) return rc;
        }
        return AIE_OK;
    }
    for (int64_t g = 0; g < p->groups; g++) {
        gemm_im2col_src src = {p, P, Q, g, x};
        e.bias = bias ? bias + g * Kg : NULL;
        e.bias_kind = bias ? AIE_BIAS_COL : AIE_BIAS_NONE;
        rc = aie_sgemm_packed_implicit_a(M, Kg, gemm_rows(p), aie_gemm_pack_a_im2col, &src,
                                         body + (size_t)g * h->group_bytes, beta, y + g * Kg, p->K, &e, ws,
                                         gemm_bytes, nt);
        if (rc) return rc;
    }
    return AIE_OK;
}
