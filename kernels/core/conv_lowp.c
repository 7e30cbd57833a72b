/*
 * aie_conv2d_bf16 driver (contract in include/aie_conv_lowp.h): weight
 * packing, the im2col A packing in bf16, tiling over the thread pool and the
 * fused output stage. The products run in the bf16 GEMM's micro-kernels and
 * the fp32 -> bf16 conversion in the level's bf16_cvt, both from the
 * dispatch table (kernel_table.c).
 *
 * A task owns rows [i0, i0 + mc) (output pixels) x a column range (output
 * channels). It converts its im2col rows once into its workspace slot as
 * 16-row A strips (gemm_lowp_internal.h), then, per column block of up to
 * CONV_BF16_NB channels and per K slice, runs every 32-row block against
 * every 32-column panel, and applies the output stage to the block while it
 * is in L2 — the bf16 GEMM's loop order (core/gemm_lowp.c) and blocking.
 */
#include <stdlib.h>
#include <string.h>

#include "conv_lowp_internal.h"
#include "conv_pack.h"
#include "kernel_table.h"
#include "threadpool.h"

/* Blocking, as the bf16 GEMM's (core/gemm_lowp.c explains the numbers):
 * up to 128 rows of A per task, 256-column blocks, K slices of 16 k-chunks
 * (512 bf16: a 32-row A slice of 32 KiB stays in the 48 KiB L1d). */
#define CONV_BF16_MC 128
#define CONV_BF16_NB 256
#define CONV_BF16_KSLICE (16 * LOWP_KCHUNK_BF16)
/* A thread pays off only from ~4 MFLOP of work on the matrix units (as for
 * the bf16 GEMM, which does ~8x the fp32 path's work per cycle). */
#define CONV_BF16_MIN_FLOPS_PER_THREAD (1 << 22)

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static int64_t depth(const aie_conv2d_params *p) { return p->R * p->S * p->C; }

/* The params checks plus what only the bf16 path needs (one group). */
static int check_params(const aie_conv2d_params *p, const char *op) {
    int rc = aie_conv_check_params(p, op);
    if (rc) return rc;
    if (p->groups != 1)
        return aie_fail(AIE_EINVAL, "%s: groups=%lld, but the bf16 convolution takes groups == 1 only "
                                    "(run grouped and depthwise convolutions with aie_conv2d)",
                        op, (long long)p->groups);
    return AIE_OK;
}

/* ---- packing ------------------------------------------------------------ */

size_t aie_conv2d_bf16_packed_size(const aie_conv2d_params *p) {
    if (check_params(p, "conv2d_bf16_packed_size")) return 0;
    return sizeof(aie_conv_pack_header) + AIE_ROUND_UP(aie_gemm_bf16_packed_b_size(depth(p), p->K), AIE_ALIGN);
}

int aie_conv2d_bf16_pack_weights(const aie_conv2d_params *p, const float *w, void *packed, size_t packed_size) {
    const char *op = "conv2d_bf16_pack_weights";
    int rc = aie_ensure_init();
    if (rc) return rc;
    if ((rc = check_params(p, op))) return rc;
    if (!w || !packed) return aie_fail(AIE_EINVAL, "%s: NULL weights or destination", op);
    if ((uintptr_t)packed % sizeof(int32_t))
        return aie_fail(AIE_EINVAL, "%s: destination %p is not 4-byte aligned", op, packed);
    size_t need = aie_conv2d_bf16_packed_size(p);
    if (packed_size < need)
        return aie_fail(AIE_ENOMEM, "%s: destination holds %zu bytes, need %zu (aie_conv2d_bf16_packed_size)", op,
                        packed_size, need);
    aie_conv_pack_header *h = packed;
    aie_conv_pack_header_fill(h, p, AIE_CONV_PACK_BF16);
    /* B: rows (r, s, c), the im2col order (each tap one contiguous NHWC
     * channel run), columns k; OIHW gives element (k, c, r, s). */
    const int64_t D = depth(p), RS = p->R * p->S;
    float *b = malloc((size_t)(D * p->K) * sizeof(float));
    if (!b) return aie_fail(AIE_ENOMEM, "%s: cannot allocate %lld floats", op, (long long)(D * p->K));
    for (int64_t k = 0; k < p->K; k++)
        for (int64_t c = 0; c < p->C; c++)
            for (int64_t t = 0; t < RS; t++) b[(t * p->C + c) * p->K + k] = w[(k * p->C + c) * RS + t];
    rc = aie_gemm_bf16_pack_b(0, D, p->K, b, p->K, (char *)packed + sizeof *h, h->group_bytes);
    free(b);
    return rc;
}

