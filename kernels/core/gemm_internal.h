/*
 * SGEMM internals shared by the driver (core/gemm.c), the packing routines
 * (core/gemm_pack.c) and the per-ISA kernels (scalar/, avx2/, avx512/).
 *
 * Structure (BLIS/GotoBLAS): C is cut into NC-wide column blocks, K into
 * KC-deep slices, rows into MC-tall blocks. For each (NC, KC) pair B is
 * packed into NR-wide micro-panels (k-major: panel[k*NR + j]); for each MC
 * block A is packed into MR-tall micro-panels (panel[k*MR + i]); the
 * micro-kernel multiplies one MR x KC panel by one KC x NR panel into an
 * MR x NR tile of C held in registers. Packing zero-pads ragged edges, so
 * the micro-kernel always runs a full tile and masks only its stores.
 */
#ifndef AIE_GEMM_INTERNAL_H
#define AIE_GEMM_INTERNAL_H

#include "aie_internal.h"
#include "threadpool.h"

/* Cache blocking, in one place, for every ISA.
 * KC = 256: a KC x NR micro-panel of B (32 KiB at NR = 32) stays in the 48 KiB
 *   L1d of Sapphire/Emerald Rapids (32 KiB L1d on older cores: NR = 16 there).
 * MC = 336: the packed A block (336 x 256 x 4 B = 336 KiB) stays in L2 (2 MiB);
 *   336 is a multiple of every MR (4, 6, 14).
 * NC = 4096: the packed B block (4 MiB) lives in L3; columns beyond it loop. */
#define GEMM_KC 256
#define GEMM_MC 336
#define GEMM_NC 4096
/* Without pre-packed weights, B is packed whole (all K) for a block of
 * columns before any C tile runs, shared by every thread, so threads never
 * pack the same B twice; this caps that block (and the workspace it needs):
 * 8 MiB is 2048 columns at K = 1024, well inside the L3. */
#ifndef GEMM_B_BLOCK_BYTES
#define GEMM_B_BLOCK_BYTES (8u << 20)
#endif
/* Problems with M <= GEMM_SMALL_M run packing-free (GEMV-like) kernels. */
#define GEMM_SMALL_M 8

/* The epilogue of one micro-tile, pointers already offset to the tile:
 * C += bias_col[j] (if not NULL), += bias_row[i] (if not NULL), then act. */
typedef struct {
    const float *bias_col, *bias_row;
    int act;
    float p0, p1;
} gemm_tile_ep;

/* C[0:m, 0:n] = alpha * (packed A panel x packed B panel) + beta * C, then
 * the epilogue ep (NULL: none) on the accumulators before the store;
 * beta == 0 means C is not read. m <= MR, n <= NR. */
typedef void (*gemm_ukernel_fn)(int64_t kc, const float *pa, const float *pb, float *c, int64_t ldc, int m, int n,
                                float alpha, float beta, const gemm_tile_ep *ep);

/* Packing-free small-M kernel, columns [n0, n1) of all m rows (m <= GEMM_SMALL_M):
 * C = alpha * op(A) * B + beta * C with B not transposed (row k of B is contiguous);
 * A(i, k) is A[i*lda + k], or A[k*lda + i] when trans_a. */
typedef void (*gemm_small_fn)(int64_t m, int64_t n0, int64_t n1, int64_t K, float alpha, int trans_a,
                              const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                              int64_t ldc);

/* Packing-free small-M kernel for B transposed (B stored N x K) and A not
 * transposed: C[i][j] = alpha * dot(A row i, B row j) + beta * C[i][j]. */
