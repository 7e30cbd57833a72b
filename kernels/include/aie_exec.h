/*
 * Plan executor: runs a whole model inference in one call.
 *
 * A plan is data built by the Python converter (engine/plan.py): a flat list
 * of steps, each an opcode plus a slice of a tensor table and of two
 * parameter pools. The executor owns nothing and allocates nothing: every
 * tensor lives in the caller's arena block (offsets fixed at plan time), in a
 * read-only constant blob (weights, plan constants), or in a caller's input
 * or output buffer. One aie_exec_run call walks the steps in order and
 * dispatches each through one switch (kernels/exec/exec.c), so the Python
 * side pays one foreign call per inference and the GIL is released for all
 * of it (ctypes).
 *
 * Layouts: every step's parameters are documented under its opcode below;
 * shapes and strides are in elements, tensors row-major. Dtype codes are
 * ONNX TensorProto codes so the converter passes them through unchanged.
 *
 * Re-entrancy: a plan is read-only during a run; two threads may run the
 * same plan at once with two different arenas.
 */
#ifndef AIE_EXEC_H
#define AIE_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "aie_ops.h" /* AIE_DT_*, AIE_X_*, AIE_U_*, AIE_B_*, AIE_R_*, step structs */

#ifdef __cplusplus
extern "C" {
#endif

/* Opcodes: AIE_X_<NAME>, numbered in aie_ops.def. t[] = the step's tensors,
 * ip[] = int64 params, fp[] = double params. Every step reads ip through its
 * aie_<name>_step struct (aie_ops.def documents the fields and how
 * rank-sized arrays follow the struct).
 *   COPY      t: out, in. ip: aie_copy_step. Both sides strided (0
 *             broadcasts on the input side): Transpose, Slice, Expand, Tile,
 *             Concat/Split pieces.
 *   FILL      t: out. ip: aie_fill_step.
 *   UNARY     t: out, in. ip: aie_unary_step. fp: alpha, beta.
 *   BINARY    t: out, a, b. ip: aie_binary_step. out is contiguous with
 *             `shape`; comparisons write bool (uint8).
 *   CAST      t: out, in. ip: aie_cast_step.
 *   WHERE     t: out, cond, x, y. ip: aie_where_step.
 *   GATHER    t: out, data, indices. ip: aie_gather_step. Negative indices
 *             count from the end; out of range is an error.
 *   REDUCE    t: out, in. ip: aie_reduce_step. out holds the kept dims in
 *             order.
 *   SOFTMAX   t: out, in. ip: aie_softmax_step. float32.
 *   MATMUL    Batched C = alpha * op(A) op(B) + beta * C, epilogue bias +
 *             activation. t: out, a, b, bias (or NONE), workspace (or NONE).
 *             ip: aie_matmul_step. fp: alpha, beta, p0, p1. Batch strides are
 *             in elements; out batches are contiguous M*N blocks.
 *   CONV      2-D convolution, NHWC (aie_conv2d). t: y, x, packed weights,
 *             bias (or NONE), residual (or NONE; may be y), workspace (or
 *             NONE). ip: aie_conv_step. fp: p0, p1.
 *   CONV_DW_PW [a 1x1 expand conv,] a depthwise conv and the 1x1 project
 *             conv on its output (aie_conv2d_dw_pw). t: y, x, depthwise
 *             packed weights, depthwise bias (or NONE), project packed
 *             weights, project bias (or NONE), residual (or NONE; not y),
 *             workspace, expand packed weights (or NONE: no expand conv),
 *             expand bias (or NONE). ip: aie_conv_dw_pw_step. fp: dw p0,
 *             p1, pw p0, p1, ex p0, p1.
 *   POOL      2-D pooling, NHWC (aie_pool2d). t: y, x. ip: aie_pool_step.
 *   LAYERNORM t: out, x, scale (or NONE), bias (or NONE). ip: aie_norm_step.
 *             fp: epsilon.
 *   JUMP_IF_NOT t: cond (bool, one element). ip: aie_jump_step. Jumps when
 *             cond is false.
 *   JUMP      ip: aie_jump_step.
 *   PAD       t: out, in. ip: aie_pad_step.
 *   RESIZE    t: out, x. ip: aie_resize_step: mode (0 nearest, 1 linear),
 *             coord (0 half_pixel, 1 asymmetric, 2 align_corners,
 *             3 pytorch_half_pixel, 4 tf_half_pixel_for_nearest), nearest
 *             (0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil),
 *             channels (> 0: NHWC with that many channels, outer = N; 0: NCHW,
 *             outer = N*C). fp: scale_h, scale_w, resized length h, w (in *
 *             scale when scales were given, else the size). float32.
 *   RNN       One direction of an ONNX RNN, GRU or LSTM over the whole
 *             sequence (kernels/exec/recurrent.c). t: y (or NONE) strided by
 *             ip, x strided by ip, w [G*H, I], r [G*H, H], bias [2*G*H] (or
 *             NONE), h state in/out, c state in/out (LSTM), peepholes [3H]
 *             (or NONE), sequence_lens int32 [B] (or NONE), scratch of
 *             aie_rnn_scratch_bytes, GEMM workspace, GRU's packed Rh (ip
 *             packed: w, r are aie_sgemm_pack_b blobs). ip: aie_rnn_step.
 *   COPY_AT   t: dst, src, index (int64, one element). ip: aie_copy_at_step.
 *             dst [outer, n, inner] row `index` <- src [outer, inner]: a
 *             Scan output's iteration slice (kernels/exec/recurrent.c).
 *   ARGMAX    t: out (int64), in. ip: aie_axis_step (select_last, is_min).
 *   GATHER_ELEMENTS t: out, data, indices (int64/int32).
 *             ip: aie_gather_elements_step.
 *   CUMSUM    t: out, in. ip: aie_axis_step (exclusive, reverse).
 *   CONV_TRANSPOSE 2-D transposed convolution, NHWC (aie_conv_transpose2d).
 *             t: y, x, packed weights, bias (or NONE), workspace.
 *             ip: aie_conv_step. fp: p0, p1.
 *   CONV_PACK Pack weights computed at run time. t: packed (out), w.
 *             ip: aie_conv_pack_step.
 *   GLOBAL_POOL t: y [N, C], x [N, HW, C]. ip: aie_global_pool_step.
 *   GEMM_PACKED C = alpha op(A) B + beta C, B pre-packed (aie_sgemm_pack_b),
 *             epilogue. t: out [M, N], a, packed b, bias (or NONE), workspace
 *             (or NONE). ip: aie_gemm_packed_step. fp: alpha, beta, p0, p1.
 *   BITSHIFT  t: out, a, b. ip: aie_bitshift_step. A count outside
 *             [0, bits) gives 0 (-1 for negative values shifted right).
 *   CUMPROD   t: out, in. ip: aie_axis_step (exclusive, reverse).
 *   TOPK      t: values, indices (int64), x, workspace (n int64).
 *             ip: aie_axis_step (k, largest). Sorted; equal values keep the
 *             lower index first.
 *   NONZERO   t: y (int64, room for [rank, numel]), count (int64 [1]), x.
 *             ip: aie_nonzero_step. y holds [rank, count] packed.
 *   COMPRESS  t: y (room for [outer, n, inner]), count, x, condition (bool
 *             [m]). ip: aie_compress_step. y holds [outer, count, inner].
 *   UNIQUE    t: y, indices, inverse, counts (int64), count, x, workspace
 *             (4n int64). ip: aie_unique_step. y holds [outer, count, inner].
 *   NMS       t: selected (int64, room for [batches*classes*boxes, 3]),
 *             count, boxes, scores, max_output (int64 [1] or NONE), iou
 *             threshold (f32 [1] or NONE), score threshold (or NONE),
 *             workspace (2 boxes int64). ip: aie_nms_step. onnxruntime's
 *             order and float IoU.
 *   SCATTER_ELEMENTS t: out (holding a copy of data), indices, updates.
 *             ip: aie_scatter_elements_step.
 *   SCATTER_ND t: out (holding a copy of data), indices (int64), updates.
 *             ip: aie_scatter_nd_step.
 *   GATHER_ND t: out, data, indices (int64). ip: aie_gather_nd_step.
 *   GRID_SAMPLE t: y [N, C, OH, OW], x [N, C, H, W], grid [N, OH, OW, 2].
 *             ip: aie_grid_sample_step. float32.
 *   RMS_NORM  t: y, x, scale. ip: aie_norm_step. fp: eps. y = x / sqrt(mean(x^2)
 *             + eps) * scale.
 *   ATTENTION Fused attention (kernels/exec/attention_fused.c). t: y, q, kt,
 *             v, mask (or NONE), workspace. ip: aie_attention_step. fp: alpha.
 */

/* A plan is an aie_exec_plan of aie_step_record and aie_tensor_record rows
 * (aie_ops.def). A step record's `threads` caps the step's threads (0: the
 * run's count): the converter sets 1 on steps too small to repay a pool
 * wake-up, so a run on 2 threads is never slower than on 1 for them. */

/* Run every step. Returns AIE_OK or a negative aie_status; aie_last_error()
 * names the failing step and opcode. nthreads as everywhere (<= 0: pool). */
int aie_exec_run(const aie_exec_plan *plan, void *arena, const void *const *blobs,
                 const void *const *inputs, void *const *outputs, int nthreads);

/* Plan runner: a thread of its own that runs one submitted plan at a time
 * and then writes the 8-byte value 1 to notify_fd (an eventfd, or a pipe's
 * write end), so an event loop can wait for inferences without a thread of
 * its own blocked in a call (the server's instances: no GIL hand-off per
 * inference). The caller keeps every pointer passed to submit (the plan's
 * tables, arena, blobs, input/output pointer arrays and buffers) alive and
 * untouched until collect says the run finished.
 *   submit:  AIE_OK, or AIE_EINVAL while the previous run is not collected;
 *   collect: AIE_EINVAL while nothing finished, else the run's status, with
 *            the run's aie_last_error() text copied into msg (cap bytes);
 *   free:    waits for a run in progress, then stops the thread. */
typedef struct aie_exec_runner aie_exec_runner;
aie_exec_runner *aie_exec_runner_new(int notify_fd);
int aie_exec_runner_submit(aie_exec_runner *r, const aie_exec_plan *plan, void *arena, const void *const *blobs,
                           const void *const *inputs, void *const *outputs, int nthreads);
int aie_exec_runner_collect(aie_exec_runner *r, char *msg, size_t cap);
void aie_exec_runner_free(aie_exec_runner *r);

/* Bytes of the RNN step's scratch operand (packed weights, a chunk's
 * input rows and projections, one step's gates): independent of S. */
size_t aie_rnn_scratch_bytes(int64_t cell, int64_t B, int64_t I, int64_t H, int64_t chunk, int64_t lbr,
                             int64_t packed);

/* Name of an opcode (for errors and profiles); "?" when unknown. */
const char *aie_exec_op_name(int64_t op);

#ifdef __cplusplus
}
#endif
#endif /* AIE_EXEC_H */