/* ---- A packing: im2col rows in bf16, straight into the strips ------------ */

typedef struct {
    const aie_conv2d_params *p;
    int64_t P, Q, D, kp;
    const float *x;
    const aie_bf16 *xb16; /* x in bf16 (AIE_CONV_BF16_X): copied, not converted; x is then NULL */
    aie_bf16_cvt_fn cvt;
    /* Convs with several taps read each input R*S times: x is converted once
     * into a zero-padded bf16 image (N x Hp x Wp x C, every tap inside it),
     * and im2col copies bf16 runs from it; NULL for 1x1 convs. */
    aie_bf16 *xb;
    int64_t hp, wp;
} im2col_src;

/* d[i] = s[i] for i < n <= 32 in fixed-size moves: gcc turns a variable
 * memcpy into `rep movs`, whose start-up costs more than these short runs. */
static inline void copy_bf16(aie_bf16 *d, const aie_bf16 *s, int64_t n) {
    if (n == LOWP_KCHUNK_BF16) {
        memcpy(d, s, LOWP_KCHUNK_BF16 * sizeof *d);
        return;
    }
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) memcpy(d + i, s + i, 8 * sizeof *d);
    for (; i + 2 <= n; i += 2) memcpy(d + i, s + i, 2 * sizeof *d);
    if (i < n) d[i] = s[i];
}

/* Elements [k0, k0 + n) of one strip row (element k at row[(k / 32) * 16 *
 * 32 + k % 32]) from n fp32 values (src, converted), n bf16 values (srcb,
 * copied) or zeros (both NULL); a run is cut where it crosses a k-chunk. */
static void put_run(const im2col_src *s, aie_bf16 *row, int64_t k0, const float *src, const aie_bf16 *srcb,
                    int64_t n) {
    while (n > 0) {
        const int64_t off = k0 % LOWP_KCHUNK_BF16, take = min64(LOWP_KCHUNK_BF16 - off, n);
        aie_bf16 *d = row + (k0 / LOWP_KCHUNK_BF16) * (LOWP_STRIP * LOWP_KCHUNK_BF16) + off;
        if (src) {
            s->cvt(src, d, take);
            src += take;
        } else if (srcb) {
            copy_bf16(d, srcb, take);
            srcb += take;
        } else {
            memset(d, 0, (size_t)take * sizeof *d);
        }
        k0 += take;
        n -= take;
    }
}

/* The im2col row of output pixel m: taps (r, s) in order, C channels each;
 * taps outside the input are zeros (padding), then zeros up to kp. A kernel
 * row whose S taps are neighbours (dil_w == 1) is one run of S*C values in
 * NHWC: a 1x1 stride-1 conv's row is x's pixel itself. */
