/*
 * Low-precision GEMM: bf16 and int8 inputs, on the CPU's matrix and
 * dot-product units (AMX, AVX-512 BF16/VNNI, AVX-VNNI) with portable paths,
 * chosen by the selected level (aie_selected_level, AIE_ISA).
 *
 * Both take B as a weight: packed once (aie_gemm_*_pack_b) into a layout
 * private to the library and the same for every path of one dtype (a B
 * packed on one level runs on any other). A is M x K row-major with leading
 * dimension lda, C is M x N row-major with ldc (elements).
 *
 * bf16:  C (fp32) = A x B, then the fp32 epilogue (aie_epilogue: bias,
 *   activation) exactly as aie_sgemm applies it, except GELU: computed only
 *   as exactly as bf16 needs (vmath_fn.h vmf_gelu_bf16), within
 *   (2^-18 + x^2 2^-23) |gelu(x)| of the exact GELU of the summed x, the same
 *   bits on every level. A is fp32 (rounded to bf16,
 *   nearest-even, while it is packed) or bf16; B is fp32 rounded to bf16 when
 *   packed. Products of two bf16 are exact in fp32; sums are fp32.
 *   Accuracy against a float64 product of the fp32 inputs:
 *     |C - ref| <= (2^-8 + (K + 2) * 2^-24) * sum_k |a_ik| |b_kj|
 *   (2^-9 relative rounding of each input; the K-step fp32 sum). Inputs that
 *   are already bf16 drop the 2^-8 term. The AMX and AVX-512 BF16 units
 *   treat bf16 denormals (|x| < 2^-126) as zero; the portable path does not.
 *
 * int8:  acc[i][j] = sum_k (A[i][k] - a_zero) * B[k][j] in int32, A uint8,
 *   B int8 (symmetric: no B zero point), K <= AIE_GEMM_S8_MAX_K so no sum can
 *   overflow. Bit-exact on every path. Then, by aie_qepilogue.out:
 *   - AIE_QOUT_S32: C (int32) = acc.
 *   - AIE_QOUT_F32: C (fp32) = (float)acc * (a_scale * b_scale[j]), then the
 *     fp32 epilogue ep (bias, activation).
 *   - AIE_QOUT_U8:  C (uint8) = clamp(round_half_even((float)(acc + bias[j])
 *     * m[j]) + y_zero, 0, 255) with m[j] = a_scale * b_scale[j] / y_scale
 *     computed in fp32 once per call: ONNX QuantizeLinear's rounding
 *     (onnxruntime's QLinearMatMul/QLinearConv requantise the same way). The
 *     same fp32 operations on every path, so the bytes are identical.
 *     Then, when lut_u8 is set, C[i][j] = lut_u8[j * 256 + C[i][j]] (a
 *     per-column byte map: the fused uint8 -> uint8 steps that follow, e.g.
 *     a quantised BatchNormalization, engine/passes/qdq_fuse.py).
 *
 * Workspace: caller-provided, sized by the *_workspace_size functions, as
 * for aie_sgemm; nthreads <= 0 means the pool's size.
 */
#ifndef AIE_GEMM_LOWP_H
#define AIE_GEMM_LOWP_H

#include <stddef.h>
#include <stdint.h>

#include "aie_gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* bf16 is the upper half of an IEEE fp32: stored as its bits. */
typedef uint16_t aie_bf16;

typedef enum { AIE_A_F32 = 0, AIE_A_BF16 = 1 } aie_a_type;

size_t aie_gemm_bf16_packed_b_size(int64_t K, int64_t N);
/* Packs op(B) (K x N; B stored N x K when trans_b), fp32 rounded to bf16. */
int aie_gemm_bf16_pack_b(int trans_b, int64_t K, int64_t N, const float *B, int64_t ldb, void *packed,
                         size_t packed_size);
size_t aie_gemm_bf16_workspace_size(int64_t M, int64_t N, int64_t K, int nthreads);
int aie_gemm_bf16(int64_t M, int64_t N, int64_t K, const void *A, int a_type, int64_t lda, const void *packed_b,
                  float *C, int64_t ldc, const aie_epilogue *ep, void *workspace, size_t workspace_size,
                  int nthreads);

/* 32768 * 255 * 128 * 2 < 2^31: sum_k a*b and a_zero * sum_k b both fit. */
#define AIE_GEMM_S8_MAX_K 32768

typedef enum { AIE_QOUT_S32 = 0, AIE_QOUT_F32 = 1, AIE_QOUT_U8 = 2 } aie_qout_kind;

/* aie_qepilogue (aie_ops.def): out (aie_qout_kind), a_scale, b_scale[N],
 * y_scale, y_zero, bias_s32[N], ep (the fp32 epilogue). */

size_t aie_gemm_s8_packed_b_size(int64_t K, int64_t N);
/* Packs op(B) (K x N int8; stored N x K when trans_b) and its column sums. */
int aie_gemm_s8_pack_b(int trans_b, int64_t K, int64_t N, const int8_t *B, int64_t ldb, void *packed,
                       size_t packed_size);
size_t aie_gemm_u8s8_workspace_size(int64_t M, int64_t N, int64_t K, int nthreads);
int aie_gemm_u8s8(int64_t M, int64_t N, int64_t K, const uint8_t *A, int64_t lda, int32_t a_zero,
                  const void *packed_b, void *C, int64_t ldc, const aie_qepilogue *q, void *workspace,
                  size_t workspace_size, int nthreads);

/* The kernel each dtype runs at the selected level, e.g. "amx_bf16_32x32",
 * "avx512_vnni_s8_8x32", "portable_bf16_32x32" (for reports). */
const char *aie_gemm_bf16_path(void);
const char *aie_gemm_s8_path(void);

#ifdef __cplusplus
}
#endif
#endif /* AIE_GEMM_LOWP_H */
