/*
 * ConvTranspose 2-D (NHWC) as GEMM + gather, one image at a time:
 *   1. col[m][g][t][k] = sum_c x[m][g*Cg + c] * W[g*Cg + c][k][t]  — per group
 *      one aie_sgemm_packed over the image's H*W pixels, reading x in place
 *      (lda = C) and writing the taps of all groups side by side;
 *   2. each output pixel gathers, in (r, s) order, the col rows of the taps
 *      whose source pixel h = (oh + pad_top - r*dil_h) / stride_h is integral
 *      and inside the input, then bias and activation.
 * Gathering instead of scattering keeps threads free of write races and
 * makes each output one fixed-order sum, so the result does not depend on
 * the thread count. Scratch: one image's col (H*W*R*S*K floats) plus the
 * GEMM's workspace, from the caller.
 */
#include <stdlib.h>
#include <string.h>

#include "conv_kernels.h"
#include "conv_pack.h"
#include "gemm_internal.h"
#include "kernel_table.h"

int aie_conv_transpose2d_output_shape(const aie_conv2d_params *p, int64_t *P, int64_t *Q) {
    int rc = aie_conv_check_params(p, "conv_transpose2d");
    if (rc) return rc;
    /* ONNX: output_padding must be smaller than the stride or the dilation */
    if (p->out_pad_h < 0 || p->out_pad_w < 0 ||
        (p->out_pad_h >= p->stride_h && p->out_pad_h >= p->dil_h) ||
        (p->out_pad_w >= p->stride_w && p->out_pad_w >= p->dil_w))
        return aie_fail(AIE_EINVAL,
                        "conv_transpose2d: output_padding (%lld, %lld) must be >= 0 and smaller than the stride "
                        "(%lld, %lld) or the dilation (%lld, %lld)",
                        (long long)p->out_pad_h, (long long)p->out_pad_w, (long long)p->stride_h,
                        (long long)p->stride_w, (long long)p->dil_h, (long long)p->dil_w);
    const int64_t ph = p->stride_h * (p->H - 1) + p->out_pad_h + (p->R - 1) * p->dil_h + 1 - p->pad_top - p->pad_bottom;
    const int64_t qw = p->stride_w * (p->W - 1) + p->out_pad_w + (p->S - 1) * p->dil_w + 1 - p->pad_left - p->pad_right;
    if (ph < 1 || qw < 1)
        return aie_fail(AIE_EINVAL, "conv_transpose2d: pads leave an empty output (%lld x %lld)", (long long)ph,
                        (long long)qw);
    if (P) *P = ph;
    if (Q) *Q = qw;
    return AIE_OK;
}

static int64_t taps_cols(const aie_conv2d_params *p) { return p->R * p->S * (p->K / p->groups); }

size_t aie_conv_transpose2d_packed_size(const aie_conv2d_params *p) {
    if (aie_conv_check_params(p, "conv_transpose2d_packed_size")) return 0;
    return sizeof(aie_conv_pack_header) +
           AIE_ROUND_UP(aie_sgemm_packed_b_size(p->C / p->groups, taps_cols(p)), AIE_ALIGN) * (size_t)p->groups;
}

int aie_conv_transpose2d_pack_weights(const aie_conv2d_params *p, const float *w, void *packed, size_t packed_size) {
    int rc = aie_conv_check_params(p, "conv_transpose2d_pack_weights");
    if (rc) return rc;
    if (!w || !packed) return aie_fail(AIE_EINVAL, "conv_transpose2d_pack_weights: NULL weights or destination");
    const size_t need = aie_conv_transpose2d_packed_size(p);
    if (packed_size < need)
        return aie_fail(AIE_ENOMEM, "conv_transpose2d_pack_weights: destination holds %zu bytes, need %zu",
                        packed_size, need);
    aie_conv_pack_header *h = packed;
    aie_conv_pack_header_fill(h, p, AIE_CONV_PACK_TRANSPOSE);
    char *body = (char *)packed + sizeof *h;
    /* B of group g: Cg x (R*S*Kg), column (t, k) = W[g*Cg + c][k][t] */
    const int64_t RS = p->R * p->S, Cg = p->C / p->groups, Kg = p->K / p->groups, cols = taps_cols(p);
    float *b = malloc((size_t)(Cg * cols) * sizeof(float));
    if (!b) return aie_fail(AIE_ENOMEM, "conv_transpose2d_pack_weights: cannot allocate %lld floats",
                            (long long)(Cg * cols));
    for (int64_t g = 0; g < p->groups && rc == AIE_OK; g++) {
        for (int64_t c = 0; c < Cg; c++)
            for (int64_t k = 0; k < Kg; k++)
                for (int64_t t = 0; t < RS; t++) b[c * cols + t * Kg + k] = w[((g * Cg + c) * Kg + k) * RS + t];
        rc = aie_sgemm_pack_b(0, Cg, cols, b, cols, body + (size_t)g * h->group_bytes, h->group_bytes);
    }
    free(b);
    return rc;
}

static size_t col_bytes(const aie_conv2d_params *p) {
    return AIE_ROUND_UP((size_t)(p->H * p->W * p->R * p->S * p->K) * sizeof(float), AIE_ALIGN);
}

static int eff_threads(int nthreads) {
    int nt = nthreads <= 0 ? aie_threads_get() : nthreads;
    return nt < 1 ? 1 : nt;
}