static void pack_row(const im2col_src *s, int64_t m, aie_bf16 *row) {
    const aie_conv2d_params *p = s->p;
    const int64_t q = m % s->Q, t = m / s->Q, oh = t % s->P, n = t / s->P;
    const int64_t ih0 = oh * p->stride_h - p->pad_top, iw0 = q * p->stride_w - p->pad_left, C = p->C;
    int64_t k = 0;
    if (s->xb) { /* padded: every tap is inside, at (ih + pad_top, iw + pad_left) */
        const aie_bf16 *img = s->xb + n * s->hp * s->wp * C;
        for (int64_t r = 0; r < p->R; r++, k += p->S * C) {
            const aie_bf16 *line = img + ((ih0 + r * p->dil_h + p->pad_top) * s->wp + iw0 + p->pad_left) * C;
            if (C % LOWP_KCHUNK_BF16 == 0) { /* whole chunks (stage_row takes the others) */
                aie_bf16 *d = row + (k / LOWP_KCHUNK_BF16) * (LOWP_STRIP * LOWP_KCHUNK_BF16);
                for (int64_t c = 0; c < p->S; c++, line += p->dil_w * C)
                    for (int64_t e = 0; e < C; e += LOWP_KCHUNK_BF16, d += LOWP_STRIP * LOWP_KCHUNK_BF16)
                        memcpy(d, line + e, LOWP_KCHUNK_BF16 * sizeof *d);
            } else if (p->dil_w == 1) {
                put_run(s, row, k, NULL, line, p->S * C);
            } else {
                for (int64_t c = 0; c < p->S; c++) put_run(s, row, k + c * C, NULL, line + c * p->dil_w * C, C);
            }
        }
    } else {
        /* x in fp32 (converted) or in bf16 (copied): one of the two is NULL */
        const int64_t img = n * p->H * p->W * C;
        const float *xf = s->x ? s->x + img : NULL;
        const aie_bf16 *xh = s->xb16 ? s->xb16 + img : NULL;
        for (int64_t r = 0; r < p->R; r++, k += p->S * C) {
            const int64_t ih = ih0 + r * p->dil_h;
            if (ih < 0 || ih >= p->H) {
                put_run(s, row, k, NULL, NULL, p->S * C);
            } else if (p->dil_w == 1 && iw0 >= 0 && iw0 + p->S <= p->W) {
                const int64_t at = (ih * p->W + iw0) * C;
                put_run(s, row, k, xf ? xf + at : NULL, xh ? xh + at : NULL, p->S * C);
            } else {
                for (int64_t c = 0; c < p->S; c++) {
                    const int64_t iw = iw0 + c * p->dil_w, at = (ih * p->W + iw) * C;
                    const int in = iw >= 0 && iw < p->W;
                    put_run(s, row, k + c * C, in && xf ? xf + at : NULL, in && xh ? xh + at : NULL, C);
                }
            }
        }
    }
    put_run(s, row, s->D, NULL, NULL, s->kp - s->D);
}

/* d[0, n) = s[0, n) in 16-byte moves, reading and writing up to 7 elements
 * past n: callers leave room behind both (and write what follows later). */
static inline void copy_over(aie_bf16 *d, const aie_bf16 *s, int64_t n) {
    for (int64_t i = 0; i < n; i += 8) memcpy(d + i, s + i, 8 * sizeof *d);
}

/* pack_row for a padded image whose taps' runs do not fall on k-chunk
 * boundaries (C not a multiple of 32: the 3-channel stem's runs are 21
 * values): the row is assembled in `line` (kp + 8 elements) in a few
 * overlapping moves per run, then copied into the strip chunk by chunk,
 * instead of a short cut copy at every chunk boundary. */
static void stage_row(const im2col_src *s, int64_t m, aie_bf16 *line, aie_bf16 *row) {
    const aie_conv2d_params *p = s->p;
    const int64_t q = m % s->Q, t = m / s->Q, oh = t % s->P, n = t / s->P, C = p->C;
    const aie_bf16 *img = s->xb + n * s->hp * s->wp * C;
    int64_t k = 0;
    for (int64_t r = 0; r < p->R; r++, k += p->S * C) {
        const aie_bf16 *src = img + ((oh * p->stride_h + r * p->dil_h) * s->wp + q * p->stride_w) * C;
        if (p->dil_w == 1) copy_over(line + k, src, p->S * C);
        else
            for (int64_t c = 0; c < p->S; c++) copy_over(line + k + c * C, src + c * p->dil_w * C, C);
    }
    memset(line + s->D, 0, (size_t)(s->kp - s->D) * sizeof *line);
    for (int64_t c = 0; c < s->kp; c += LOWP_KCHUNK_BF16)
        memcpy(row + (c / LOWP_KCHUNK_BF16) * (LOWP_STRIP * LOWP_KCHUNK_BF16), line + c,
               LOWP_KCHUNK_BF16 * sizeof *line);
}

