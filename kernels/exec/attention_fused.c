/* AIE_X_ATTENTION: the fused scaled-dot-product attention of
 * engine.passes.fuse_attention, per (batch, head) and tile of query rows:
 *   S = alpha * Q Kt (+ mask);  P = softmax(S, last axis);  Y = P V.
 * Each worker owns one score tile [tile_rows, L] and its GEMM scratch, carved
 * from the step's workspace operand, so the full [M, L] score matrix is never
 * materialised and nothing allocates. Tasks write disjoint rows of Y with
 * serial arithmetic, so the result does not depend on the thread count.
 * t: y [B,H,M,dv], q [B,H,M,dk], kt [B,H,dk,L], v [B,H,L,dv], mask (NULL or
 *    float32 read with strides), workspace.
 * ip: aie_attention_step (mask strides b, h, row, col). fp: alpha. */
#include "aie_gemm.h"
#include "aie_norm.h"
#include "exec_ops.h"
#include "threadpool.h"

#include <stdint.h>

typedef struct {
    const float *q, *kt, *v, *mask;
    float *y;
    int64_t H, M, L, dk, dv, ms[4], tile, ntiles;
    float alpha;
    char *ws;
    size_t slot, tile_bytes, gemm_bytes;
    int rc;
} attn_ctx;

static size_t round_up(size_t n) { return (n + 63) & ~(size_t)63; }

static size_t gemm_scratch(int64_t tile, int64_t L, int64_t dk, int64_t dv) {
    size_t a = aie_sgemm_workspace_size(tile, L, dk, 1), b = aie_sgemm_workspace_size(tile, dv, L, 1);
    return round_up(a > b ? a : b);
}

static void attn_task(void *vctx, int64_t task, int worker) {
    attn_ctx *c = vctx;
    int64_t bh = task / c->ntiles, r0 = (task % c->ntiles) * c->tile;
    int64_t b = bh / c->H, h = bh % c->H, rows = c->M - r0 < c->tile ? c->M - r0 : c->tile;
    char *slot = c->ws + (size_t)worker * c->slot;
    float *s = (float *)slot;
    void *gws = slot + c->tile_bytes;
    const float *q = c->q + (bh * c->M + r0) * c->dk, *kt = c->kt + bh * c->dk * c->L, *v = c->v + bh * c->L * c->dv;
    float *y = c->y + (bh * c->M + r0) * c->dv;
    int rc = aie_sgemm(0, 0, rows, c->L, c->dk, c->alpha, q, c->dk, kt, c->L, 0.0f, s, c->L, NULL, gws,
                       c->gemm_bytes, 1);
    if (rc == AIE_OK && c->mask) {
        const float *m = c->mask + b * c->ms[0] + h * c->ms[1] + r0 * c->ms[2];
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < c->L; j++) s[i * c->L + j] += m[i * c->ms[2] + j * c->ms[3]];
    }
    if (rc == AIE_OK) rc = aie_softmax(s, s, rows, c->L, 1, 0, 1);
    if (rc == AIE_OK)
        rc = aie_sgemm(0, 0, rows, c->dv, c->L, 1.0f, s, c->L, v, c->dv, 0.0f, y, c->dv, NULL, gws, c->gemm_bytes, 1);
    if (rc != AIE_OK) c->rc = rc;  /* any failure fails the step; which one is immaterial */
}

int aie_x_attention(const aie_step_args *a) {
    const aie_attention_step *sp = (const aie_attention_step *)(const void *)a->ip;
    attn_ctx c = {.q = a->t[1], .kt = a->t[2], .v = a->t[3], .mask = a->t[4], .y = a->t[0], .H = sp->H,
                  .M = sp->M, .L = sp->L, .dk = sp->dk, .dv = sp->dv,
                  .ms = {sp->mask_stride_b, sp->mask_stride_h, sp->mask_stride_m, sp->mask_stride_l},
                  .tile = sp->tile, .alpha = (float)a->fp[0], .rc = AIE_OK};
    int64_t B = sp->B;
    size_t ws_bytes = (size_t)sp->workspace_bytes;
    if (B <= 0 || c.H <= 0 || c.M <= 0 || c.L <= 0 || c.dk <= 0 || c.dv <= 0 || c.tile <= 0)
        return aie_fail(AIE_EINVAL, "attention: bad dims B=%lld H=%lld M=%lld L=%lld dk=%lld dv=%lld tile=%lld",
                        (long long)B, (long long)c.H, (long long)c.M, (long long)c.L, (long long)c.dk,
                        (long long)c.dv, (long long)c.tile);
    c.tile_bytes = round_up((size_t)c.tile * (size_t)c.L * sizeof(float));
    c.gemm_bytes = gemm_scratch(c.tile, c.L, c.dk, c.dv);
    c.slot = c.tile_bytes + c.gemm_bytes;
    c.ws = (char *)(((uintptr_t)a->t[5] + 63) & ~(uintptr_t)63);
    size_t usable = a->t[5] && ws_bytes > 64 ? ws_bytes - 64 : 0;
    int64_t slots = (int64_t)(usable / c.slot);
    if (slots < 1)
        return aie_fail(AIE_EINVAL, "attention: workspace of %zu bytes is below one worker's %zu", ws_bytes,
                        c.slot + 64);
    c.ntiles = (c.M + c.tile - 1) / c.tile;
    int64_t ntasks = B * c.H * c.ntiles;
    /* Fewer workers than the plan sized the workspace for, never more. */
    int nthreads = a->nthreads;
    if (aie_parallel_participants(nthreads, ntasks) > slots) nthreads = (int)(slots < 4096 ? slots : 4096);
    aie_parallel_dynamic(ntasks, nthreads, attn_task, &c);
    return c.rc;
}

/* Bytes of workspace AIE_X_ATTENTION needs for `workers` participants. */
size_t aie_attention_workspace(int64_t tile, int64_t L, int64_t dk, int64_t dv, int64_t workers) {
    size_t slot = round_up((size_t)tile * (size_t)L * sizeof(float)) + gemm_scratch(tile, L, dk, dv);
    return slot * (size_t)(workers < 1 ? 1 : workers) + 64;
}
