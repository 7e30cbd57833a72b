/*
 * Elementwise kernels: unary math, binary arithmetic and comparisons with
 * numpy broadcasting, where(), and dtype casts.
 *
 * Tensors are described by an output shape (ndim <= AIE_MAX_DIMS) and, per
 * input, strides in ELEMENTS aligned to the output's dims (right-align the
 * input's shape first, as numpy does). A stride of 0 broadcasts that dim; a
 * 0-dim tensor is ndim == 0. Outputs are contiguous row-major. Any element
 * count (including 0) is valid.
 *
 * Accuracy of the float32 unary math, measured by kernels/tests/test_eltwise.c
 * against double-precision libm on 10^5 random points of each range plus the
 * special values (max error in ulp of the float nearest the exact value; the
 * test asserts the column + ~0.5 margin). One implementation
 * (kernels/core/vmath_fn.h) serves every ISA and the GEMM/conv epilogues:
 * scalar, AVX2 and AVX-512 give the same bits, and a fused activation the
 * bits of the standalone op.
 *   function      range            measured (every ISA)
 *   exp           [-104, 89]       1.01
 *   log           [1e-30, 1e30]    0.74
 *   tanh          [-10, 10]        1.20
 *   sigmoid       [-88, 88]        1.94 (exp(-|x|) form: reaches the denormals);
 *                                  2.28 over every 97th float in [-110, 110]
 *                                  (tests/kernels/test_unary_sweep.py)
 *   erf           [-4.5, 4.5]      1.19
 *   gelu (erf)    [-14, 10]        4.18 (negative tail via erfc: no cancellation)
 *   gelu (tanh)   [-1, 10]         2.51; [-10, -1]: 188 — the float rounding
 *                                  of the tanh argument z (|z| up to 80) times
 *                                  exp's amplification, inherent to float32
 *   silu          [-80, 80]        2.65; 2.99 over the sweep above (below
 *                                  -87.3 the gate is denormal: absolute error)
 *   softplus      [-20, 80]        2.41
 *   elu, selu     [-20, 20]        0.86, 2.08 (expm1: no cancellation near 0)
 * Exact (correctly rounded, identical on every path): relu, leaky_relu, abs,
 * neg, sqrt, reciprocal, clip, floor, ceil, round (half to even, as ONNX
 * Round), sign, hardsigmoid/hardswish (alpha*x + beta in two roundings, as
 * numpy), and the binary add/sub/mul/div/min/max. pow with a scalar exponent
 * 0, 0.5, 1, 2, 3 or -1 is 1, sqrt, x, x*x, x*x*x, 1/x on every path;
 * otherwise libm powf (<= 1 ulp) element by element.
 * The tests (tests/kernels/test_eltwise.py, kernels/tests/test_eltwise.c)
 * assert these bounds.
 * NaN and Inf propagate as libm / numpy do: min/max/relu/clip of NaN is NaN,
 * exp(-inf) = 0, exp(+inf) = inf, sigmoid(+-inf) = 1/0, tanh(+-inf) = +-1;
 * x * gate(x) ops (silu, gelu, gelu_tanh, hardswish) give -0 at -inf (the
 * limit), not inf * 0 = NaN.
 */
#ifndef AIE_ELTWISE_H
#define AIE_ELTWISE_H

#include <stddef.h>
#include <stdint.h>

#include "aie_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* AIE_MAX_DIMS, the dtype codes (AIE_DT_*) and the unary ops (AIE_U_*): aie_ops.h. */

typedef enum {
    AIE_BINARY_ADD = 0,
    AIE_BINARY_SUB,
    AIE_BINARY_MUL,
    AIE_BINARY_DIV,         /* int64/int32: truncates toward zero; /0 is AIE_EINVAL */
    AIE_BINARY_POW,
    AIE_BINARY_MAX,         /* NaN-propagating, as numpy.maximum */
    AIE_BINARY_MIN,
    AIE_BINARY_AND,         /* bool only */
    AIE_BINARY_OR,
    AIE_BINARY_XOR,
    AIE_BINARY_COUNT
} aie_binary_op;

typedef enum {
    AIE_CMP_EQ = 0,
    AIE_CMP_NE,
    AIE_CMP_LT,
    AIE_CMP_LE,
    AIE_CMP_GT,
    AIE_CMP_GE,
    AIE_CMP_COUNT
} aie_compare_op;

/* y[i] = op(x[i]) on n contiguous float32 (x == y allowed); op: an AIE_U_*
 * code with the AIE_UF_VEC flag (aie_unary_flags). */
int aie_unary(int op, const float *x, float *y, int64_t n, float p0, float p1, int nthreads);

/* y = a op b with broadcasting. dtype: F32, I64 or I32 (AND/OR/XOR: BOOL).
 * shape: the output's; a_strides/b_strides: see the top of this file. */
int aie_binary(int op, int dtype, int ndim, const int64_t *shape,
               const void *a, const int64_t *a_strides,
               const void *b, const int64_t *b_strides,
               void *y, int nthreads);

/* y (bool, one byte 0/1) = a cmp b with broadcasting; dtype F32, I64, I32, U8 or BOOL.
 * Comparisons with NaN are false except NE (IEEE). */
int aie_compare(int op, int dtype, int ndim, const int64_t *shape,
                const void *a, const int64_t *a_strides,
                const void *b, const int64_t *b_strides,
                uint8_t *y, int nthreads);

/* y = cond ? a : b with broadcasting, any element size (1, 2, 4 or 8 bytes). */
int aie_where(size_t elem_size, int ndim, const int64_t *shape,
              const uint8_t *cond, const int64_t *cond_strides,
              const void *a, const int64_t *a_strides,
              const void *b, const int64_t *b_strides,
              void *y, int nthreads);

/* y = !x on n bools. */
int aie_logical_not(const uint8_t *x, uint8_t *y, int64_t n, int nthreads);

/* Convert n elements. float -> integer rounds toward zero (C and ONNX Cast);
 * NaN/Inf or out-of-range floats to an integer type are AIE_EINVAL with the
 * element index (C leaves them undefined). Anything -> bool is x != 0. */
int aie_cast(int src_dtype, int dst_dtype, const void *x, void *y, int64_t n, int nthreads);

#ifdef __cplusplus
}
#endif
#endif /* AIE_ELTWISE_H */