/* Row t (of N * Hp) of the padded bf16 image: zeros in the padding. */
static void pad_row_task(void *ctx, int64_t t, int worker) {
    const im2col_src *s = ctx;
    const aie_conv2d_params *p = s->p;
    (void)worker;
    const int64_t n = t / s->hp, h = t % s->hp - p->pad_top, C = p->C;
    aie_bf16 *d = s->xb + t * s->wp * C;
    if (h < 0 || h >= p->H) {
        memset(d, 0, (size_t)(s->wp * C) * sizeof *d);
        return;
    }
    memset(d, 0, (size_t)(p->pad_left * C) * sizeof *d);
    if (s->xb16)
        memcpy(d + p->pad_left * C, s->xb16 + (n * p->H + h) * p->W * C, (size_t)(p->W * C) * sizeof *d);
    else
        s->cvt(s->x + (n * p->H + h) * p->W * C, d + p->pad_left * C, p->W * C);
    memset(d + (p->pad_left + p->W) * C, 0, (size_t)(p->pad_right * C) * sizeof *d);
}

/* Bytes of the padded bf16 image (0 for 1x1 convs, which read x in place). */
static size_t padded_bytes(const aie_conv2d_params *p) {
    if (p->R * p->S == 1) return 0;
    const int64_t hp = p->H + p->pad_top + p->pad_bottom, wp = p->W + p->pad_left + p->pad_right;
    /* + 8 elements: copy_over reads up to 7 past a run */
    return AIE_ROUND_UP((size_t)(p->N * hp * wp * p->C + 8) * sizeof(aie_bf16), AIE_ALIGN);
}

/* Rows [i0, i0 + mc) into whole 16-row strips; rows past mc are zeros. */
static void pack_a(const im2col_src *s, int64_t i0, int64_t mc, aie_bf16 *dst, aie_bf16 *line) {
    const int64_t rows = AIE_ROUND_UP(mc, LOWP_STRIP), ss = s->kp * LOWP_STRIP;
    const int staged = s->xb && s->p->C % LOWP_KCHUNK_BF16 != 0;
    for (int64_t r = 0; r < rows; r++) {
        aie_bf16 *row = dst + (r / LOWP_STRIP) * ss + (r % LOWP_STRIP) * LOWP_KCHUNK_BF16;
        if (r < mc && staged) stage_row(s, i0 + r, line, row);
        else if (r < mc) pack_row(s, i0 + r, row);
        else put_run(s, row, 0, NULL, NULL, s->kp);
    }
}

/* ---- the job -------------------------------------------------------------- */

typedef struct {
    const aie_kernel_table_entry *kt;
    im2col_src src;
    int64_t M, N; /* pixels, output channels */
    const aie_bf16 *bpanels;
    const float *bias, *residual;
    aie_epilogue ep; /* activation only: the bias is applied with it, per block */
    int has_ep;
    float *y;
    /* AIE_CONV_BF16_Y: y in bf16, every block through the sums buffer and
     * rounded on the way out; AIE_CONV_BF16_RES: the residual in bf16 */
    aie_bf16 *yb16;
    const aie_bf16 *res16;
    char *slots; /* per worker: the A block, then up to CONV_BF16_MC x CONV_BF16_NB sums */
    size_t a_bytes, slot_bytes, line_off;
    int64_t acc_ld;
    int64_t tile_m, tile_n, tiles_n;
} conv_job;

/* Whole 32 x 32 blocks accumulate in y itself, unless a residual must be
 * added to the sum first (it may be y): then every block goes through the
 * per-thread buffer. */