typedef void (*gemm_small_bt_fn)(int64_t m, int64_t n0, int64_t n1, int64_t K, float alpha, const float *A,
                                 int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* Epilogue on an m x n tile of C: add bias_col[j] (if not NULL), bias_row[i]
 * (if not NULL), then apply act with parameters p0/p1. */
typedef void (*gemm_epilogue_fn)(float *c, int64_t ldc, int64_t m, int64_t n, const float *bias_col,
                                 const float *bias_row, int act, float p0, float p1);

/* Packing-free small-M kernel on pre-packed B: C[0:m, 0:n] = alpha * op(A) *
 * Bp + beta * C where bp points at a K x NR micro-panel of a pre-packed B
 * and the following panels (K * NR floats apart) hold the next columns. */
typedef void (*gemm_small_packed_fn)(int64_t m, int64_t n, int64_t K, float alpha, int trans_a, const float *A,
                                     int64_t lda, const float *bp, float beta, float *C, int64_t ldc);

typedef struct {
    aie_isa isa;
    int mr, nr;
    const char *ukernel_name; /* e.g. "ukernel_avx512_14x32", for reports */
    gemm_ukernel_fn ukernel;
    gemm_small_fn small;
    gemm_small_fn small_stream; /* same contract, B streamed row by row (B larger than L2) */
    int stream_max_m;           /* most rows small_stream replaces small for (GEMM_STREAM_MAX_M) */
    gemm_small_packed_fn small_packed;
    gemm_small_bt_fn small_bt;
    gemm_epilogue_fn epilogue;
    gemm_epilogue_fn epilogue_bf16; /* the bf16 GEMM's: its GELU only as exact as bf16 needs (vmf_gelu_bf16) */
    /* aie_gemm_pack_a's contract (same bytes); an ISA may transpose in registers */
    void (*pack_a)(int trans_a, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc, int mr,
                   float *dst);
} gemm_kernels;

/* Per-ISA tables (scalar/gemm_scalar.c, avx2/gemm_avx2.c, avx512/gemm_avx512.c). */
extern const gemm_kernels aie_gemm_kernels_scalar;
#ifdef AIE_HAVE_X86
extern const gemm_kernels aie_gemm_kernels_avx2;
extern const gemm_kernels aie_gemm_kernels_avx512;
#endif

/* The table for an ISA (falls back to scalar for ISAs not compiled in); read
 * from the dispatch table, core/kernel_table.c. */
const gemm_kernels *aie_gemm_kernels_for(aie_isa isa);

/* Packing (core/gemm_pack.c); panels are zero-padded to full MR / NR. */
void aie_gemm_pack_a(int trans_a, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc,
                     int mr, float *dst);
/* Packs columns [j0, j0+nc) of rows [k0, k0+kc) of op(B); micro-panel p starts
 * at dst + p * panel_stride (panel_stride >= kc * nr). */
void aie_gemm_pack_b(int trans_b, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
                     int nr, float *dst, int64_t panel_stride);

/* Implicit A: a routine that writes rows [i0, i0+mc) x columns [k0, k0+kc) of
 * an A that is never stored, in aie_gemm_pack_a's panel layout (MR-row
 * panels, panel[k*mr + r], zero rows past mc up to a whole panel). */
typedef void (*gemm_pack_a_fn)(const void *src, int64_t i0, int64_t mc, int64_t k0, int64_t kc, int mr, float *dst);

/* aie_sgemm_packed with alpha = 1 and A produced by pack_a(src, ...) instead
 * of read from memory: convolution packs its im2col rows straight into the
 * GEMM's A panels (no intermediate tile). Always the blocked path; the
 * workspace is aie_sgemm_packed_workspace_size(M, N, K, nthreads). */
int aie_sgemm_packed_implicit_a(int64_t M, int64_t N, int64_t K, gemm_pack_a_fn pack_a, const void *src,
                                const void *packed_b, float beta, float *C, int64_t ldc, const aie_epilogue *ep,
                                void *workspace, size_t workspace_size, int nthreads);

/* Implicit A of a convolution (NHWC): row m = output pixel (n, p, q), column
 * k = (r, s, c) of group g, the order aie_conv2d_pack_weights packs B in. */
typedef struct {
    const aie_conv2d_params *p;
    int64_t P, Q, g;
    const float *x;
} gemm_im2col_src;
void aie_gemm_pack_a_im2col(const void *src, int64_t i0, int64_t mc, int64_t k0, int64_t kc, int mr, float *dst);

/* Argument checks shared with the bf16/int8 GEMMs: a NULL, or a leading
 * dimension shorter than the stored rows x cols matrix's row; an epilogue
 * with an unknown bias kind or activation. AIE_OK or AIE_EINVAL (recorded). */
int aie_gemm_check_matrix(const char *fn, const char *name, const void *p, int64_t rows, int64_t cols, int64_t ld,
                          int trans);
int aie_gemm_check_epilogue(const char *fn, const aie_epilogue *ep);
/* What every B-packing entry point (fp32, bf16, s8) checks before packing:
 * init, dims, B, the buffer, its alignment, size >= need (size_fn names the
 * size query in the error). AIE_OK, or the recorded error's code. */
int aie_gemm_check_pack_b(const char *fn, const char *size_fn, int trans_b, int64_t K, int64_t N, const void *B,
                          int64_t ldb, const void *packed, size_t packed_size, size_t need);

/* Tiles of an M x N block of C for nt threads (core/gemm.c: the reasoning),
 * multiples of mr rows and nr columns, rows per tile at most mc. */
void aie_gemm_plan_tiles(int64_t M, int64_t N, int64_t mc, int64_t mr, int64_t nr, int nt, int64_t *tile_m,
                         int64_t *tile_n);
/* A caller's workspace laid out as `shared` bytes, then one `slot` per
 * thread, from its first AIE_ALIGN-aligned byte (*base); *nt is lowered to
 * the slots that fit. AIE_ENOMEM (recorded: fn, the sizes, and size_fn, the
 * function that gives the size) when not even one slot fits. */
int aie_workspace_layout(const char *fn, const char *size_fn, void *workspace, size_t workspace_size, size_t shared,
                         size_t slot, int64_t M, int64_t N, int64_t K, char **base, int *nt);


#endif /* AIE_GEMM_INTERNAL_H */
