/*
 * Reductions over any set of axes of a contiguous float32 tensor.
 *
 * x has shape[ndim] (row-major, contiguous); axes_mask has bit d set for
 * every reduced dim d (0 reduces nothing: y is a copy, after the op's
 * element map, e.g. |x| for L1). y holds the kept dims in order, contiguous:
 * keepdims only changes the shape the caller reports, never the layout.
 * Reducing an empty set gives the op's identity: sum/L1/L2/sumsq 0, prod 1,
 * max -inf, min +inf, logsumexp and log_sum -inf, mean NaN (0/0, as numpy).
 *
 * Order of summation is fixed by the shape alone (never by the thread count):
 * each output element is owned by one task, and within it the reduced
 * elements are visited in row-major order, the innermost contiguous run
 * summed with the ISA's vector accumulators. Results are therefore bitwise
 * deterministic for a given ISA and independent of nthreads. Error against a
 * float64 sum: <= n * 2^-24 * sum|x| (a naive float sum bound; in practice
 * far lower with the 32/64 partial sums of the SIMD paths).
 * NaN propagates through every op (max/min included).
 */
#ifndef AIE_REDUCE_H
#define AIE_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Same numbering as aie_exec.h's AIE_R_*. */
typedef enum {
    AIE_REDUCE_SUM = 0,
    AIE_REDUCE_MEAN,
    AIE_REDUCE_MAX,
    AIE_REDUCE_MIN,
    AIE_REDUCE_PROD,
    AIE_REDUCE_SUM_SQUARE,  /* sum x^2 */
    AIE_REDUCE_L1,          /* sum |x| */
    AIE_REDUCE_L2,          /* sqrt(sum x^2) */
    AIE_REDUCE_LOG_SUM,     /* log(sum x) */
    AIE_REDUCE_LOG_SUM_EXP, /* max + log(sum exp(x - max)): finite for |x| ~ 1e4 */
    AIE_REDUCE_COUNT
} aie_reduce_op;

int aie_reduce(int op, int ndim, const int64_t *shape, const float *x,
               uint32_t axes_mask, float *y, int nthreads);

/* Index (int64) of the max (AIE_REDUCE_MAX) or min (AIE_REDUCE_MIN) along
 * one axis; ties pick the first index, or the last with select_last != 0
 * (ONNX ArgMax select_last_index). NaN counts as the extreme (numpy): the
 * first NaN wins. y has the shape of x without that axis. An empty axis is
 * AIE_EINVAL (numpy raises too). */
int aie_arg_reduce(int op, int ndim, const int64_t *shape, const float *x,
                   int axis, int select_last, int64_t *y, int nthreads);

#ifdef __cplusplus
}
#endif
#endif /* AIE_REDUCE_H */
