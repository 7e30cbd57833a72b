/* Strided copy shared by the layout kernels (internal; core/transpose.c). */
#ifndef AIE_TRANSPOSE_H
#define AIE_TRANSPOSE_H

#include <stddef.h>
#include <stdint.h>

/* y (contiguous, shape) = x read through element strides xst; ndim may be up
 * to 2 * AIE_MAX_DIMS (tile's (reps, size) view). `what` names the caller in
 * errors. */
int aie_copy_nd(size_t es, int ndim, const int64_t *shape, const void *x, const int64_t *xst, void *y,
                int nthreads, const char *what);

/* Row-major strides (in elements) of a contiguous tensor. */
void aie_contiguous_strides(int ndim, const int64_t *shape, int64_t *st);

#endif /* AIE_TRANSPOSE_H */
