/* Internal: the header of a packed convolution weight blob and the params
 * check shared by conv2d and conv_transpose2d (not installed).
 *
 * Blob = header (64 bytes) + body. Everything is offsets and sizes, never
 * pointers, so the blob can be stored in a model file and mapped anywhere.
 * The ISA is recorded because the GEMM's packed-B layout depends on it. */
#ifndef AIE_CONV_PACK_H
#define AIE_CONV_PACK_H

#include "aie_internal.h"

#define AIE_CONV_PACK_MAGIC 0x43454941u /* "AIEC" little-endian */
#define AIE_CONV_PACK_VERSION 1u

typedef enum {
    AIE_CONV_PACK_GEMM = 1,      /* per group: aie_sgemm_pack_b of (R*S*C/g) x (K/g) */
    AIE_CONV_PACK_DEPTHWISE = 2, /* R*S x C floats */
    AIE_CONV_PACK_TRANSPOSE = 3, /* per group: aie_sgemm_pack_b of (C/g) x (R*S*K/g) */
    AIE_CONV_PACK_WINOGRAD = 4,  /* 16 x aie_sgemm_pack_b of C x K (transformed 3x3 weights), group_bytes apart */
    AIE_CONV_PACK_BF16 = 5,      /* aie_gemm_bf16_pack_b of (R*S*C) x K: the same on every ISA (aie_conv_lowp.h) */
} aie_conv_pack_kind;

typedef struct {
    uint32_t magic, version, isa, kind;
    int64_t C, K, R, S, groups;
    uint64_t group_bytes; /* stride between the groups' bodies (Winograd: the 16 matrices') */
} aie_conv_pack_header;

_Static_assert(sizeof(aie_conv_pack_header) == 64, "the packed body starts 64-byte aligned");

int aie_conv_check_params(const aie_conv2d_params *p, const char *op);
void aie_conv_pack_header_fill(aie_conv_pack_header *h, const aie_conv2d_params *p, int kind);
int aie_conv_pack_header_check(const aie_conv_pack_header *h, const aie_conv2d_params *p, int kind, const char *op);
/* The argument checks aie_conv2d and aie_conv_transpose2d share once the
 * shape is valid: buffers present, ep->bias unused, the blob made for these
 * params (and ISA). Fills *e with ep's activation and no bias. */
int aie_conv_check_call(const aie_conv2d_params *p, const float *x, const void *packed_w, const float *y,
                        const aie_epilogue *ep, int kind, const char *op, aie_epilogue *e);

#endif
