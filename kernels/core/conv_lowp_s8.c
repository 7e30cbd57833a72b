/*
 * int8 convolution driver (contract in include/aie_conv_s8.h): the int8 GEMM
 * (core/gemm_lowp.c) over the im2col matrix, which is never built: each GEMM
 * task writes its im2col rows straight into the packed A strips its
 * micro-kernels read (padding taps read the input zero point). The
 * micro-kernels come from the dispatch table and the output stage is the one
 * every int8 path shares. A 1x1 stride-1 unpadded conv is a GEMM on x itself.
 */
#include <stdlib.h>
#include <string.h>

#include "aie_internal.h"
#include "gemm_lowp_internal.h"

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

size_t aie_conv2d_u8s8_workspace_size(const aie_conv2d_params *p, int nthreads) {
    int64_t P, Q;
    if (check("aie_conv2d_u8s8_workspace_size", p, &P, &Q) != AIE_OK) return 0;
    return aie_gemm_u8s8_workspace_size(p->N * P * Q, p->K, taps(p), nthreads);
}

typedef struct {
    const aie_conv2d_params *p;
    const uint8_t *x;
    uint8_t zero;
    int64_t P, Q;
} im2col_job;

/* Element k of a strip row is at row[(k / chunk) * strip_stride + k % chunk]
 * (gemm_lowp_internal.h): a run of taps is cut at the k-chunk boundaries. */
#define CHUNK LOWP_KCHUNK_S8
#define CHUNK_STRIDE (LOWP_KCHUNK_S8 * LOWP_STRIP)

static void put(uint8_t *row, int64_t k, const uint8_t *src, int64_t len) {
    while (len > 0) {
        const int64_t off = k % CHUNK, take = len < CHUNK - off ? len : CHUNK - off;
        memcpy(row + (k / CHUNK) * CHUNK_STRIDE + off, src, (size_t)take);
        k += take, src += take, len -= take;
    }
}

static void fill(uint8_t *row, int64_t k, uint8_t v, int64_t len) {
    while (len > 0) {
        const int64_t off = k % CHUNK, take = len < CHUNK - off ? len : CHUNK - off;
        memset(row + (k / CHUNK) * CHUNK_STRIDE + off, v, (size_t)take);
        k += take, len -= take;
    }
}

/* Row i of the im2col matrix (taps in (r, s, c) order; padding taps read
 * x_zero) through emit(dst, k, src or NULL, len), which places runs. A
 * window row whose S taps are all inside the image is one contiguous run of
 * S*C input bytes (dilation 1). */
#define IM2COL_ROW(j, i, EMIT_COPY, EMIT_FILL)                                                                 \
    do {                                                                                                       \
        const aie_conv2d_params *p_ = (j)->p;                                                                  \
        const int64_t C_ = p_->C, S_ = p_->S, PQ_ = (j)->P * (j)->Q;                                           \
        const int64_t n_ = (i) / PQ_, oh_ = ((i) % PQ_) / (j)->Q, ow_ = (i) % (j)->Q;                          \
        const int64_t iw0_ = ow_ * p_->stride_w - p_->pad_left;                                                \
        const int whole_ = p_->dil_w == 1 && iw0_ >= 0 && iw0_ + S_ <= p_->W;                                  \
        for (int64_t rr_ = 0; rr_ < p_->R; rr_++) {                                                            \
            const int64_t ih_ = oh_ * p_->stride_h - p_->pad_top + rr_ * p_->dil_h, k_ = rr_ * S_ * C_;        \
            if (ih_ < 0 || ih_ >= p_->H) {                                                                     \
                EMIT_FILL(k_, S_ * C_);                                                                        \
                continue;                                                                                      \
            }                                                                                                  \
            const uint8_t *src_ = (j)->x + ((n_ * p_->H + ih_) * p_->W) * C_;                                  \
            if (whole_) {                                                                                      \
                EMIT_COPY(k_, src_ + iw0_ * C_, S_ * C_);                                                      \
                continue;                                                                                      \
            }                                                                                                  \
            for (int64_t s_ = 0; s_ < S_; s_++) {                                                              \
                const int64_t iw_ = iw0_ + s_ * p_->dil_w;                                                     \
                if (iw_ < 0 || iw_ >= p_->W) EMIT_FILL(k_ + s_ * C_, C_);                                      \
                else EMIT_COPY(k_ + s_ * C_, src_ + iw_ * C_, C_);                                             \
            }                                                                                                  \
        }                                                                                                      \
    } while (0)

