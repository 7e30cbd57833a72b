/*
 * int8 convolution driver (contract in include/aie_conv_s8.h): im2col of the
 * u8 input into the workspace (padding taps read the input zero point), then
 * the int8 GEMM (core/gemm_lowp.c), whose micro-kernels come from the
 * dispatch table and whose output stage is the one every int8 path shares.
 * A 1x1 stride-1 unpadded conv is a GEMM on x itself.
 */
#include <stdlib.h>
#include <string.h>

#include "aie_internal.h"
#include "threadpool.h"

static int64_t taps(const aie_conv2d_params *p) { return p->R * p->S * p->C; }

static int pointwise(const aie_conv2d_params *p) {
    return p->R == 1 && p->S == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_top == 0 && p->pad_left == 0 &&
           p->pad_bottom == 0 && p->pad_right == 0;
}

static int check(const char *fn, const aie_conv2d_params *p, int64_t *P, int64_t *Q) {
    int rc = aie_conv2d_output_shape(p, P, Q);
    if (rc != AIE_OK) return rc;
    if (p->groups != 1)
        return aie_fail(AIE_EINVAL, "%s: groups=%lld; the int8 convolution takes groups=1 only", fn,
                        (long long)p->groups);
    if (taps(p) > AIE_GEMM_S8_MAX_K)
        return aie_fail(AIE_EINVAL, "%s: R*S*C=%lld is above %d, where int32 sums could overflow", fn,
                        (long long)taps(p), AIE_GEMM_S8_MAX_K);
    return AIE_OK;
}

size_t aie_conv2d_s8_packed_size(const aie_conv2d_params *p) {
    int64_t P, Q;
    if (check("aie_conv2d_s8_packed_size", p, &P, &Q) != AIE_OK) return 0;
    return aie_gemm_s8_packed_b_size(taps(p), p->K);
}

/* OIHW -> K x (R, S, C) rows (the im2col column order), packed as B^T. */
int aie_conv2d_s8_pack_weights(const aie_conv2d_params *p, const int8_t *w, void *packed, size_t packed_size) {
    const char *fn = "aie_conv2d_s8_pack_weights";
    int64_t P, Q;
    int rc = check(fn, p, &P, &Q);
    if (rc != AIE_OK) return rc;
    if (!w) return aie_fail(AIE_EINVAL, "%s: w is NULL", fn);
    const int64_t kg = taps(p), C = p->C, RS = p->R * p->S;
    int8_t *rows = malloc((size_t)(p->K * kg));
    if (!rows) return aie_fail(AIE_ENOMEM, "%s: no memory for %lld bytes of reordered weights", fn,
                               (long long)(p->K * kg));
    for (int64_t k = 0; k < p->K; k++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t rs = 0; rs < RS; rs++) rows[k * kg + rs * C + c] = w[(k * C + c) * RS + rs];
    rc = aie_gemm_s8_pack_b(1, kg, p->K, rows, kg, packed, packed_size);
    free(rows);
    return rc;
}

static size_t cols_bytes(const aie_conv2d_params *p, int64_t P, int64_t Q) {
    return pointwise(p) ? 0 : AIE_ROUND_UP((size_t)(p->N * P * Q * taps(p)), AIE_ALIGN);
}

size_t aie_conv2d_u8s8_workspace_size(const aie_conv2d_params *p, int nthreads) {
    int64_t P, Q;
    if (check("aie_conv2d_u8s8_workspace_size", p, &P, &Q) != AIE_OK) return 0;
    return cols_bytes(p, P, Q) + AIE_ALIGN + aie_gemm_u8s8_workspace_size(p->N * P * Q, p->K, taps(p), nthreads);
}

typedef struct {
    const aie_conv2d_params *p;
    const uint8_t *x;
    uint8_t zero;
    int64_t P, Q;
    uint8_t *cols;
} im2col_job;

/* Output row (n, oh) of the im2col matrix: Q rows of (r, s, c) taps. */
static void im2col_row(void *ctx, int64_t t, int worker) {
    (void)worker;
    const im2col_job *j = ctx;
    const aie_conv2d_params *p = j->p;
    const int64_t n = t / j->P, oh = t % j->P, C = p->C, kg = taps(p);
    uint8_t *dst = j->cols + t * j->Q * kg;
    for (int64_t ow = 0; ow < j->Q; ow++, dst += kg)
        for (int64_t r = 0; r < p->R; r++) {
            const int64_t ih = oh * p->stride_h - p->pad_top + r * p->dil_h;
            for (int64_t s = 0; s < p->S; s++) {
                const int64_t iw = ow * p->stride_w - p->pad_left + s * p->dil_w;
                uint8_t *d = dst + (r * p->S + s) * C;
                if (ih < 0 || ih >= p->H || iw < 0 || iw >= p->W) memset(d, j->zero, (size_t)C);
                else memcpy(d, j->x + ((n * p->H + ih) * p->W + iw) * C, (size_t)C);
            }
        }
}

int aie_conv2d_u8s8(const aie_conv2d_params *p, const uint8_t *x, int32_t x_zero, const void *packed_w, void *y,
                    const aie_qepilogue *q, void *workspace, size_t workspace_size, int nthreads) {
    const char *fn = "aie_conv2d_u8s8";
    int rc = aie_ensure_init();
    if (rc != AIE_OK) return rc;
    int64_t P, Q;
    rc = check(fn, p, &P, &Q);
    if (rc != AIE_OK) return rc;
    if (x_zero < 0 || x_zero > 255)
        return aie_fail(AIE_EINVAL, "%s: x_zero=%d is outside the uint8 range 0..255", fn, (int)x_zero);
    if (!x || !y) return aie_fail(AIE_EINVAL, "%s: x or y is NULL", fn);
    if (p->N == 0) return AIE_OK;
    if (nthreads <= 0) nthreads = aie_threads_get();
    const int64_t M = p->N * P * Q, kg = taps(p);
    const size_t cb = cols_bytes(p, P, Q), need = aie_conv2d_u8s8_workspace_size(p, nthreads);
    if (!workspace || workspace_size < need)
        return aie_fail(AIE_ENOMEM, "%s: workspace of %zu bytes, need %zu (aie_conv2d_u8s8_workspace_size)", fn,
                        workspace ? workspace_size : 0, need);
    uint8_t *base = (uint8_t *)AIE_ROUND_UP((uintptr_t)workspace, AIE_ALIGN);
    const uint8_t *a = x;
    if (cb) {
        im2col_job j = {p, x, (uint8_t)x_zero, P, Q, base};
        aie_parallel_dynamic(p->N * P, nthreads, im2col_row, &j);
        a = base;
    }
    const size_t used = (size_t)(base - (uint8_t *)workspace) + cb;
    return aie_gemm_u8s8(M, p->K, kg, a, kg, x_zero, packed_w, y, p->K, q, (uint8_t *)workspace + used,
                         workspace_size - used, nthreads);
}
