/*
 * CUDA SGEMM (kernels/cuda/sgemm.cu, libaie_kernels_cuda.a): the aie_sgemm
 * contract (include/aie_gemm.h: row-major, leading dimensions in elements,
 * op(A) M x K, op(B) K x N, beta == 0 means C is not read, then bias and
 * activation) on device pointers. Tiled shared-memory kernel, no cuBLAS.
 * Asynchronous on `stream` (a cudaStream_t; NULL = the default stream):
 * launch errors are reported, execution errors surface at the next sync.
 */
#ifndef AIE_CUDA_H
#define AIE_CUDA_H

#include <stdint.h>

#include "aie_gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* bias in ep (if any) must be a device pointer. Returns AIE_OK, AIE_EINVAL
 * (bad arguments, with the reason in aie_last_error()) or AIE_EINTERNAL (the
 * launch failed: the CUDA error string is in aie_last_error()). */
int aie_cuda_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                   int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                   const aie_epilogue *ep, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* AIE_CUDA_H */
