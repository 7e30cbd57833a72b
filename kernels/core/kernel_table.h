/*
 * THE dispatch table: which kernel every op runs at a level. One entry per
 * level (core/kernel_table.c), chosen once at start-up from the CPU features
 * (aie_init: CPUID, XGETBV, AIE_ISA); the drivers read the selected row
 * through aie_kernels() and nothing else looks at the level to pick code.
 */
#ifndef AIE_KERNEL_TABLE_H
#define AIE_KERNEL_TABLE_H

#include "conv_kernels.h"
#include "conv_s8_depthwise.h"
#include "conv_lowp_internal.h"
#include "gemm_lowp_internal.h"
#include "qlinear_u8_kernels.h"
#include "vmath.h"

typedef struct {
    aie_level level;
    const gemm_kernels *sgemm; /* fp32: the level's vector ISA */
    const lowp_bf16_kernels *bf16;
    const lowp_s8_kernels *s8;
    aie_bf16_cvt_fn bf16_cvt; /* fp32 -> bf16 runs: the bf16 conv's A packing */
    const aie_conv_direct_kernel *conv_direct; /* direct conv tiles (and Winograd's products) */
    const aie_winograd_kernel *winograd;       /* Winograd tile transforms */
    aie_dwconv_fn *dwconv;
    aie_dwconv_span_fn *dwconv_span; /* one row's pixel run into a buffer (conv_dw_pw.c) */
    aie_dwconv_s8_fn *dwconv_s8; /* int8 depthwise rows (exact int32: any ISA gives the same) */
    aie_pool_fn *pool;
    aie_gpool_fn *gpool;
    const aie_vm_table *vm; /* elementwise, reduction and normalisation loops */
    const aie_q8_kernels *q8; /* the uint8 QMATMUL_U8 / QADD_U8 steps' loops (same bytes on every level) */
} aie_kernel_table_entry;

/* The entry of a level. */
const aie_kernel_table_entry *aie_kernel_table(aie_level level);
/* The entry of the selected level. */
const aie_kernel_table_entry *aie_kernels(void);

#endif /* AIE_KERNEL_TABLE_H */
