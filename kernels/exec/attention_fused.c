/* AIE_X_ATTENTION: the fused scaled-dot-product attention of
 * engine.passes.fuse_attention, per (batch, head) and tile of query rows:
 *   S = alpha * Q Kt (+ mask);  P = softmax(S, last axis);  Y = P V.
 * Each worker owns one score tile [tile_rows, L] and its GEMM scratch, carved
 * from the step's workspace operand, so the full [M, L] score matrix is never
 * materialised and nothing allocates. Tasks write disjoint rows of Y with
 * serial arithmetic, so the result does not depend on the thread count.
 * t: y [B,H,M,dv], q [B,H,M,dk], kt [B,H,dk,L], v [B,H,L,dv], mask (NULL or
 *    float32 read with strides), workspace.
 * ip: aie_attention_step (mask strides b, h, row, col). fp: alpha.
 *
 * AIE_X_ATTENTION_BF16 (a bf16 model's attention): the two products on the
 * bf16 GEMM (aie_gemm_lowp.h: operands rounded to bf16, fp32 sums) at the
 * selected level, with Kt and V packed per task into the bf16 B layout (the
 * lowering makes one task per head when M <= its tile, so each is packed
 * once); the scale, mask and softmax stay fp32, in one per-row routine
 * (aie_vm_table.softmax_scaled) when the mask is contiguous along L. */
#include "aie_gemm.h"
#include "aie_gemm_lowp.h"
#include "aie_norm.h"
#include "exec_ops.h"
#include "threadpool.h"
#include "vmath.h"

#include <stdint.h>

typedef struct {
    const float *q, *kt, *v, *mask;
    float *y;
    int64_t H, M, L, dk, dv, ms[4], tile, ntiles;
    float alpha;
    char *ws;
    size_t slot, tile_bytes, gemm_bytes, kt_bytes; /* kt_bytes: bf16 only, the packed Kt (then packed V) */
    int bf16, rc;
} attn_ctx;

static size_t round_up(size_t n) { return (n + 63) & ~(size_t)63; }

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

static size_t gemm_scratch(int64_t tile, int64_t L, int64_t dk, int64_t dv) {
    size_t a = aie_sgemm_workspace_size(tile, L, dk, 1), b = aie_sgemm_workspace_size(tile, dv, L, 1);
    return round_up(max_size(a, b));
}

/* bf16: the bf16 GEMMs' scratch, then room for packed Kt and packed V. */
static size_t gemm_scratch_bf16(int64_t tile, int64_t L, int64_t dk, int64_t dv) {
    return round_up(max_size(aie_gemm_bf16_workspace_size(tile, L, dk, 1), aie_gemm_bf16_workspace_size(tile, dv, L, 1)));
}

static size_t packed_bytes_bf16(int64_t L, int64_t dk, int64_t dv) {
    return round_up(aie_gemm_bf16_packed_b_size(dk, L)) + round_up(aie_gemm_bf16_packed_b_size(L, dv));
}

/* s = scale * s (+ mask). A mask row contiguous along L (the usual [B, 1,
 * 1, L] or [M, L]) takes a loop that vectorises. */
static void add_mask(const attn_ctx *c, float *s, int64_t rows, int64_t b, int64_t h, int64_t r0, float scale) {
    const float *m = c->mask ? c->mask + b * c->ms[0] + h * c->ms[1] + r0 * c->ms[2] : NULL;
    for (int64_t i = 0; i < rows; i++) {
        float *restrict si = s + i * c->L;
        if (!m) {
            for (int64_t j = 0; j < c->L; j++) si[j] *= scale;
        } else if (c->ms[3] == 1) {
            const float *restrict mi = m + i * c->ms[2];
            for (int64_t j = 0; j < c->L; j++) si[j] = si[j] * scale + mi[j];
        } else {
            for (int64_t j = 0; j < c->L; j++) si[j] = si[j] * scale + m[i * c->ms[2] + j * c->ms[3]];
        }
    }
}

/* One task's products in bf16: S = Q Kt, then (after the fp32 scale, mask
 * and softmax) Y = P V. */
