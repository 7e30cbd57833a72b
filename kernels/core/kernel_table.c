/*
 * The dispatch table (kernel_table.h): for every level (aie_kernels.h),
 * which fp32 (GEMM, direct conv, Winograd transforms, depthwise, pooling,
 * vmath), bf16/int8 GEMM and uint8 QMATMUL/QADD kernels run. aie_init()
 * picks the level once from CPUID/XGETBV (and AIE_ISA); every driver reads
 * its kernels from the selected row here and nowhere else decides. A level
 * without a kernel of its own for a dtype names the best one it can run
 * (avx512 has no 512-bit int8 kernel without VNNI: it runs the AVX2 one).
 */
#include "kernel_table.h"

/* The fp32 kernels of one vector ISA (scalar, avx2, avx512). */
#define FP32(isa)                                                                                         \
    .sgemm = &aie_gemm_kernels_##isa, .conv_direct = &aie_conv_direct_##isa, .winograd = &aie_winograd_##isa, \
    .dwconv = aie_dwconv_rows_##isa, .dwconv_span = aie_dwconv_span_##isa,                                 \
    .dwconv_s8 = aie_dwconv_s8_rows_##isa, .pool = aie_pool_rows_##isa, .gpool = aie_gpool_##isa, .vm = &aie_vm_##isa, \
    .q8 = &Q8_##isa
#define ROW(l, isa, bf16_k, s8_k)                                                                      \
    [l] = {.level = l, FP32(isa), .bf16 = &aie_lowp_bf16_##bf16_k, .s8 = &aie_lowp_s8_##s8_k,          \
           .bf16_cvt = BF16_CVT_##bf16_k}
/* uint8 QMATMUL/QADD loops by vector ISA: avx512 runs the avx2 ones (every
 * set gives the same bytes; there is no 512-bit copy yet) */
#define Q8_scalar aie_q8_scalar
#define Q8_avx2 aie_q8_avx2
#define Q8_avx512 aie_q8_avx2
/* fp32 -> bf16 conversion by bf16 kernel: AMX hosts have AVX-512 BF16 */
#define BF16_CVT_portable aie_bf16_cvt_portable
#define BF16_CVT_avx512_bf16 aie_bf16_cvt_avx512_bf16
#define BF16_CVT_amx aie_bf16_cvt_avx512_bf16

#ifdef AIE_HAVE_X86
static const aie_kernel_table_entry table[AIE_LEVEL_COUNT] = {
    ROW(AIE_LEVEL_SCALAR, scalar, portable, scalar),
    ROW(AIE_LEVEL_AVX2, avx2, portable, avx2),
    ROW(AIE_LEVEL_AVX512, avx512, portable, avx2),
    ROW(AIE_LEVEL_AVX_VNNI, avx2, portable, avx_vnni),
    ROW(AIE_LEVEL_AVX512_VNNI, avx512, portable, avx512_vnni),
    ROW(AIE_LEVEL_AVX512_BF16, avx512, avx512_bf16, avx512_vnni),
    ROW(AIE_LEVEL_AMX, avx512, amx, amx),
};
#else
#define PORTABLE(l) ROW(l, scalar, portable, scalar)
static const aie_kernel_table_entry table[AIE_LEVEL_COUNT] = {
    PORTABLE(AIE_LEVEL_SCALAR),      PORTABLE(AIE_LEVEL_AVX2),        PORTABLE(AIE_LEVEL_AVX512),
    PORTABLE(AIE_LEVEL_AVX_VNNI),    PORTABLE(AIE_LEVEL_AVX512_VNNI), PORTABLE(AIE_LEVEL_AVX512_BF16),
    PORTABLE(AIE_LEVEL_AMX),
};
#endif

const aie_kernel_table_entry *aie_kernel_table(aie_level level) {
    if (level < 0 || level >= AIE_LEVEL_COUNT) level = AIE_LEVEL_SCALAR;
    return &table[level];
}

/* The one place a kernel choice reads the selected level. */
const aie_kernel_table_entry *aie_kernels(void) { return aie_kernel_table(aie_selected_level()); }

/* The fp32 GEMM kernels of a vector ISA, for sizes that must fit every ISA
 * (an aie_isa is the level of the same value). */
const gemm_kernels *aie_gemm_kernels_for(aie_isa isa) { return aie_kernel_table((aie_level)isa)->sgemm; }
const aie_vm_table *aie_vm(void) { return aie_kernels()->vm; }

const char *aie_gemm_bf16_path(void) { return aie_kernels()->bf16->name; }
const char *aie_gemm_s8_path(void) { return aie_kernels()->s8->name; }
