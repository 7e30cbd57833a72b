/*
 * Tiled shared-memory SGEMM for NVIDIA GPUs (contract in include/aie_cuda.h).
 *
 * Each 256-thread block computes a 128 x 128 tile of C; each thread an 8 x 8
 * register sub-tile. Per step of BK = 8 along K the block stages a 128 x 8
 * slice of op(A) (stored k-major, so a thread's 8 A values are contiguous)
 * and an 8 x 128 slice of op(B) in shared memory, double-buffered so the
 * next slice loads while this one is multiplied. Ragged edges are zero-filled
 * on load and masked on store, so any M, N, K, transposes and leading
 * dimensions work. Accumulation is float32 in K order (like the CPU paths,
 * not bitwise equal to them). The epilogue's activations are the CPU's
 * math (core/vmath_fn.h through vf_cuda.cuh), rounded step by step the same
 * way, so one input gives one output bit pattern on either device.
 *
 * Not run in this repository's CI (no GPU there): compile-checked only.
 */
#include <cuda_runtime.h>

#include "aie_cuda.h"
#include "aie_kernels.h"
#include "vf_cuda.cuh" /* vmf_act: the CPU epilogue's activation math */

extern "C" int aie_fail(int code, const char *fmt, ...);

namespace {

constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
constexpr int THREADS = (BM / TM) * (BN / TN); /* 256 */

struct Params {
    int trans_a, trans_b;
    int64_t M, N, K;
    float alpha, beta;
    const float *A;
    int64_t lda;
    const float *B;
    int64_t ldb;
    float *C;
    int64_t ldc;
    const float *bias;
    int bias_kind, act;
    float p0, p1;
};

__device__ __forceinline__ float load_a(const Params &p, int64_t i, int64_t k) {
    if (i >= p.M || k >= p.K) return 0.f;
    return p.trans_a ? p.A[k * p.lda + i] : p.A[i * p.lda + k];
}

__device__ __forceinline__ float load_b(const Params &p, int64_t k, int64_t j) {
    if (k >= p.K || j >= p.N) return 0.f;
    return p.trans_b ? p.B[j * p.ldb + k] : p.B[k * p.ldb + j];
}

__global__ void __launch_bounds__(THREADS) sgemm_tiled(Params p) {
    __shared__ float As[2][BK][BM]; /* k-major: As[k][i] */
    __shared__ float Bs[2][BK][BN];
    const int tid = threadIdx.x;
    const int64_t row0 = (int64_t)blockIdx.y * BM, col0 = (int64_t)blockIdx.x * BN;
    const int ty = tid / (BN / TN), tx = tid % (BN / TN);

    /* each thread stages 4 elements of A and 4 of B per BK slice (1024 each) */
    auto stage = [&](int buf, int64_t k0) {
        for (int e = tid; e < BM * BK; e += THREADS) {
            int i = e / BK, k = e % BK;
            As[buf][k][i] = load_a(p, row0 + i, k0 + k);
        }
        for (int e = tid; e < BK * BN; e += THREADS) {
            int k = e / BN, j = e % BN;
            Bs[buf][k][j] = load_b(p, k0 + k, col0 + j);
        }
    };

    float acc[TM][TN] = {};
    stage(0, 0);
    __syncthreads();
    int buf = 0;
    for (int64_t k0 = 0; k0 < p.K; k0 += BK) {
        if (k0 + BK < p.K) stage(buf ^ 1, k0 + BK);
#pragma unroll
        for (int k = 0; k < BK; k++) {
            float a[TM], b[TN];
#pragma unroll
            for (int r = 0; r < TM; r++) a[r] = As[buf][k][ty * TM + r];
#pragma unroll
            for (int c = 0; c < TN; c++) b[c] = Bs[buf][k][tx * TN + c];
#pragma unroll
            for (int r = 0; r < TM; r++)
#pragma unroll
                for (int c = 0; c < TN; c++) acc[r][c] = fmaf(a[r], b[c], acc[r][c]);
        }
        __syncthreads();
        buf ^= 1;
    }

#pragma unroll
    for (int r = 0; r < TM; r++) {
        int64_t i = row0 + ty * TM + r;
        if (i >= p.M) continue;
#pragma unroll
        for (int c = 0; c < TN; c++) {
            int64_t j = col0 + tx * TN + c;
            if (j >= p.N) continue;
            float *cp = p.C + i * p.ldc + j;
            float v = p.alpha * acc[r][c];
            if (p.beta != 0.f) v = fmaf(p.beta, *cp, v);
            if (p.bias_kind == AIE_BIAS_COL) v += p.bias[j];
            else if (p.bias_kind == AIE_BIAS_ROW) v += p.bias[i];
            *cp = vmf_act(p.act, v, p.p0, p.p1);
        }
    }
}

} // namespace

extern "C" int aie_cuda_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                              const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                              int64_t ldc, const aie_epilogue *ep, void *stream) {
    const char *fn = "aie_cuda_sgemm";
    if (M < 0 || N < 0 || K < 0)
        return aie_fail(AIE_EINVAL, "%s: dimensions must be >= 0, got M=%lld N=%lld K=%lld", fn, (long long)M,
                        (long long)N, (long long)K);
    int64_t a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
    if (lda < (a_cols > 1 ? a_cols : 1) || ldb < (b_cols > 1 ? b_cols : 1) || ldc < (N > 1 ? N : 1))
        return aie_fail(AIE_EINVAL, "%s: leading dimension smaller than a stored row (lda=%lld ldb=%lld ldc=%lld)", fn,
                        (long long)lda, (long long)ldb, (long long)ldc);
    if ((M > 0 && K > 0 && !A) || (N > 0 && K > 0 && !B) || (M > 0 && N > 0 && !C))
        return aie_fail(AIE_EINVAL, "%s: NULL matrix pointer", fn);
    if (ep && ep->bias_kind != AIE_BIAS_NONE && !ep->bias)
        return aie_fail(AIE_EINVAL, "%s: epilogue has a bias kind but bias is NULL", fn);
    if (ep && (ep->act < AIE_U_IDENTITY || ep->act > AIE_U_TANH))
        return aie_fail(AIE_EINVAL, "%s: epilogue act=%d is not an epilogue activation", fn, ep->act);
    if (M == 0 || N == 0) return AIE_OK;
    if ((M + BM - 1) / BM > 65535)
        return aie_fail(AIE_EINVAL, "%s: M=%lld exceeds the grid limit (%d rows)", fn, (long long)M, 65535 * BM);

    Params p{trans_a != 0, trans_b != 0, M, N, K, alpha, beta, A, lda, B, ldb, C, ldc,
             ep ? ep->bias : nullptr, ep ? ep->bias_kind : 0, ep ? ep->act : 0, ep ? ep->p0 : 0.f,
             ep ? ep->p1 : 0.f};
    if (alpha == 0.f) p.K = 0; /* BLAS: A and B are not read */
    dim3 grid((unsigned)((N + BN - 1) / BN), (unsigned)((M + BM - 1) / BM));
    sgemm_tiled<<<grid, THREADS, 0, (cudaStream_t)stream>>>(p);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return aie_fail(AIE_EINTERNAL, "%s: launch failed: %s", fn, cudaGetErrorString(err));
    return AIE_OK;
}
