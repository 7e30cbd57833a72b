/*
 * 2-D pooling, float32, NHWC (same layout contract as aie_conv.h: the
 * window's taps are unit-stride channel vectors, so every ISA path
 * vectorises over C).
 *
 * Output size, exactly as ONNX MaxPool/AveragePool (and onnxruntime):
 *   span = (k-1)*dil + 1
 *   out  = floor_or_ceil((in + pad_begin + pad_end - span) / stride) + 1
 * and with ceil_mode the last window must start inside the input or the
 * begin padding: if (out-1)*stride >= in + pad_begin, out -= 1.
 * Windows: output row p covers input rows h0 + i*dil (i < k) with
 * h0 = p*stride - pad_begin, clipped to [-pad_begin, in + pad_end) (the ceil
 * tail is never counted) and, for the values, to [0, in).
 *   max: max over the valid taps; NaN in any tap gives NaN. A window with no
 *        tap inside the input (possible only with dilation) gives -inf.
 *   avg: sum / count, count = taps inside [0, in) (count_include_pad = 0) or
 *        inside [-pad_begin, in + pad_end) (count_include_pad = 1); an empty
 *        count gives NaN (0/0), like the ONNX reference's empty average.
 * Each pad must be smaller than the window span (onnxruntime enforces the
 * same), so no window lies wholly in the padding.
 * Global pools reduce all H*W positions per (n, c). Threads split output
 * rows; results do not depend on the thread count (each output is one
 * ordered reduction).
 */
#ifndef AIE_POOL_H
#define AIE_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "aie_ops.h" /* aie_pool2d_params */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { AIE_POOL_MAX = 0, AIE_POOL_AVG = 1 } aie_pool_kind;

/* aie_pool2d_params (aie_ops.def): N, H, W, C (input, NHWC), kh, kw, stride_h/w,
 * dil_h/w, pad_top/left/bottom/right, ceil_mode, count_include_pad (avg). */

int aie_pool2d_output_shape(const aie_pool2d_params *p, int64_t *P, int64_t *Q);
/* kind: aie_pool_kind. y: N x P x Q x C. */
int aie_pool2d(int kind, const aie_pool2d_params *p, const float *x, float *y, int nthreads);
/* x: N x HW x C -> y: N x C (NHWC with H = W = 1). HW >= 1. */
int aie_global_pool(int kind, int64_t N, int64_t HW, int64_t C, const float *x, float *y, int nthreads);

#ifdef __cplusplus
}
#endif
#endif /* AIE_POOL_H */
