/*
 * bf16 and int8 GEMM micro-kernels for AMX: amx_bf16_32x32 and amx_s8_32x32
 * (contract and layouts in core/gemm_lowp_internal.h).
 *
 * Tiles (palette 1, every tile 16 rows x 64 bytes): 0-3 the 2 x 2 fp32 /
 * int32 C tiles of a 32 x 32 block, 4-5 the two A strips' current k-chunk
 * (16 rows x 32 bf16 or 64 u8, contiguous: stride 64), 6-7 the B panel's
 * column halves at that k-chunk (16 k-pair / k-quad rows, 128 bytes apart).
 * Per k-chunk 4 tile loads feed 4 tdpbf16ps / tdpbusd. The configuration is
 * loaded once per task (begin) and released after it (end): a worker that
 * leaves its tiles configured would make the kernel save 8 KiB more state
 * at every context switch. Called only at level amx (the kernel granted the
 * tile data state, core/cpu.c).
 */
#include <immintrin.h>
#include <string.h>

#include "gemm_lowp_internal.h"
#include "gemm_s8_store_body.h"

typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tilecfg;
_Static_assert(sizeof(amx_tilecfg) == 64, "LDTILECFG reads 64 bytes");

static void amx_begin(void) {
    _Alignas(64) amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = LOWP_STRIP;
    }
    /* Not gcc 12's _tile_loadconfig: its asm names only a pointer-sized
     * memory input, so the stores above were dropped as dead. */
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

static void amx_end(void) { _tile_release(); }

/* One block for both dtypes: esize is 2 (bf16) or 1 (u8 x s8), a constant
 * once inlined, so the dtype branches fold away. In bytes, a k-chunk starts
 * kc * 32 * esize into a B panel and kc * 16 * esize into an A strip, and a
 * B tile's rows (k-pairs or k-quads) are 128 bytes apart for both. Rows >= 16
 * need the second strip; m <= 16 runs half the tiles. */
#define B_ROW_BYTES (LOWP_NR * 4)
static inline __attribute__((always_inline)) void amx_block(const int esize, int64_t kp, const char *pa,
                                                            size_t strip_bytes, const char *pb, int m, char *acc,
                                                            int64_t ld_bytes, int accumulate) {
    const int64_t kchunk = esize == 2 ? LOWP_KCHUNK_BF16 : LOWP_KCHUNK_S8;
    if (accumulate) {
        _tile_loadd(0, acc, ld_bytes);
        _tile_loadd(1, acc + 64, ld_bytes);
    } else {
        _tile_zero(0);
        _tile_zero(1);
    }
    if (m > LOWP_STRIP) {
        if (accumulate) {
            _tile_loadd(2, acc + LOWP_STRIP * ld_bytes, ld_bytes);
            _tile_loadd(3, acc + LOWP_STRIP * ld_bytes + 64, ld_bytes);
        } else {
            _tile_zero(2);
            _tile_zero(3);
        }
        for (int64_t kc = 0; kc < kp; kc += kchunk) {
            const char *bc = pb + kc * LOWP_NR * esize, *ac = pa + kc * LOWP_STRIP * esize;
            _tile_loadd(6, bc, B_ROW_BYTES);
            _tile_loadd(7, bc + 64, B_ROW_BYTES);
            _tile_loadd(4, ac, 64);
            _tile_loadd(5, ac + strip_bytes, 64);
            if (esize == 2) {
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            } else {
                _tile_dpbusd(0, 4, 6);
                _tile_dpbusd(1, 4, 7);
                _tile_dpbusd(2, 5, 6);
                _tile_dpbusd(3, 5, 7);
            }
        }
        _tile_stored(2, acc + LOWP_STRIP * ld_bytes, ld_bytes);
        _tile_stored(3, acc + LOWP_STRIP * ld_bytes + 64, ld_bytes);
    } else {
        for (int64_t kc = 0; kc < kp; kc += kchunk) {
            const char *bc = pb + kc * LOWP_NR * esize;
            _tile_loadd(6, bc, B_ROW_BYTES);
            _tile_loadd(7, bc + 64, B_ROW_BYTES);
            _tile_loadd(4, pa + kc * LOWP_STRIP * esize, 64);
            if (esize == 2) {
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
            } else {
                _tile_dpbusd(0, 4, 6);
                _tile_dpbusd(1, 4, 7);
            }
        }
    }
    _tile_stored(0, acc, ld_bytes);
    _tile_stored(1, acc + 64, ld_bytes);
}

static void ukernel_amx_bf16_32x32(int64_t kp, const aie_bf16 *pa, int64_t strip_stride, const aie_bf16 *pb, int m,
                                   float *acc, int64_t ldacc, int accumulate) {
    amx_block(2, kp, (const char *)pa, (size_t)strip_stride * 2, (const char *)pb, m, (char *)acc, ldacc * 4,
              accumulate);
}

static void ukernel_amx_s8_32x32(int64_t kp, const uint8_t *pa, int64_t strip_stride, const int8_t *pb, int m,
                                 int32_t *acc, int64_t ldacc, int accumulate) {
    amx_block(1, kp, (const char *)pa, (size_t)strip_stride, (const char *)pb, m, (char *)acc, ldacc * 4,
              accumulate);
}

const lowp_bf16_kernels aie_lowp_bf16_amx = {
    .name = "amx_bf16_32x32",
    .pack_b = aie_lowp_pack_b_bf16,
    .ukernel = ukernel_amx_bf16_32x32,
    .begin = amx_begin,
    .end = amx_end,
};

const lowp_s8_kernels aie_lowp_s8_amx = {
    .name = "amx_s8_32x32",
    .pack_b = aie_lowp_pack_b_s8,
    .ukernel = ukernel_amx_s8_32x32,
    .row_f32 = s8_row_f32,
    .row_u8 = s8_row_u8,
    .begin = amx_begin,
    .end = amx_end,
};
