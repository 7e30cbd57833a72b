/*
 * The dispatch table: for every level (aie_kernels.h), which fp32, bf16 and
 * int8 GEMM kernels run. aie_init() picks the level once from CPUID/XGETBV
 * (and AIE_ISA); every GEMM reads its kernels from the selected row here and
 * nowhere else decides. A level without a kernel of its own for a dtype
 * names the best one it can run (avx512 has no 512-bit int8 kernel without
 * VNNI: it runs the AVX2 one).
 */
#include "gemm_lowp_internal.h"

#ifdef AIE_HAVE_X86
static const aie_kernel_table_entry table[AIE_LEVEL_COUNT] = {
    [AIE_LEVEL_SCALAR] = {AIE_LEVEL_SCALAR, &aie_gemm_kernels_scalar, &aie_lowp_bf16_portable, &aie_lowp_s8_scalar},
    [AIE_LEVEL_AVX2] = {AIE_LEVEL_AVX2, &aie_gemm_kernels_avx2, &aie_lowp_bf16_portable, &aie_lowp_s8_avx2},
    [AIE_LEVEL_AVX512] = {AIE_LEVEL_AVX512, &aie_gemm_kernels_avx512, &aie_lowp_bf16_portable, &aie_lowp_s8_avx2},
    [AIE_LEVEL_AVX_VNNI] = {AIE_LEVEL_AVX_VNNI, &aie_gemm_kernels_avx2, &aie_lowp_bf16_portable,
                            &aie_lowp_s8_avx_vnni},
    [AIE_LEVEL_AVX512_VNNI] = {AIE_LEVEL_AVX512_VNNI, &aie_gemm_kernels_avx512, &aie_lowp_bf16_portable,
                               &aie_lowp_s8_avx512_vnni},
    [AIE_LEVEL_AVX512_BF16] = {AIE_LEVEL_AVX512_BF16, &aie_gemm_kernels_avx512, &aie_lowp_bf16_avx512_bf16,
                               &aie_lowp_s8_avx512_vnni},
    [AIE_LEVEL_AMX] = {AIE_LEVEL_AMX, &aie_gemm_kernels_avx512, &aie_lowp_bf16_amx, &aie_lowp_s8_amx},
};
#else
#define PORTABLE(l) [l] = {l, &aie_gemm_kernels_scalar, &aie_lowp_bf16_portable, &aie_lowp_s8_scalar}
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

/* The fp32 GEMM's kernels come from the same table (an aie_isa is the level
 * of the same value). */
const gemm_kernels *aie_gemm_kernels_for(aie_isa isa) { return aie_kernel_table((aie_level)isa)->sgemm; }

const char *aie_gemm_bf16_path(void) { return aie_kernel_table(aie_selected_level())->bf16->name; }
const char *aie_gemm_s8_path(void) { return aie_kernel_table(aie_selected_level())->s8->name; }
