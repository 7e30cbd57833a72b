/* Internal: the per-ISA direct kernels behind aie_conv.h / aie_pool.h and
 * the pieces their drivers share (not installed). Each kernel has a portable
 * variant (scalar/) and avx2/avx512 ones with the same signature; the
 * drivers pick one through the dispatch table (kernel_table.h). */
#ifndef AIE_CONV_KERNELS_H
#define AIE_CONV_KERNELS_H

#include <math.h>

#include "aie_internal.h"

/* Depthwise conv (groups == C == K) over output rows [row0, row1) of the
 * flattened (n, p) range. w: R*S x C (tap-major, channel-contiguous). bias,
 * residual may be NULL; ep is never NULL here (drivers pass a zeroed one). */
typedef struct {
    const aie_conv2d_params *p;
    int64_t P, Q;
    const float *x, *w, *bias, *residual;
    const aie_epilogue *ep;
    float *y;
    /* NULL: input rows are x's. Else (the fused block, conv_dw_pw.c) input
     * row h of the one image being computed is ring + (h % ring_rows) * W * C. */
    const float *ring;
    int64_t ring_rows;
} aie_dwconv_args;

/* A function type: each ISA's kernel is declared with it (one prototype). */
typedef void aie_dwconv_fn(const aie_dwconv_args *a, int64_t row0, int64_t row1);
aie_dwconv_fn aie_dwconv_rows_scalar, aie_dwconv_rows_avx2, aie_dwconv_rows_avx512;
/* Output pixels [q0, q1) of output row `row` (the flattened (n, p) range),
 * pixel q's C channels written at out + (q - q0) * C instead of into y (the
 * same arithmetic as aie_dwconv_fn): the fused depthwise -> 1x1 conv keeps
 * them in a per-thread scratch. */
typedef void aie_dwconv_span_fn(const aie_dwconv_args *a, int64_t row, int64_t q0, int64_t q1, float *out);
aie_dwconv_span_fn aie_dwconv_span_scalar, aie_dwconv_span_avx2, aie_dwconv_span_avx512;

/* Direct (packing-free) convolution micro-kernel, NHWC, groups == 1.
 * One call computes an h-pixel x NR-channel output tile (h <= MR consecutive
 * output pixels of one output row, NR = the GEMM's panel width for the ISA,
 * or a narrower tile: aie_conv_direct_shape) as a sum over segments: segment s covers rows [k0, k0 + len) of the
 * GEMM-packed weight panel `pb` (K x NR, k-major, the layout
 * aie_sgemm_pack_b writes), and pixel i's operand for row k0 + t is
 * a[i * lda + t]. An interior tap row (all pixels inside the image) is one
 * segment straight on x (lda = stride_w * C, len = S * C when dil_w == 1);
 * taps that cross the image border are copied by the driver into a small
 * zero-filled scratch (lda = C); taps entirely in the padding are skipped.
 * Epilogue: r = acc + bias_col[j] + res[i * ldc + j] (each if not NULL),
 * then ep->act; only columns < n are stored.
 * pf, pf_step: while it runs, the kernel prefetches pf, pf + pf_step, ...
 * (one line per weight row, into L2) -- the weight panels the caller will
 * use next, so their first pass does not wait on memory (pf_step 0: none).
 * Prefetches never fault; pf must lie inside the caller's weight blob. */
typedef struct {
    const float *a;
    int64_t lda, k0, len;
} aie_conv_seg;

typedef void (*aie_conv_direct_tile_fn)(int nseg, const aie_conv_seg *seg, const float *pb, const float *bias_col,
                                        const float *res, float *c, int64_t ldc, int n,
                                        const aie_epilogue *ep, const float *pf, int64_t pf_step);
/* Max tile height of any ISA's shapes (avx512 narrow: 28 pixels). */
#define AIE_CONV_DIRECT_MR_MAX 28

/* One tile shape: up to mr pixels x ncols output channels; tile[h] is the
 * kernel for h pixels (1 <= h <= mr; tile[0] unused). */
typedef struct {
    int mr, ncols;
    aie_conv_direct_tile_fn tile[AIE_CONV_DIRECT_MR_MAX + 1];
} aie_conv_direct_shape;
/* nr: the weight panel width (the GEMM's NR). wide: ncols = nr; narrow:
 * twice the pixels, ncols = nr / 2, for convs with at most nr / 2 output
 * channels (the wide tile would spend half its FMAs on panel padding). */