static int in_y(const conv_job *j, int m, int64_t jp, int64_t nb) {
    return !j->residual && !j->res16 && !j->yb16 && m == LOWP_MR && jp + LOWP_NR <= nb;
}

/* The output stage into a bf16 y: acc (m x nb sums) += residual, then the
 * epilogue in place, then each row rounded (nearest even, the level's
 * bf16_cvt) into y. The residual row is read before y's row is written, so
 * it may be y itself. */
static void store_bf16(const conv_job *j, float *acc, int m, int64_t nb, int64_t row0, int64_t col0) {
    const int64_t ldy = j->N;
    for (int r = 0; r < m; r++) {
        float *a = acc + r * j->acc_ld;
        if (j->res16) {
            const aie_bf16 *res = j->res16 + (row0 + r) * ldy + col0;
            for (int64_t x = 0; x < nb; x++) a[x] += aie_bf16_to_f32(res[x]);
        } else if (j->residual) {
            const float *res = j->residual + (row0 + r) * ldy + col0;
            for (int64_t x = 0; x < nb; x++) a[x] += res[x];
        }
    }
    if (j->has_ep)
        j->kt->sgemm->epilogue(acc, j->acc_ld, m, nb, j->bias ? j->bias + col0 : NULL, NULL, j->ep.act, j->ep.p0,
                               j->ep.p1);
    for (int r = 0; r < m; r++) j->src.cvt(acc + r * j->acc_ld, j->yb16 + (row0 + r) * ldy + col0, nb);
}

/* The output stage of m rows x nb columns of a column block: y = sum (+
 * residual), then the epilogue (bias, activation) in place, the fp32 conv's
 * order. acc: the block's partial sums (row stride acc_ld). */
static void store(const conv_job *j, const float *acc, int m, int64_t nb, int64_t row0, int64_t col0) {
    const int64_t ldy = j->N;
    float *y = j->y + row0 * ldy + col0;
    for (int64_t x0 = 0; x0 < nb; x0 += LOWP_NR) {
        if (in_y(j, m, x0, nb)) continue;
        const int64_t x1 = min64(nb, x0 + LOWP_NR);
        for (int r = 0; r < m; r++) {
            /* no restrict on d and res: the residual may be y itself */
            const float *a = acc + r * j->acc_ld;
            float *d = y + r * ldy;
            if (j->residual) {
                const float *res = j->residual + (row0 + r) * ldy + col0;
                for (int64_t x = x0; x < x1; x++) d[x] = a[x] + res[x];
            } else if (j->res16) {
                const aie_bf16 *res = j->res16 + (row0 + r) * ldy + col0;
                for (int64_t x = x0; x < x1; x++) d[x] = a[x] + aie_bf16_to_f32(res[x]);
            } else {
                for (int64_t x = x0; x < x1; x++) d[x] = a[x];
            }
        }
    }
    if (j->has_ep)
        j->kt->sgemm->epilogue(y, ldy, m, nb, j->bias ? j->bias + col0 : NULL, NULL, j->ep.act, j->ep.p0, j->ep.p1);
}