size_t aie_conv_transpose2d_workspace_size(const aie_conv2d_params *p, int nthreads) {
    if (aie_conv_transpose2d_output_shape(p, NULL, NULL)) return 0;
    /* + AIE_ALIGN: the caller's pointer may be unaligned */
    size_t gemm = aie_sgemm_packed_workspace_size(p->H * p->W, taps_cols(p), p->C / p->groups, eff_threads(nthreads));
    return col_bytes(p) + AIE_ROUND_UP(gemm, AIE_ALIGN) + AIE_ALIGN;
}

typedef struct {
    const aie_conv2d_params *p;
    int64_t P, Q, n;
    const float *col, *bias;
    const aie_epilogue *ep;
    const gemm_kernels *kt;
    float *y;
} convt_ctx;

/* Source index of output coordinate o through tap i, or -1 when the tap
 * falls between input samples or outside the input. */
static inline int64_t convt_src(int64_t o, int64_t i, int64_t pad, int64_t dil, int64_t stride, int64_t in) {
    const int64_t num = o + pad - i * dil;
    if (num < 0 || num % stride) return -1;
    const int64_t h = num / stride;
    return h < in ? h : -1;
}

/* Gather of output rows [r0, r1) of image c->n. col row m holds, for every
 * group, R*S taps of Kg floats: tap t of group g at m*RS*K + (g*RS + t)*Kg. */
static void convt_gather_task(void *ctx, int64_t task, int64_t ntasks) {
    const convt_ctx *c = ctx;
    const aie_conv2d_params *p = c->p;
    const int64_t r0 = c->P * task / ntasks, r1 = c->P * (task + 1) / ntasks;
    const int64_t RS = p->R * p->S, K = p->K, Kg = K / p->groups;
    for (int64_t oh = r0; oh < r1; oh++) {
        for (int64_t ow = 0; ow < c->Q; ow++) {
            float *restrict out = c->y + ((c->n * c->P + oh) * c->Q + ow) * K;
            memset(out, 0, (size_t)K * sizeof(float));
            for (int64_t r = 0; r < p->R; r++) {
                const int64_t h = convt_src(oh, r, p->pad_top, p->dil_h, p->stride_h, p->H);
                if (h < 0) continue;
                for (int64_t s = 0; s < p->S; s++) {
                    const int64_t w = convt_src(ow, s, p->pad_left, p->dil_w, p->stride_w, p->W);
                    if (w < 0) continue;
                    const float *src = c->col + (h * p->W + w) * RS * K + (r * p->S + s) * Kg;
                    for (int64_t g = 0; g < p->groups; g++) {
                        const float *restrict sg = src + g * RS * Kg;
                        float *restrict og = out + g * Kg;
                        for (int64_t k = 0; k < Kg; k++) og[k] += sg[k];
                    }
                }
            }
        }
        /* bias + activation on the finished output row, vectorised (the
         * per-ISA GEMM epilogue; a scalar SiLU here cost more than the GEMM) */
        float *row = c->y + (c->n * c->P + oh) * c->Q * K;
        if (c->bias || c->ep->act != AIE_U_IDENTITY)
            c->kt->epilogue(row, K, c->Q, K, c->bias, NULL, c->ep->act, c->ep->p0, c->ep->p1);
    }
}

int aie_conv_transpose2d(const aie_conv2d_params *p, const float *x, const void *packed_w, const float *bias,
                         const aie_epilogue *ep, float *y, void *workspace, size_t workspace_size, int nthreads) {
    int64_t P, Q;
    int rc;
    if (aie_ensure_init()) return aie_init();
    if ((rc = aie_conv_transpose2d_output_shape(p, &P, &Q))) return rc;
    if (p->N == 0) return AIE_OK;
    aie_epilogue e;
    if ((rc = aie_conv_check_call(p, x, packed_w, y, ep, AIE_CONV_PACK_TRANSPOSE, "conv_transpose2d", &e))) return rc;
    const aie_conv_pack_header *h = packed_w;
    const int nt = eff_threads(nthreads);
    const size_t need = aie_conv_transpose2d_workspace_size(p, nt);
    if (!workspace || workspace_size < need)
        return aie_fail(AIE_ENOMEM, "conv_transpose2d: workspace of %zu bytes, need %zu "
                        "(aie_conv_transpose2d_workspace_size)", workspace ? workspace_size : 0, need);
    char *ws = (char *)AIE_ROUND_UP((uintptr_t)workspace, AIE_ALIGN);
    float *col = (float *)ws;
    void *gws = ws + col_bytes(p);
    const size_t gws_size = need - AIE_ALIGN - col_bytes(p);
    const aie_epilogue plain = {NULL, AIE_BIAS_NONE, AIE_U_IDENTITY, 0.f, 0.f};
    const int64_t HW = p->H * p->W, Cg = p->C / p->groups, cols = taps_cols(p);
    const char *body = (const char *)packed_w + sizeof *h;
    for (int64_t n = 0; n < p->N; n++) {
        for (int64_t g = 0; g < p->groups; g++) {
            rc = aie_sgemm_packed(0, HW, cols, Cg, 1.f, x + n * HW * p->C + g * Cg, p->C,
                                  body + (size_t)g * h->group_bytes, 0.f, col + g * cols, p->R * p->S * p->K,
                                  &plain, gws, gws_size, nt);
            if (rc) return rc;
        }
        convt_ctx c = {p, P, Q, n, col, bias, &e, aie_kernels()->sgemm, y};
        aie_parallel_for(P < nt ? P : nt, nt, convt_gather_task, &c);
    }
    return AIE_OK;
}