typedef struct {
    int nr;
    aie_conv_direct_shape wide, narrow;
    /* Fewest input channels for which Winograd (whose 16 products run on
     * these tiles, one C-long segment per call) beats the direct path. */
    int winograd_min_c;
    /* Too few L2-sized tile blocks for ~4 tasks per thread: Winograd cuts
     * blocks down to this many tiles before it splits the output channels
     * into parts, each of which transforms its block's tiles again (0: it
     * keeps the blocks and splits the channels). */
    int winograd_block_min;
} aie_conv_direct_kernel;

extern const aie_conv_direct_kernel aie_conv_direct_scalar;
#ifdef AIE_HAVE_X86
extern const aie_conv_direct_kernel aie_conv_direct_avx2;
extern const aie_conv_direct_kernel aie_conv_direct_avx512;
#endif

/* Winograd F(2x2, 3x3) tile transforms (winograd_body.h; the driver is
 * conv_winograd.c). Tiles are numbered (n, ti, tj) row-major over th x tw
 * tiles per image; tile (ti, tj) covers output pixels 2ti..2ti+1 x
 * 2tj..2tj+1 and reads input pixels from (2ti - pad_top, 2tj - pad_left)
 * on, 4 x 4 of them (zeros outside the image).
 *   input:  tiles [t0, t0 + nt) -> v[xi * vstride + i * C + c] for the 16
 *           positions xi of V = B^T d B.
 *   output: nt tiles from m[xi * mstride + i * ldm + jj] (jj < the panel
 *           width, whole vectors readable) -> y channels [j, j + ncols) of
 *           the tiles' in-image pixels, with bias, residual and activation. */
typedef struct {
    const aie_conv2d_params *p;
    int64_t P, Q, th, tw;
    const float *x, *bias, *residual;
    const aie_epilogue *ep;
    float *y;
} aie_winograd_args;

typedef struct {
    void (*input)(const aie_winograd_args *a, int64_t t0, int64_t nt, float *v, int64_t vstride);
    void (*output)(const aie_winograd_args *a, int64_t t0, int64_t nt, const float *m, int64_t mstride, int64_t ldm,
                   int64_t j, int ncols);
} aie_winograd_kernel;

extern const aie_winograd_kernel aie_winograd_scalar;
#ifdef AIE_HAVE_X86
extern const aie_winograd_kernel aie_winograd_avx2;
extern const aie_winograd_kernel aie_winograd_avx512;
#endif

/* Pooling over output rows [row0, row1) of the flattened (n, p) range. */
typedef struct {
    const aie_pool2d_params *p;
    int64_t P, Q;
    int kind;
    const float *x;
    float *y;
} aie_pool_args;

typedef void aie_pool_fn(const aie_pool_args *a, int64_t row0, int64_t row1);
aie_pool_fn aie_pool_rows_scalar, aie_pool_rows_avx2, aie_pool_rows_avx512;

/* Global pooling of images [n0, n1): x N x HW x C -> y N x C. */
typedef void aie_gpool_fn(int kind, int64_t HW, int64_t C, const float *x, float *y, int64_t n0, int64_t n1);
aie_gpool_fn aie_gpool_scalar, aie_gpool_avx2, aie_gpool_avx512;

/* Window of one pooling/conv output coordinate along one axis: the taps
 * i in [i0, i1) land inside [0, in); `count` is the divisor for an average. */
typedef struct {
    int64_t i0, i1, count_all;
} aie_window;

static inline aie_window aie_pool_window(int64_t o, int64_t stride, int64_t pad_begin, int64_t pad_end, int64_t k,
                                         int64_t dil, int64_t in) {
    int64_t start = o * stride - pad_begin;
    aie_window w = {0, 0, 0};
    /* taps inside [-pad_begin, in + pad_end): the ceil-mode tail is excluded */
    for (int64_t i = 0; i < k; i++) {
        int64_t h = start + i * dil;
        if (h < in + pad_end) w.count_all++;
    }
    /* first tap with h >= 0, first tap with h >= in */
    w.i0 = start >= 0 ? 0 : (-start + dil - 1) / dil;
    w.i1 = start >= in ? 0 : (in - start + dil - 1) / dil;
    if (w.i1 > k) w.i1 = k;
    if (w.i0 > w.i1) w.i0 = w.i1;
    return w;
}

#endif
