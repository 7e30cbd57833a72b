/* PLACEHOLDER naive SGEMM so the library links; replaced by the blocked GEMM. */
#include "aie_internal.h"
#include <math.h>
#include <string.h>

size_t aie_sgemm_workspace_size(int64_t M, int64_t N, int64_t K, int nthreads) { return 0; }

int aie_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
              const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const aie_epilogue *ep,
              void *ws, size_t wss, int nthreads) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float s = 0.f;
            for (int64_t k = 0; k < K; k++) s += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
            float c = alpha * s + (beta == 0.f ? 0.f : beta * C[i * ldc + j]);
            if (ep && ep->bias) c += ep->bias_kind == AIE_BIAS_ROW ? ep->bias[i] : ep->bias[j];
            if (ep && ep->act == AIE_ACT_RELU) c = c > 0.f ? c : 0.f;
            C[i * ldc + j] = c;
        }
    return AIE_OK;
}
size_t aie_sgemm_packed_b_size(int64_t K, int64_t N) { return (size_t)(K * N) * sizeof(float); }
int aie_sgemm_pack_b(int tb, int64_t K, int64_t N, const float *B, int64_t ldb, void *packed, size_t ps) {
    float *p = packed;
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++) p[k * N + j] = tb ? B[j * ldb + k] : B[k * ldb + j];
    return AIE_OK;
}
int aie_sgemm_packed(int ta, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const void *pb, float beta, float *C, int64_t ldc, const aie_epilogue *ep, void *ws,
                     size_t wss, int nthreads) {
    return aie_sgemm(ta, 0, M, N, K, alpha, A, lda, pb, N, beta, C, ldc, ep, ws, wss, nthreads);
}