/* Small K (few input channels: the first layer's 7x7x3 taps): a row is built
 * contiguously in a buffer in L1, then moved into the strip a chunk at a
 * time. Runs are copied in 32-byte blocks (fixed-size copies the compiler
 * inlines) while the block stays inside x; the overshoot lands in the buffer
 * and is overwritten by the next run or ignored past K. */
#define ROWBUF_MAX 4096
#define BLOCK 32

static inline void copy_blocks(uint8_t *d, const uint8_t *s, int64_t len, const uint8_t *s_end) {
    if (s + AIE_ROUND_UP(len, BLOCK) <= s_end)
        for (int64_t o = 0; o < len; o += BLOCK) memcpy(d + o, s + o, BLOCK);
    else memcpy(d, s, (size_t)len);
}

/* The im2col rows [i0, i0 + mc) written straight into the GEMM's A strips:
 * no im2col matrix. */
static void pack_im2col(const void *ctx, int64_t i0, int64_t mc, int64_t K, int64_t kp, uint8_t *dst) {
    const im2col_job *j = ctx;
    const int64_t rows = AIE_ROUND_UP(mc, LOWP_STRIP), C = j->p->C;
    const uint8_t *x_end = j->x + j->p->N * j->p->H * j->p->W * C;
    _Alignas(64) uint8_t buf[ROWBUF_MAX + BLOCK];
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = dst + (r / LOWP_STRIP) * kp * LOWP_STRIP + (r % LOWP_STRIP) * CHUNK;
        if (r >= mc) {
            fill(row, 0, 0, kp);
            continue;
        }
        const int64_t i = i0 + r;
        if (C % CHUNK == 0) { /* every run is whole chunks */
#define CP(k, src, len)                                                                                        \
    for (int64_t o = 0; o < (len); o += CHUNK) memcpy(row + ((k) + o) / CHUNK * CHUNK_STRIDE, (src) + o, CHUNK)
#define FL(k, len)                                                                                             \
    for (int64_t o = 0; o < (len); o += CHUNK) memset(row + ((k) + o) / CHUNK * CHUNK_STRIDE, j->zero, CHUNK)
            IM2COL_ROW(j, i, CP, FL);
#undef CP
#undef FL
        } else if (kp <= ROWBUF_MAX) {
#define CP(k, src, len) copy_blocks(buf + (k), (src), (len), x_end)
#define FL(k, len) memset(buf + (k), j->zero, (size_t)(len))
            IM2COL_ROW(j, i, CP, FL);
#undef CP
#undef FL
            memset(buf + K, 0, (size_t)(kp - K));
            for (int64_t c = 0; c < kp; c += CHUNK) memcpy(row + c / CHUNK * CHUNK_STRIDE, buf + c, CHUNK);
            continue;
        } else {
#define CP(k, src, len) put(row, (k), (src), (len))
#define FL(k, len) fill(row, (k), j->zero, (len))
            IM2COL_ROW(j, i, CP, FL);
#undef CP
#undef FL
        }
        fill(row, K, 0, kp - K);
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
    const size_t need = aie_conv2d_u8s8_workspace_size(p, nthreads);
    if (!workspace || workspace_size < need)
        return aie_fail(AIE_ENOMEM, "%s: workspace of %zu bytes, need %zu (aie_conv2d_u8s8_workspace_size)", fn,
                        workspace ? workspace_size : 0, need);
    if (pointwise(p))
        return aie_gemm_u8s8(M, p->K, kg, x, kg, x_zero, packed_w, y, p->K, q, workspace, workspace_size, nthreads);
    const im2col_job j = {p, x, (uint8_t)x_zero, P, Q};
    return aie_gemm_u8s8_implicit(fn, M, p->K, kg, pack_im2col, &j, x_zero, packed_w, y, p->K, q, workspace,
                                  workspace_size, nthreads);
}
