/*
 * SGEMM: C = alpha * op(A) * op(B) + beta * C, then the epilogue
 * (bias, activation), all in float32.
 *   op(A) is M x K, op(B) is K x N, C is M x N; row-major with leading
 *   dimensions lda/ldb/ldc in elements (the row stride of the stored matrix,
 *   i.e. of A itself, not of op(A)).
 *   beta == 0 means C is write-only (NaNs in C are not propagated), as BLAS.
 * Epilogue, applied after alpha/beta: C[i][j] += bias[j] (AIE_BIAS_COL) or
 * bias[i] (AIE_BIAS_ROW), then the activation.
 * Accuracy: summation order differs from a naive loop (blocked along K), so
 * results match a float64 reference within ~K * 2^-24 relative.
 */
#ifndef AIE_GEMM_H
#define AIE_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "aie_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { AIE_BIAS_NONE = 0, AIE_BIAS_COL = 1, AIE_BIAS_ROW = 2 } aie_bias_kind;

/* aie_epilogue (aie_ops.def): bias, bias_kind, act (an AIE_U_* code with
 * AIE_UF_EPI, 0 = none), p0, p1 (activation parameters). */

/* Bytes of workspace aie_sgemm needs for these sizes and thread count. */
size_t aie_sgemm_workspace_size(int64_t M, int64_t N, int64_t K, int nthreads);
/* Bytes aie_sgemm_packed needs (less: B is packed already); the size from
 * aie_sgemm_workspace_size fits too. */
size_t aie_sgemm_packed_workspace_size(int64_t M, int64_t N, int64_t K, int nthreads);

int aie_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
              float alpha, const float *A, int64_t lda,
              const float *B, int64_t ldb,
              float beta, float *C, int64_t ldc,
              const aie_epilogue *ep, /* may be NULL */
              void *workspace, size_t workspace_size, int nthreads);

/* Weight pre-packing (done once, at conversion time). The packed layout is
 * private to the library and ISA-specific: it records the ISA it was packed
 * for, and aie_sgemm_packed rejects a mismatch with AIE_EINVAL. */
size_t aie_sgemm_packed_b_size(int64_t K, int64_t N);
int aie_sgemm_pack_b(int trans_b, int64_t K, int64_t N, const float *B, int64_t ldb,
                     void *packed, size_t packed_size);
int aie_sgemm_packed(int trans_a, int64_t M, int64_t N, int64_t K,
                     float alpha, const float *A, int64_t lda,
                     const void *packed_b,
                     float beta, float *C, int64_t ldc,
                     const aie_epilogue *ep,
                     void *workspace, size_t workspace_size, int nthreads);

#ifdef __cplusplus
}
#endif
#endif /* AIE_GEMM_H */
