/*
 * The direct convolution micro-kernel (contract: aie_conv_direct_kernel in
 * conv_kernels.h) written once over a per-ISA vector type and instantiated
 * by scalar/conv_direct_scalar.c, avx2/conv_direct_avx2.c and
 * avx512/conv_direct_avx512.c, each compiled with its own ISA flags. The
 * including file defines vf, VL, vf_zero/vf_set1/vf_load/vf_loadn/vf_store/
 * vf_storen/vf_fma/vf_add/vf_min/vf_max, act_row, and
 *   CD_MR, CD_NV     the tile: MR pixels x NV vectors (NR = NV * VL, which
 *                    must equal the GEMM's NR for the ISA: the weights are
 *                    the GEMM's packed B panels)
 *   CD_NAME, CD_TABLE the kernels' name prefix (one function per tile height
 *                    and width, e.g. conv_direct_avx512_nv2_h14) and the table
 *
 * Why it pays: the implicit-GEMM path packs every im2col element into an A
 * panel before the micro-kernel reads it, ~1 cycle per element against ~2
 * cycles of FMAs per element when only 64 output channels (two 32-wide
 * panels) share the packed block. Here the broadcasts read the NHWC input
 * directly: the MR pixels of a tap are lda = stride_w * C floats apart.
 * Summation order per output: segments in order, k ascending within each;
 * the same for every tile and thread count, so results are deterministic.
 */
#include "conv_kernels.h"

#define CD_NR (CD_NV * VL)
/* See aie_conv_direct_kernel.winograd_min_c and winograd_block_min; where
 * not measured, 16 and 0 (as before they were per ISA). */
#ifndef CD_WINOGRAD_MIN_C
#define CD_WINOGRAD_MIN_C 16
#endif
#ifndef CD_WINOGRAD_BLOCK_MIN
#define CD_WINOGRAD_BLOCK_MIN 0
#endif
/* Shapes: wide = up to MR pixels x NV vectors (a whole weight panel);
 * narrow = up to 2*MR pixels x NV/2 (convs with at most NR/2 output
 * channels: the wide tile would spend half its FMAs on the panel's zero
 * padding). */
#define CD_MR_NARROW (2 * CD_MR)
#define CD_NV_NARROW (CD_NV / 2)
#define CD_ROWS_PER_BASE 7

/* SiLU over a stored tile: rows x n floats, ldc apart. A rolled loop over
 * the tile's vectors, not vmf_silu on the MR_ x NV_ accumulators in the
 * epilogue: there (AVX2: 12 accumulators, sigmoid's ~10 constants, 16 ymm
 * registers) the fused SiLU cost up to ~2x a standalone SiLU pass (thread
 * time, Zen 3, loaded: the stem 3->16 /2 @320 spent 0.4-0.5 ms of ~1.0 on
 * it, a standalone SiLU of its output ~0.25 ms of compute). This loop keeps
 * the constants in registers and lets the iterations' exp / divide chains
 * overlap; in-process A/B, 1 thread: SiLU convs 0.87-0.98x, the stem
 * 0.87-0.89x. The tile is still in L1. Same function on the same values:
 * the same bits as before and as act_row. */
static inline __attribute__((always_inline)) void cd_silu_tile(float *c, int64_t ldc, int rows, int n) {
    const int nfull = n / VL * VL;
    for (int i = 0; i < rows; i++) {
        float *row = c + i * ldc;
#pragma GCC unroll 2
        for (int j = 0; j < nfull; j += VL) vf_store(row + j, vmf_silu(vf_load(row + j)));
        if (nfull < n) vf_storen(row + nfull, vmf_silu(vf_loadn(row + nfull, n - nfull)), n - nfull);
    }
}

/* The tile body for MR_ rows x NV_ vectors (compile-time constants after
 * inlining); weight rows are CD_NR floats apart whatever NV_. */
