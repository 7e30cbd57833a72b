/*
 * bf16 / int8 GEMM internals shared by the driver (core/gemm_lowp.c), the
 * dispatch table (core/kernel_table.c) and the per-level micro-kernels
 * (scalar/, avx2/, avx_vnni/, avx512_vnni/, avx512_bf16/, amx/).
 *
 * Layouts (one per dtype, shared by every path, so a B packed at one level
 * runs at any other):
 *  - B: 32-column panels (LOWP_NR), K zero-padded to a whole k-chunk
 *    (LOWP_KCHUNK_BF16 = 32 bf16, LOWP_KCHUNK_S8 = 64 int8: the depth of one
 *    AMX tile row of 64 bytes). Within a panel, k-groups of g = 2 (bf16
 *    pairs) or 4 (int8 quads) are interleaved per column, the VNNI format the
 *    AMX B tiles, vdpbf16ps and vpdpbusd read: element (k, j) of a panel is
 *    at [(k / g) * 32 * g + j * g + k % g]. One k-chunk of a panel is 16
 *    group-rows x 32 columns; its columns 0-15 / 16-31 are one AMX B tile
 *    each (16 rows of 64 bytes, 128 bytes apart). Columns past N are zero.
 *    int8 B is followed by its column sums (int32, one per padded column).
 *  - A (packed per call into the workspace): strips of 16 rows; a strip is
 *    kp / chunk k-chunks of 16 rows x 64 bytes (one AMX A tile each):
 *    element (i, k) of a strip at [(k / chunk) * 16 * chunk + i * chunk +
 *    k % chunk]. Rows past M and k past K are zero.
 * Micro-kernels compute a 32 x 32 block of C (two strips x one panel) over a
 * slice of K into a per-thread accumulator buffer (L2); the driver applies
 * the output stage after the last slice.
 */
#ifndef AIE_GEMM_LOWP_INTERNAL_H
#define AIE_GEMM_LOWP_INTERNAL_H

#include "aie_gemm_lowp.h"
#include "gemm_internal.h"

#define LOWP_NR 32        /* columns per B panel and per micro-tile */
#define LOWP_MR 32        /* rows per micro-tile: two 16-row strips */
#define LOWP_STRIP 16     /* rows of an AMX tile */
#define LOWP_KCHUNK_BF16 32
#define LOWP_KCHUNK_S8 64

/* acc[r * ldacc + j] (+)= sum over the kp k (a whole number of k-chunks) of
 * row r of A times column j of the B panel, for the 32 x 32 block: = when
 * accumulate is 0, += when 1. m (1..32) says which rows matter: m <= 16
 * reads and writes only the first strip's 16 rows; otherwise all 32 are
 * read and written. pa: the first strip at the slice's first k, the second
 * strip_stride elements after it; pb: the panel at that k. */
typedef void (*lowp_bf16_ukernel_fn)(int64_t kp, const aie_bf16 *pa, int64_t strip_stride, const aie_bf16 *pb,
                                     int m, float *acc, int64_t ldacc, int accumulate);
typedef void (*lowp_s8_ukernel_fn)(int64_t kp, const uint8_t *pa, int64_t strip_stride, const int8_t *pb, int m,
                                   int32_t *acc, int64_t ldacc, int accumulate);
/* Per-thread set-up and tear-down around a run of micro-kernels (AMX: tile
 * configuration and release); NULL when there is none. */
typedef void (*lowp_thread_fn)(void);
/* Packs op(B) into the panels after the header (layouts above). */
typedef void (*lowp_pack_b_fn)(int trans_b, int64_t K, int64_t N, const void *B, int64_t ldb, void *panels);

typedef struct {
    const char *name; /* e.g. "amx_bf16_32x32" */
    lowp_pack_b_fn pack_b;
    lowp_bf16_ukernel_fn ukernel;
    lowp_thread_fn begin, end;
} lowp_bf16_kernels;

/* One row of the int8 output stage (core/gemm_s8_store_body.h). */
typedef void (*lowp_s8_row_f32_fn)(const int32_t *acc, const int32_t *colsum, uint32_t a_zero, const float *mult,
                                   int n, float *c);
typedef void (*lowp_s8_row_u8_fn)(const int32_t *acc, const int32_t *colsum, uint32_t a_zero, const int32_t *bias,
                                  const float *mult, int32_t y_zero, int n, uint8_t *c);

typedef struct {
    const char *name;
    lowp_pack_b_fn pack_b;
    lowp_s8_ukernel_fn ukernel;
    lowp_thread_fn begin, end;
    /* the output stage compiled for the level; NULL: the portable one */
    lowp_s8_row_f32_fn row_f32;
    lowp_s8_row_u8_fn row_u8;
} lowp_s8_kernels;

/* Writes rows [i0, i0 + mc) of the int8 GEMM's A (K columns) into 16-row
 * strips (layout above), rows up to the next strip boundary and k in
 * [K, kp) zero: the dense A of aie_gemm_u8s8, or a matrix that exists only
 * implicitly, as the im2col rows of a convolution (core/conv_lowp_s8.c),
 * so they are written once, straight into the layout the micro-kernels read. */
typedef void (*lowp_pack_a_u8_fn)(const void *ctx, int64_t i0, int64_t mc, int64_t K, int64_t kp, uint8_t *dst);
/* aie_gemm_u8s8 with A given by its packer; fn names the caller in errors.
 * Workspace as aie_gemm_u8s8_workspace_size. */
int aie_gemm_u8s8_implicit(const char *fn, int64_t M, int64_t N, int64_t K, lowp_pack_a_u8_fn pack_a,
                           const void *pack_ctx, int32_t a_zero, const void *packed_b, void *C, int64_t ldc,
                           const aie_qepilogue *q, void *workspace, size_t workspace_size, int nthreads);

/* Packing (core/gemm_lowp.c): the same for every path. */
void aie_lowp_pack_b_bf16(int trans_b, int64_t K, int64_t N, const void *B, int64_t ldb, void *panels);
void aie_lowp_pack_b_s8(int trans_b, int64_t K, int64_t N, const void *B, int64_t ldb, void *panels);

/* Micro-kernels per path. */
extern const lowp_bf16_kernels aie_lowp_bf16_portable;
extern const lowp_s8_kernels aie_lowp_s8_scalar;
#ifdef AIE_HAVE_X86
extern const lowp_s8_kernels aie_lowp_s8_avx2;
extern const lowp_s8_kernels aie_lowp_s8_avx_vnni;
extern const lowp_s8_kernels aie_lowp_s8_avx512_vnni;
extern const lowp_bf16_kernels aie_lowp_bf16_avx512_bf16;
extern const lowp_bf16_kernels aie_lowp_bf16_amx;
extern const lowp_s8_kernels aie_lowp_s8_amx;
#endif

/* Tiles of an M x N output for nt threads (core/gemm_lowp.c explains). */
void aie_lowp_plan_tiles(int64_t M, int64_t N, int64_t mc, int nt, int64_t *tile_m, int64_t *tile_n);

/* fp32 -> bf16, round to nearest even; NaN stays a (quiet) NaN. */
static inline aie_bf16 aie_f32_to_bf16(float f) {
    uint32_t u;
    __builtin_memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (aie_bf16)((u >> 16) | 0x40u);
    return (aie_bf16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float aie_bf16_to_f32(aie_bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}

#endif /* AIE_GEMM_LOWP_INTERNAL_H */