static int attn_bf16(const attn_ctx *c, const float *q, const float *kt, const float *v, float *s, float *y,
                     int64_t rows, int64_t b, int64_t h, int64_t r0, char *gws) {
    char *pk = gws + c->gemm_bytes, *pv = pk + round_up(aie_gemm_bf16_packed_b_size(c->dk, c->L));
    size_t pk_size = aie_gemm_bf16_packed_b_size(c->dk, c->L), pv_size = aie_gemm_bf16_packed_b_size(c->L, c->dv);
    int rc = aie_gemm_bf16_pack_b(0, c->dk, c->L, kt, c->L, pk, pk_size);
    if (rc == AIE_OK) rc = aie_gemm_bf16_pack_b(0, c->L, c->dv, v, c->dv, pv, pv_size);
    if (rc == AIE_OK)
        rc = aie_gemm_bf16(rows, c->L, c->dk, q, AIE_A_F32, c->dk, pk, s, c->L, NULL, gws, c->gemm_bytes, 1);
    if (rc != AIE_OK) return rc;
    if (!c->mask || c->ms[3] == 1) { /* scale, mask and softmax in one routine per row */
        const aie_vm_table *vm = aie_vm();
        const float *m = c->mask ? c->mask + b * c->ms[0] + h * c->ms[1] + r0 * c->ms[2] : NULL;
        for (int64_t i = 0; i < rows; i++) vm->softmax_scaled(s + i * c->L, c->L, c->alpha, m ? m + i * c->ms[2] : NULL);
    } else {
        add_mask(c, s, rows, b, h, r0, c->alpha);
        rc = aie_softmax(s, s, rows, c->L, 1, 0, 1);
    }
    if (rc == AIE_OK)
        rc = aie_gemm_bf16(rows, c->dv, c->L, s, AIE_A_F32, c->L, pv, y, c->dv, NULL, gws, c->gemm_bytes, 1);
    return rc;
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
    if (c->bf16) {
        int rc = attn_bf16(c, q, kt, v, s, y, rows, b, h, r0, gws);
        if (rc != AIE_OK) c->rc = rc;
        return;
    }
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

static int attention(const aie_step_args *a, int bf16) {
    const aie_attention_step *sp = (const aie_attention_step *)(const void *)a->ip;
    attn_ctx c = {.q = a->t[1], .kt = a->t[2], .v = a->t[3], .mask = a->t[4], .y = a->t[0], .H = sp->H,
                  .M = sp->M, .L = sp->L, .dk = sp->dk, .dv = sp->dv,
                  .ms = {sp->mask_stride_b, sp->mask_stride_h, sp->mask_stride_m, sp->mask_stride_l},
                  .tile = sp->tile, .alpha = (float)a->fp[0], .bf16 = bf16, .rc = AIE_OK};
    int64_t B = sp->B;
    size_t ws_bytes = (size_t)sp->workspace_bytes;
    if (B <= 0 || c.H <= 0 || c.M <= 0 || c.L <= 0 || c.dk <= 0 || c.dv <= 0 || c.tile <= 0)
        return aie_fail(AIE_EINVAL, "attention: bad dims B=%lld H=%lld M=%lld L=%lld dk=%lld dv=%lld tile=%lld",
                        (long long)B, (long long)c.H, (long long)c.M, (long long)c.L, (long long)c.dk,
                        (long long)c.dv, (long long)c.tile);
    c.tile_bytes = round_up((size_t)c.tile * (size_t)c.L * sizeof(float));
    c.gemm_bytes = bf16 ? gemm_scratch_bf16(c.tile, c.L, c.dk, c.dv) : gemm_scratch(c.tile, c.L, c.dk, c.dv);
    c.slot = c.tile_bytes + c.gemm_bytes + (bf16 ? packed_bytes_bf16(c.L, c.dk, c.dv) : 0);
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

int aie_x_attention(const aie_step_args *a) { return attention(a, 0); }

int aie_x_attention_bf16(const aie_step_args *a) { return attention(a, 1); }

/* Bytes of workspace AIE_X_ATTENTION needs for `workers` participants. */
size_t aie_attention_workspace(int64_t tile, int64_t L, int64_t dk, int64_t dv, int64_t workers) {
    size_t slot = round_up((size_t)tile * (size_t)L * sizeof(float)) + gemm_scratch(tile, L, dk, dv);
    return slot * (size_t)(workers < 1 ? 1 : workers) + 64;
}

/* The same for AIE_X_ATTENTION_BF16. */
size_t aie_attention_bf16_workspace(int64_t tile, int64_t L, int64_t dk, int64_t dv, int64_t workers) {
    size_t slot = round_up((size_t)tile * (size_t)L * sizeof(float)) + gemm_scratch_bf16(tile, L, dk, dv) +
                  packed_bytes_bf16(L, dk, dv);
    return slot * (size_t)(workers < 1 ? 1 : workers) + 64;
}
