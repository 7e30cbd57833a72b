/* AIE_X_GEMM_BF16_PACKED: MatMul/Gemm nodes the precision pass marked bf16
 * (engine.passes.precision), on aie_gemm_bf16. A is fp32 and rounded to bf16
 * while the kernel packs it; B was packed once, at conversion, by
 * aie_gemm_bf16_pack_b (a layout every level reads). t: C (M x N), A (M x K,
 * lda), packed B, bias (NULL or per bias_kind), workspace.
 * ip: aie_gemm_bf16_packed_step. fp: p0, p1 (the activation's parameters). */
#include "aie_gemm_lowp.h"
#include "exec_ops.h"

int aie_x_gemm_bf16_packed(const aie_step_args *a) {
    const aie_gemm_bf16_packed_step *sp = (const aie_gemm_bf16_packed_step *)(const void *)a->ip;
    aie_epilogue ep = {a->t[3], a->t[3] ? (int)sp->bias_kind : AIE_BIAS_NONE, (int)sp->act, (float)a->fp[0],
                       (float)a->fp[1]};
    return aie_gemm_bf16(sp->M, sp->N, sp->K, a->t[1], AIE_A_F32, sp->lda, a->t[2], a->t[0], sp->N, &ep, a->t[4],
                         (size_t)sp->workspace_bytes, a->nthreads);
}