static void tile_task(void *ctx, int64_t t, int worker) {
    const conv_job *j = ctx;
    const int64_t i0 = (t / j->tiles_n) * j->tile_m, mc = min64(j->tile_m, j->M - i0);
    const int64_t n0 = (t % j->tiles_n) * j->tile_n, n1 = min64(j->N, n0 + j->tile_n);
    if (mc <= 0 || n0 >= n1) return;
    char *slot = j->slots + (size_t)worker * j->slot_bytes;
    aie_bf16 *pa = (aie_bf16 *)slot;
    float *acc = (float *)(slot + j->a_bytes);
    const int64_t kp = j->src.kp, ss = kp * LOWP_STRIP;
    const lowp_bf16_kernels *kb = j->kt->bf16;
    pack_a(&j->src, i0, mc, pa, (aie_bf16 *)(slot + j->line_off));
    if (kb->begin) kb->begin();
    for (int64_t cb = n0; cb < n1; cb += CONV_BF16_NB) {
        const int64_t nb = min64(CONV_BF16_NB, n1 - cb);
        for (int64_t pc = 0; pc < kp; pc += CONV_BF16_KSLICE) {
            const int64_t kc = min64(CONV_BF16_KSLICE, kp - pc);
            for (int64_t ir = 0; ir < mc; ir += LOWP_MR) {
                const int m = (int)min64(LOWP_MR, mc - ir);
                const aie_bf16 *a = pa + (ir / LOWP_STRIP) * ss + pc * LOWP_STRIP;
                for (int64_t jp = 0; jp < nb; jp += LOWP_NR) {
                    const aie_bf16 *b = j->bpanels + (cb + jp) * kp + pc * LOWP_NR;
                    if (in_y(j, m, jp, nb))
                        kb->ukernel(kc, a, ss, b, m, j->y + (i0 + ir) * j->N + cb + jp, j->N, pc > 0);
                    else
                        kb->ukernel(kc, a, ss, b, m, acc + ir * j->acc_ld + jp, j->acc_ld, pc > 0);
                }
            }
        }
        for (int64_t ir = 0; ir < mc; ir += LOWP_MR) {
            const int m = (int)min64(LOWP_MR, mc - ir);
            if (j->yb16) store_bf16(j, acc + ir * j->acc_ld, m, nb, i0 + ir, cb);
            else store(j, acc + ir * j->acc_ld, m, nb, i0 + ir, cb);
        }
    }
    if (kb->end) kb->end();
}

/* Rows of a task's A block and columns of its partial sums, at most. */
static int64_t block_rows(int64_t M) { return min64(CONV_BF16_MC, AIE_ROUND_UP(M, LOWP_MR)); }
static int64_t acc_cols(int64_t N) { return min64(CONV_BF16_NB, AIE_ROUND_UP(N, LOWP_NR)); }

static size_t a_block_bytes(int64_t M, int64_t kp) {
    return AIE_ROUND_UP((size_t)block_rows(M) * (size_t)kp * sizeof(aie_bf16), AIE_ALIGN);
}

/* The sums of a slot (after its A block), then stage_row's line. */
static size_t acc_bytes(int64_t M, int64_t N) {
    return AIE_ROUND_UP((size_t)block_rows(M) * (size_t)acc_cols(N) * sizeof(float), AIE_ALIGN);
}

static size_t slot_bytes(int64_t M, int64_t N, int64_t kp) {
    return a_block_bytes(M, kp) + acc_bytes(M, N) + AIE_ROUND_UP((size_t)(kp + 8) * sizeof(aie_bf16), AIE_ALIGN);
}

static int eff_threads(int nthreads) {
    int pool = aie_threads_get();
    return nthreads <= 0 ? (pool > 0 ? pool : 1) : nthreads;
}

size_t aie_conv2d_bf16_workspace_size(const aie_conv2d_params *p, int nthreads) {
    int64_t P, Q;
    if (check_params(p, "conv2d_bf16_workspace_size") || aie_conv2d_output_shape(p, &P, &Q)) return 0;
    const int64_t M = p->N * P * Q;
    if (M == 0) return 0;
    /* + AIE_ALIGN: the caller's pointer may be unaligned */
    const size_t slot = slot_bytes(M, p->K, AIE_ROUND_UP(depth(p), LOWP_KCHUNK_BF16));
    return padded_bytes(p) + slot * (size_t)eff_threads(nthreads) + AIE_ALIGN;
}

int aie_conv2d_bf16(const aie_conv2d_params *p, const float *x, const void *packed_w, const float *bias,
                    const float *residual, const aie_epilogue *ep, float *y, void *workspace, size_t workspace_size,
                    int nthreads) {
    return aie_conv2d_bf16_io(p, x, packed_w, bias, residual, ep, y, workspace, workspace_size, nthreads, 0);
}

