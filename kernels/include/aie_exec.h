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
 * Layouts: every step's parameters are documented next to its opcode below;
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

#ifdef __cplusplus
extern "C" {
#endif

/* Dtype codes (onnx.TensorProto.DataType). */
enum {
    AIE_DT_F32 = 1, AIE_DT_U8 = 2, AIE_DT_I8 = 3, AIE_DT_U16 = 4, AIE_DT_I16 = 5,
    AIE_DT_I32 = 6, AIE_DT_I64 = 7, AIE_DT_BOOL = 9, AIE_DT_F16 = 10,
    AIE_DT_F64 = 11, AIE_DT_U32 = 12, AIE_DT_U64 = 13
};

/* Where a tensor lives: the base pointer is chosen by kind and index, then
 * `offset` bytes are added. */
enum {
    AIE_LOC_NONE = 0,   /* absent optional operand: the kernel gets NULL */
    AIE_LOC_ARENA = 1,  /* the run's arena block (index unused) */
    AIE_LOC_BLOB = 2,   /* blobs[index]: read-only constants */
    AIE_LOC_INPUT = 3,  /* inputs[index] */
    AIE_LOC_OUTPUT = 4  /* outputs[index] */
};

/* Opcodes. t[] = the step's tensors, ip[] = int params, fp[] = double params. */
enum {
    /* t: out, in. ip: esize, rank, shape[rank], out_strides[rank],
     * in_strides[rank]. Both sides strided (0 broadcasts on the input side):
     * Transpose, Slice, Expand, Tile, Concat/Split pieces, Identity. */
    AIE_X_COPY = 1,
    /* t: out. ip: esize, n, value bits (the first esize bytes of ip[2]). */
    AIE_X_FILL = 2,
    /* t: out, in. ip: op (AIE_U_*), dtype, n. fp: alpha, beta. */
    AIE_X_UNARY = 3,
    /* t: out, a, b. ip: op (AIE_B_*), dtype of a/b, rank, shape[r], sa[r], sb[r].
     * out is contiguous with `shape`; comparisons write bool (uint8). */
    AIE_X_BINARY = 4,
    /* t: out, in. ip: to dtype, from dtype, n. */
    AIE_X_CAST = 5,
    /* t: out, cond, x, y. ip: esize, rank, shape[r], sc[r], sx[r], sy[r]. */
    AIE_X_WHERE = 6,
    /* t: out, data, indices. ip: esize, outer, axis_dim, inner, nidx, idx dtype.
     * Negative indices count from the end; out of range is an error. */
    AIE_X_GATHER = 7,
    /* t: out, in. ip: op (AIE_R_*), dtype, rank, shape[r], reduced[r] (0/1).
     * out holds the kept dims in order. */
    AIE_X_REDUCE = 8,
    /* t: out, in. ip: outer, n, inner, log (0/1). float32. */
    AIE_X_SOFTMAX = 9,
    /* Batched C = alpha * op(A) op(B) + beta * C, epilogue bias + activation.
     * t: out, a, b, bias (or NONE). ip: M, N, K, trans_a, trans_b, lda, ldb,
     * bias_kind, act, batch_rank, bshape[br], a_bstride[br], b_bstride[br].
     * fp: alpha, beta, p0, p1. Batch strides are in elements; out batches are
     * contiguous M*N blocks. */
    AIE_X_MATMUL = 10,
    /* 2-D convolution, NHWC (aie_conv2d). t: y, x, packed weights, bias (or
     * NONE), residual (or NONE; may be y), workspace (or NONE).
     * ip: the 18 fields of aie_conv2d_params in struct order, act, workspace
     * bytes. fp: p0, p1 (activation parameters). */
    AIE_X_CONV = 11,
    /* 2-D pooling, NHWC (aie_pool2d). t: y, x. ip: kind (aie_pool_kind), N, H,
     * W, C, kh, kw, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left,
     * pad_bottom, pad_right, ceil_mode, count_include_pad. */
    AIE_X_POOL = 12,
    /* t: out, x, scale (or NONE), bias (or NONE). ip: rows, n. fp: epsilon. */
    AIE_X_LAYERNORM = 13,
    /* t: cond (bool, one element). ip: target step. Jumps when cond is false. */
    AIE_X_JUMP_IF_NOT = 14,
    /* ip: target step. */
    AIE_X_JUMP = 15,
    /* t: out, in. ip: esize, rank, in_shape[r], out_shape[r], pad_begin[r], mode
     * (0 constant, 1 reflect, 2 edge), value bits. */
    AIE_X_PAD = 16,
    /* t: out, x. ip: outer, ih, iw, oh, ow, mode (0 nearest, 1 linear),
     * coord (0 half_pixel, 1 asymmetric, 2 align_corners, 3 pytorch_half_pixel,
     * 4 tf_half_pixel_for_nearest), nearest (0 round_prefer_floor,
     * 1 round_prefer_ceil, 2 floor, 3 ceil), channels (> 0: NHWC with that
     * many channels, outer = N; 0: NCHW, outer = N*C). fp: scale_h, scale_w,
     * resized length h, w (in * scale when scales were given, else the size).
     * float32. */
    AIE_X_RESIZE = 17,
    /* One LSTM direction over the whole sequence (ONNX gate order i, o, f, c).
     * t: y (or NONE) [S, B, H] strided by ip y_stride, x [S, B, I], w [4H, I],
     * r [4H, H], bias [8H] (or NONE), h [B, H] state in/out, c [B, H] state
     * in/out, gates workspace [B, 4H].
     * ip: S, B, I, H, reverse, y_step_stride, y_batch_stride. */
    AIE_X_LSTM = 18,
    /* t: out (int64), in. ip: dtype, outer, n, inner, select_last, is_min. */
    AIE_X_ARGMAX = 19,
    /* t: out, data, indices (int64/int32). ip: esize, rank, shape_out[r],
     * data_shape[r], axis, idx dtype. GatherElements. */
    AIE_X_GATHER_ELEMENTS = 20,
    /* t: out, in. ip: dtype, outer, n, inner, exclusive, reverse. */
    AIE_X_CUMSUM = 21,
    /* 2-D transposed convolution, NHWC (aie_conv_transpose2d). t: y, x, packed
     * weights, bias (or NONE), workspace. ip: aie_conv2d_params (18), act,
     * workspace bytes. fp: p0, p1. */
    AIE_X_CONV_TRANSPOSE = 22,
    /* Pack weights computed at run time. t: packed (out), w. ip:
     * aie_conv2d_params (18), transposed (0 Conv OIHW, 1 ConvTranspose CKRS),
     * packed bytes. */
    AIE_X_CONV_PACK = 23,
    /* t: y [N, C], x [N, HW, C]. ip: kind (aie_pool_kind), N, HW, C. */
    AIE_X_GLOBAL_POOL = 24,
    /* C = alpha op(A) B + beta C, B pre-packed (aie_sgemm_pack_b), epilogue.
     * t: out [M, N], a, packed b, bias (or NONE), workspace (or NONE).
     * ip: M, N, K, trans_a, lda, bias_kind, act, workspace bytes.
     * fp: alpha, beta, p0, p1. */
    AIE_X_GEMM_PACKED = 25,
    AIE_X_COUNT
};

/* Unary ops (AIE_X_UNARY). Float ops are float32/float64; NEG/ABS/SIGN also
 * integers; NOT is bool. */
enum {
    AIE_U_IDENTITY = 0, AIE_U_RELU, AIE_U_SIGMOID, AIE_U_TANH, AIE_U_EXP, AIE_U_LOG,
    AIE_U_SQRT, AIE_U_RECIPROCAL, AIE_U_NEG, AIE_U_ABS, AIE_U_ERF, AIE_U_CEIL, AIE_U_FLOOR,
    AIE_U_ROUND, AIE_U_SIN, AIE_U_COS, AIE_U_TAN, AIE_U_ASIN, AIE_U_ACOS, AIE_U_ATAN,
    AIE_U_SINH, AIE_U_COSH, AIE_U_ASINH, AIE_U_ACOSH, AIE_U_ATANH, AIE_U_SIGN, AIE_U_NOT,
    AIE_U_CLIP,        /* alpha = lo, beta = hi */
    AIE_U_LEAKY_RELU,  /* alpha = slope */
    AIE_U_ELU,         /* alpha */
    AIE_U_SELU,        /* alpha, beta = gamma */
    AIE_U_HARDSIGMOID, /* alpha, beta */
    AIE_U_HARDSWISH, AIE_U_SOFTPLUS, AIE_U_SOFTSIGN, AIE_U_GELU, AIE_U_GELU_TANH,
    AIE_U_CELU,        /* alpha */
    AIE_U_THRESHOLDED_RELU, /* alpha */
    AIE_U_MISH, AIE_U_ISNAN, AIE_U_ISINF_POS, AIE_U_ISINF_NEG, AIE_U_ISINF,
    AIE_U_SILU,
    AIE_U_COUNT
};

/* Binary ops (AIE_X_BINARY). */
enum {
    AIE_B_ADD = 0, AIE_B_SUB, AIE_B_MUL, AIE_B_DIV, AIE_B_POW, AIE_B_MAX, AIE_B_MIN,
    AIE_B_MOD, AIE_B_FMOD, AIE_B_PRELU,
    AIE_B_EQUAL, AIE_B_LESS, AIE_B_LESS_EQUAL, AIE_B_GREATER, AIE_B_GREATER_EQUAL,
    AIE_B_AND, AIE_B_OR, AIE_B_XOR, AIE_B_BITAND, AIE_B_BITOR, AIE_B_BITXOR,
    AIE_B_COUNT
};

/* Reductions (AIE_X_REDUCE). float32 all; int32/int64 SUM/MAX/MIN/PROD. */
enum {
    AIE_R_SUM = 0, AIE_R_MEAN, AIE_R_MAX, AIE_R_MIN, AIE_R_PROD, AIE_R_SUM_SQUARE,
    AIE_R_L1, AIE_R_L2, AIE_R_LOG_SUM, AIE_R_LOG_SUM_EXP, AIE_R_COUNT
};

/* Step record: 8 int64 per step. AIE_STEP_THREADS caps the step's threads
 * (0: the run's count): the converter sets 1 on steps too small to repay a
 * pool wake-up, so a run on 2 threads is never slower than on 1 for them. */
enum {
    AIE_STEP_OP = 0, AIE_STEP_T0, AIE_STEP_NT, AIE_STEP_I0, AIE_STEP_NI, AIE_STEP_F0,
    AIE_STEP_NF, AIE_STEP_THREADS, AIE_STEP_WORDS
};
/* Tensor record: 3 int64 (kind, index, byte offset). */
#define AIE_TENSOR_WORDS 3

typedef struct {
    int64_t n_steps;
    const int64_t *steps;        /* n_steps x AIE_STEP_WORDS */
    int64_t n_tensors;
    const int64_t *tensors;      /* n_tensors x AIE_TENSOR_WORDS */
    const int64_t *step_tensors; /* indices into tensors, -1 = absent */
    const int64_t *iparams;
    const double *fparams;
} aie_exec_plan;

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

/* Name of an opcode (for errors and profiles); "?" when unknown. */
const char *aie_exec_op_name(int64_t op);

#ifdef __cplusplus
}
#endif
#endif /* AIE_EXEC_H */