static inline __attribute__((always_inline)) void cd_tile(const int MR_, const int NV_, int nseg,
                                                          const aie_conv_seg *seg, const float *restrict pb,
                                                          const float *bias_col, const float *res, float *c,
                                                          int64_t ldc, int n, const aie_epilogue *ep,
                                                          const float *pf, const int64_t pf_step) {
    vf acc[CD_MR_NARROW][CD_NV];
#pragma GCC unroll 32
    for (int i = 0; i < MR_; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV_; v++) acc[i][v] = vf_zero();

    for (int s = 0; s < nseg; s++) {
        const int64_t lda = seg[s].lda, len = seg[s].len;
        /* One base pointer per 7 rows: a row is then base + {0..6} * lda,
         * which x86 addresses as base + index * {1,2,4,8} with lda, 3*lda
         * and 5*lda in registers, not a register per row. */
        const float *base[(CD_MR_NARROW + CD_ROWS_PER_BASE - 1) / CD_ROWS_PER_BASE];
#pragma GCC unroll 8
        for (int bi = 0; bi * CD_ROWS_PER_BASE < MR_; bi++) base[bi] = seg[s].a + bi * CD_ROWS_PER_BASE * lda;
        const float *b = pb + seg[s].k0 * CD_NR;
#pragma GCC unroll 2
        for (int64_t t = 0; t < len; t++) {
            /* locality 2: prefetcht1, into L2 -- the next panels are used
             * after this whole block, not by this tile */
            __builtin_prefetch(pf, 0, 2);
            pf += pf_step;
            vf bv[CD_NV];
#pragma GCC unroll 16
            for (int v = 0; v < NV_; v++) bv[v] = vf_load(b + v * VL);
#pragma GCC unroll 32
            for (int i = 0; i < MR_; i++) {
                vf a = vf_set1(base[i / CD_ROWS_PER_BASE][(i % CD_ROWS_PER_BASE) * lda + t]);
#pragma GCC unroll 16
                for (int v = 0; v < NV_; v++) acc[i][v] = vf_fma(a, bv[v], acc[i][v]);
            }
            b += CD_NR;
        }
    }

    const int act = ep ? ep->act : AIE_U_IDENTITY;
    /* ReLU is clip(0, +inf); x86 max/min return the second operand on NaN,
     * so a NaN accumulator stays NaN (as in the GEMM epilogue). */
    const int clamp = act == AIE_U_RELU || act == AIE_U_CLIP;
    /* SiLU (every conv of a YOLO-style network): over the whole stored
     * tile at once (cd_silu_tile), not row by row through act_row, where
     * a row of 16-32 channels is one or two vectors, each a lone dependent
     * exp / divide chain. */
    const int silu = act == AIE_U_SILU;
    vf lo = vf_set1(act == AIE_U_CLIP ? ep->p0 : 0.0f);
    vf hi = vf_set1(act == AIE_U_CLIP ? ep->p1 : __builtin_inff());
#pragma GCC unroll 32
    for (int i = 0; i < MR_; i++) {
#pragma GCC unroll 16
        for (int v = 0; v < NV_; v++) {
            int nv = n - v * VL;
            if (nv <= 0) break;
            vf r = acc[i][v];
            if (bias_col) r = vf_add(r, nv >= VL ? vf_load(bias_col + v * VL) : vf_loadn(bias_col + v * VL, nv));
            if (res) {
                const float *rp = res + i * ldc + v * VL;
                r = vf_add(r, nv >= VL ? vf_load(rp) : vf_loadn(rp, nv));
            }
            if (clamp) r = vf_max(lo, vf_min(hi, r));
            float *cp = c + i * ldc + v * VL;
            if (nv >= VL) vf_store(cp, r);
            else vf_storen(cp, r, nv);
        }
    }
    const int ncols = n < NV_ * VL ? n : NV_ * VL;
    if (silu) cd_silu_tile(c, ldc, MR_, ncols);
    else if (act != AIE_U_IDENTITY && !clamp)
        for (int i = 0; i < MR_; i++) act_row(c + i * ldc, ncols, act, ep->p0, ep->p1);
}

#define CD_CAT2(a, b) a##b
#define CD_CAT(a, b) CD_CAT2(a, b)
/* One function per tile height h (1 .. MR wide, 1 .. 2*MR narrow): the
 * driver splits a row of Q output pixels into balanced tiles (heights
 * differing by at most one), so no pixel is computed twice. */
