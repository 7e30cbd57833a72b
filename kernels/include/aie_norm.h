/*
 * Softmax / log-softmax and normalisations, float32.
 *
 * Softmax views x as [outer, axis_len, inner] (row-major, contiguous): it is
 * taken along the middle dim, so any axis of any tensor maps to it (outer =
 * product of the dims before the axis, inner = product after). Numerically
 * stable: the max along the axis is subtracted first, so inputs of +-1e4
 * give finite results; log-softmax is x - max - log(sum exp(x - max)), never
 * log(softmax) (no -inf for tiny probabilities). A NaN in a slice makes that
 * whole slice NaN; +inf gives NaN (inf - inf), as numpy/onnxruntime.
 * Accuracy (tests/kernels/test_softmax.py): relative error of softmax
 * <= (|x - max| + 4 + axis_len) * 2^-24 — the float rounding of x - max is
 * amplified by exp, plus exp's ~2 ulp and the sum's rounding.
 * An empty axis (or outer/inner 0) writes nothing.
 *
 * Layer normalisation views x as [rows, cols] (cols = product of the last k
 * normalised dims): y = (x - mean) / sqrt(var + eps) * scale + bias with the
 * biased variance computed in two passes (mean first, then squares of the
 * deviations: no cancellation). scale/bias have cols elements (NULL bias =
 * 0); mean and invstd (rows elements each) are written when not NULL, as
 * ONNX LayerNormalization's optional outputs. cols == 0 (rows > 0) is
 * AIE_EINVAL: the mean of nothing.
 * RMS normalisation: y = x / sqrt(mean(x^2) + eps) * scale.
 * Rows run in parallel; every row is computed by one task, so results do not
 * depend on the thread count.
 */
#ifndef AIE_NORM_H
#define AIE_NORM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int aie_softmax(const float *x, float *y, int64_t outer, int64_t axis_len, int64_t inner,
                int log_softmax, int nthreads);

int aie_layer_norm(const float *x, const float *scale, const float *bias, float *y,
                   int64_t rows, int64_t cols, float eps,
                   float *mean, float *invstd, int nthreads);

int aie_rms_norm(const float *x, const float *scale, float *y, int64_t rows, int64_t cols,
                 float eps, int nthreads);

#ifdef __cplusplus
}
#endif
#endif /* AIE_NORM_H */
