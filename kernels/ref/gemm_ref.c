/*
 * Naive SGEMM reference (ref.h): the aie_sgemm contract written as three
 * loops with double accumulation and nothing else (no blocking, no packing,
 * no workspace); test_gemm.c compares every optimised path against it.
 */
#include "ref.h"

int aie_sgemm_naive(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                    int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                    const aie_epilogue *ep) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double a = trans_a ? A[k * lda + i] : A[i * lda + k];
                double b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
                s += a * b;
            }
            double c = alpha * s;
            if (beta != 0.0f) c += (double)beta * C[i * ldc + j];
            if (ep && ep->bias_kind == AIE_BIAS_COL) c += ep->bias[j];
            if (ep && ep->bias_kind == AIE_BIAS_ROW) c += ep->bias[i];
            if (ep) c = aie_ref_act(ep->act, c, ep->p0, ep->p1);
            C[i * ldc + j] = (float)c;
        }
    return AIE_OK;
}