int aie_conv2d_bf16_io(const aie_conv2d_params *p, const void *x, const void *packed_w, const float *bias,
                       const void *residual, const aie_epilogue *ep, void *y, void *workspace, size_t workspace_size,
                       int nthreads, int io) {
    const char *op = "conv2d_bf16";
    if (io & ~(AIE_CONV_BF16_X | AIE_CONV_BF16_Y | AIE_CONV_BF16_RES))
        return aie_fail(AIE_EINVAL, "%s: io flags %#x, expected a combination of AIE_CONV_BF16_X, _Y and _RES", op,
                        (unsigned)io);
    int64_t P, Q;
    int rc = aie_ensure_init();
    if (rc) return rc;
    if ((rc = check_params(p, op)) || (rc = aie_conv2d_output_shape(p, &P, &Q))) return rc;
    aie_epilogue e;
    if ((rc = aie_conv_check_call(p, x, packed_w, y, ep, AIE_CONV_PACK_BF16, op, &e))) return rc;
    if ((rc = aie_gemm_check_epilogue(op, &e))) return rc;
    const int64_t M = p->N * P * Q;
    if (M == 0) return AIE_OK;
    const int64_t D = depth(p), kp = AIE_ROUND_UP(D, LOWP_KCHUNK_BF16);
    conv_job j = {
        .kt = aie_kernels(),
        .src = {p, P, Q, D, kp, (io & AIE_CONV_BF16_X) ? NULL : x, (io & AIE_CONV_BF16_X) ? x : NULL, NULL, NULL,
                0, 0},
        .M = M, .N = p->K,
        /* the conv header, then the bf16 GEMM's header (64 bytes), then the panels */
        .bpanels = (const aie_bf16 *)((const char *)packed_w + sizeof(aie_conv_pack_header) + 64),
        .bias = bias, .residual = (io & AIE_CONV_BF16_RES) ? NULL : residual,
        .res16 = (io & AIE_CONV_BF16_RES) ? residual : NULL,
        .ep = e,
        .has_ep = bias != NULL || e.act != AIE_U_IDENTITY,
        .y = (io & AIE_CONV_BF16_Y) ? NULL : y,
        .yb16 = (io & AIE_CONV_BF16_Y) ? y : NULL,
        .a_bytes = a_block_bytes(M, kp), .slot_bytes = slot_bytes(M, p->K, kp),
        .line_off = a_block_bytes(M, kp) + acc_bytes(M, p->K),
        .acc_ld = acc_cols(p->K),
    };
    j.src.cvt = j.kt->bf16_cvt;
    int nt = eff_threads(nthreads);
    const double flops = 2.0 * (double)M * (double)p->K * (double)D;
    if (flops / CONV_BF16_MIN_FLOPS_PER_THREAD < nt)
        nt = (int)max64(1, (int64_t)(flops / CONV_BF16_MIN_FLOPS_PER_THREAD));
    char *base;
    const size_t padded = padded_bytes(p);
    rc = aie_workspace_layout(op, "aie_conv2d_bf16_workspace_size", workspace, workspace_size, padded, j.slot_bytes,
                              M, p->K, D, &base, &nt);
    if (rc) return rc;
    j.slots = base + padded;
    if (padded) {
        j.src.xb = (aie_bf16 *)base;
        j.src.hp = p->H + p->pad_top + p->pad_bottom;
        j.src.wp = p->W + p->pad_left + p->pad_right;
        memset(j.src.xb + p->N * j.src.hp * j.src.wp * p->C, 0, 8 * sizeof(aie_bf16)); /* copy_over's slack */
        aie_parallel_dynamic(p->N * j.src.hp, nt, pad_row_task, &j.src);
    }
    aie_lowp_plan_tiles(M, p->K, CONV_BF16_MC, nt, &j.tile_m, &j.tile_n);
    j.tiles_n = (p->K + j.tile_n - 1) / j.tile_n;
    aie_parallel_dynamic((M + j.tile_m - 1) / j.tile_m * j.tiles_n, nt, tile_task, &j);
    return AIE_OK;
}

const char *aie_conv2d_bf16_path(void) { return aie_kernels()->bf16->name; }