#define CD_DEFINE(h, NV_)                                                                                         \
    static void CD_CAT(CD_CAT(CD_NAME, _nv##NV_##_h), h)(int nseg, const aie_conv_seg *seg, const float *pb,       \
                                                          const float *bias_col, const float *res, float *c,     \
                                                          int64_t ldc, int n, const aie_epilogue *ep,            \
                                                          const float *pf, int64_t pf_step) {                    \
        cd_tile(h, NV_, nseg, seg, pb, bias_col, res, c, ldc, n, ep, pf, pf_step);                           \
    }
#define CD_FN(h, NV_) CD_CAT(CD_CAT(CD_NAME, _nv##NV_##_h), h)

/* CD_NV and CD_NV_NARROW as literals for token pasting (checked below). */
#if CD_NV == 2
#define CD_NVW 2
#define CD_NVN 1
#elif CD_NV == 16
#define CD_NVW 16
#define CD_NVN 8
#else
#error "conv_direct_body.h: add the literal NV pair for this CD_NV"
#endif
_Static_assert(CD_NVW == CD_NV && CD_NVN == CD_NV_NARROW, "tile vector counts");

#define CD_PAIR(h) CD_DEFINE(h, CD_NVW) CD_DEFINE(h, CD_NVN)
#define CD_NARROW_ONLY(h) CD_DEFINE(h, CD_NVN)
CD_PAIR(1) CD_PAIR(2) CD_PAIR(3) CD_PAIR(4)
#if CD_MR >= 6
CD_PAIR(5) CD_PAIR(6)
#endif
#if CD_MR >= 14
CD_PAIR(7) CD_PAIR(8) CD_PAIR(9) CD_PAIR(10) CD_PAIR(11) CD_PAIR(12) CD_PAIR(13) CD_PAIR(14)
#endif
#if CD_MR == 4
CD_NARROW_ONLY(5) CD_NARROW_ONLY(6) CD_NARROW_ONLY(7) CD_NARROW_ONLY(8)
#elif CD_MR == 6
CD_NARROW_ONLY(7) CD_NARROW_ONLY(8) CD_NARROW_ONLY(9) CD_NARROW_ONLY(10) CD_NARROW_ONLY(11) CD_NARROW_ONLY(12)
#elif CD_MR == 14
CD_NARROW_ONLY(15) CD_NARROW_ONLY(16) CD_NARROW_ONLY(17) CD_NARROW_ONLY(18) CD_NARROW_ONLY(19) CD_NARROW_ONLY(20)
CD_NARROW_ONLY(21) CD_NARROW_ONLY(22) CD_NARROW_ONLY(23) CD_NARROW_ONLY(24) CD_NARROW_ONLY(25) CD_NARROW_ONLY(26)
CD_NARROW_ONLY(27) CD_NARROW_ONLY(28)
#else
#error "conv_direct_body.h: list the tile heights for this CD_MR"
#endif

const aie_conv_direct_kernel CD_TABLE = {
    .nr = CD_NR,
    .winograd_min_c = CD_WINOGRAD_MIN_C,
    .winograd_block_min = CD_WINOGRAD_BLOCK_MIN,
    .wide = {CD_MR, CD_NR,
             {NULL, CD_FN(1, CD_NVW), CD_FN(2, CD_NVW), CD_FN(3, CD_NVW), CD_FN(4, CD_NVW),
#if CD_MR >= 6
              CD_FN(5, CD_NVW), CD_FN(6, CD_NVW),
#endif
#if CD_MR >= 14
              CD_FN(7, CD_NVW), CD_FN(8, CD_NVW), CD_FN(9, CD_NVW), CD_FN(10, CD_NVW), CD_FN(11, CD_NVW),
              CD_FN(12, CD_NVW), CD_FN(13, CD_NVW), CD_FN(14, CD_NVW),
#endif
             }},
    .narrow = {CD_MR_NARROW, CD_NV_NARROW * VL,
               {NULL, CD_FN(1, CD_NVN), CD_FN(2, CD_NVN), CD_FN(3, CD_NVN), CD_FN(4, CD_NVN), CD_FN(5, CD_NVN),
                CD_FN(6, CD_NVN), CD_FN(7, CD_NVN), CD_FN(8, CD_NVN),
#if CD_MR >= 6
                CD_FN(9, CD_NVN), CD_FN(10, CD_NVN), CD_FN(11, CD_NVN), CD_FN(12, CD_NVN),
#endif
#if CD_MR >= 14
                CD_FN(13, CD_NVN), CD_FN(14, CD_NVN), CD_FN(15, CD_NVN), CD_FN(16, CD_NVN), CD_FN(17, CD_NVN),
                CD_FN(18, CD_NVN), CD_FN(19, CD_NVN), CD_FN(20, CD_NVN), CD_FN(21, CD_NVN), CD_FN(22, CD_NVN),
                CD_FN(23, CD_NVN), CD_FN(24, CD_NVN), CD_FN(25, CD_NVN), CD_FN(26, CD_NVN), CD_FN(27, CD_NVN),
                CD_FN(28, CD_NVN),
#endif
               }},
};
