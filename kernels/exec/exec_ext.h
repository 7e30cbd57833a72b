/*
 * Executor opcodes from 200 up: ops added after the core set (indexing,
 * sorting, bitwise, cumulative). exec.c hands every opcode >= AIE_X_EXT_FIRST
 * to aie_exec_ext_fn, which returns the op's function (NULL when unknown).
 * Same conventions as aie_exec.h: t[] tensors, ip[] int params, shapes and
 * strides in elements, dtype codes from onnx.TensorProto.
 */
#ifndef AIE_EXEC_EXT_H
#define AIE_EXEC_EXT_H

#include "exec_ops.h"

enum {
    AIE_X_EXT_FIRST = 200,
    /* t: out, a, b. ip: dtype (integer), direction (0 left, 1 right), rank,
     * shape[r], out_strides[r], a_strides[r], b_strides[r]. A count outside
     * [0, bits) gives 0 (-1 for negative values shifted right). */
    AIE_X_BITSHIFT = 200,
    /* t: out, in. ip: dtype, outer, n, inner, exclusive, reverse. */
    AIE_X_CUMPROD = 201,
    /* t: values, indices (int64), x, workspace (n int64). ip: dtype, outer, n,
     * inner, k, largest. Sorted; equal values keep the lower index first. */
    AIE_X_TOPK = 202,
    /* t: out (holding a copy of data), indices, updates. ip: esize, dtype,
     * reduction (AIE_SR_*), rank, idx_shape[r], data_shape[r], axis, idx dtype.
     * ScatterElements. */
    AIE_X_SCATTER_ELEMENTS = 203,
    /* t: out (holding a copy of data), indices (int64), updates. ip: esize,
     * dtype, reduction, n_tuples, k, rank, data_shape[r]. ScatterND. */
    AIE_X_SCATTER_ND = 204,
    /* t: out, data, indices (int64). ip: esize, n_batch, tuples_per_batch, k,
     * batch_stride (elements), slice (elements), dims[k]. GatherND. */
    AIE_X_GATHER_ND = 205,
    /* t: y [N, C, OH, OW], x [N, C, H, W], grid [N, OH, OW, 2]. ip: N, C, H,
     * W, OH, OW, mode (0 nearest, 1 linear, 2 cubic), padding (0 zeros,
     * 1 border, 2 reflection), align_corners. float32. */
    AIE_X_GRID_SAMPLE = 206,
    /* t: y, x, scale. ip: rows, cols. fp: eps. y = x / sqrt(mean(x^2) + eps) * scale. */
    AIE_X_RMS_NORM = 207,
    /* Fused attention: see attention_fused.c. */
    AIE_X_ATTENTION = 208,
    AIE_X_EXT_END
};

/* Scatter reductions. */
enum { AIE_SR_NONE = 0, AIE_SR_ADD, AIE_SR_MUL, AIE_SR_MAX, AIE_SR_MIN };

int aie_x_bitshift(const aie_step_args *a);
int aie_x_cumprod(const aie_step_args *a);
int aie_x_topk(const aie_step_args *a);
int aie_x_scatter_elements(const aie_step_args *a);
int aie_x_scatter_nd(const aie_step_args *a);
int aie_x_gather_nd(const aie_step_args *a);
int aie_x_grid_sample(const aie_step_args *a);
int aie_x_rms_norm(const aie_step_args *a);
int aie_x_attention(const aie_step_args *a);
size_t aie_attention_workspace(int64_t tile, int64_t L, int64_t dk, int64_t dv, int64_t workers);

/* The function of an extension opcode, or NULL. */
aie_exec_fn aie_exec_ext_fn(int64_t op);

/* Name of an extension opcode (errors, profiles); "?" when unknown. */
const char *aie_exec_ext_name(int64_t op);

#endif
