/* Dispatch for the extension opcodes (exec_ext.h): one table, like exec.c's. */
#include "exec_ext.h"

#define EXT_COUNT (AIE_X_EXT_END - AIE_X_EXT_FIRST)

static const aie_exec_fn k_ext_fns[EXT_COUNT] = {
    [AIE_X_BITSHIFT - AIE_X_EXT_FIRST] = aie_x_bitshift,
    [AIE_X_CUMPROD - AIE_X_EXT_FIRST] = aie_x_cumprod,
    [AIE_X_TOPK - AIE_X_EXT_FIRST] = aie_x_topk,
    [AIE_X_SCATTER_ELEMENTS - AIE_X_EXT_FIRST] = aie_x_scatter_elements,
    [AIE_X_SCATTER_ND - AIE_X_EXT_FIRST] = aie_x_scatter_nd,
    [AIE_X_GATHER_ND - AIE_X_EXT_FIRST] = aie_x_gather_nd,
    [AIE_X_GRID_SAMPLE - AIE_X_EXT_FIRST] = aie_x_grid_sample,
    [AIE_X_RMS_NORM - AIE_X_EXT_FIRST] = aie_x_rms_norm,
    [AIE_X_ATTENTION - AIE_X_EXT_FIRST] = aie_x_attention,
};

static const char *const k_ext_names[EXT_COUNT] = {
    [AIE_X_BITSHIFT - AIE_X_EXT_FIRST] = "bitshift",
    [AIE_X_CUMPROD - AIE_X_EXT_FIRST] = "cumprod",
    [AIE_X_TOPK - AIE_X_EXT_FIRST] = "topk",
    [AIE_X_SCATTER_ELEMENTS - AIE_X_EXT_FIRST] = "scatter_elements",
    [AIE_X_SCATTER_ND - AIE_X_EXT_FIRST] = "scatter_nd",
    [AIE_X_GATHER_ND - AIE_X_EXT_FIRST] = "gather_nd",
    [AIE_X_GRID_SAMPLE - AIE_X_EXT_FIRST] = "grid_sample",
    [AIE_X_RMS_NORM - AIE_X_EXT_FIRST] = "rms_norm",
    [AIE_X_ATTENTION - AIE_X_EXT_FIRST] = "attention",
};

aie_exec_fn aie_exec_ext_fn(int64_t op) {
    if (op < AIE_X_EXT_FIRST || op >= AIE_X_EXT_END) return NULL;
    return k_ext_fns[op - AIE_X_EXT_FIRST];
}

const char *aie_exec_ext_name(int64_t op) {
    if (op < AIE_X_EXT_FIRST || op >= AIE_X_EXT_END || !k_ext_names[op - AIE_X_EXT_FIRST]) return "?";
    return k_ext_names[op - AIE_X_EXT_FIRST];
}
