/* Internal: one signature for every executor op (ggml-style), so exec.c
 * dispatches them from one table built from aie_ops.def. t[] holds resolved
 * tensor pointers (NULL for absent operands), ip/fp the step's parameters,
 * nt/ni/nf their counts. */
#ifndef AIE_EXEC_OPS_H
#define AIE_EXEC_OPS_H

#include "aie_exec.h"
#include "aie_internal.h"

typedef struct {
    void **t;
    int64_t nt;
    const int64_t *ip;
    int64_t ni;
    const double *fp;
    int64_t nf;
    int nthreads;
} aie_step_args;

typedef int (*aie_exec_fn)(const aie_step_args *a);

int aie_x_copy(const aie_step_args *a);
int aie_x_fill(const aie_step_args *a);
int aie_x_unary(const aie_step_args *a);
int aie_x_binary(const aie_step_args *a);
int aie_x_cast(const aie_step_args *a);
int aie_x_where(const aie_step_args *a);
int aie_x_gather(const aie_step_args *a);
int aie_x_reduce(const aie_step_args *a);
int aie_x_softmax(const aie_step_args *a);
int aie_x_matmul(const aie_step_args *a);
int aie_x_conv(const aie_step_args *a);
int aie_x_pool(const aie_step_args *a);
int aie_x_layernorm(const aie_step_args *a);
int aie_x_pad(const aie_step_args *a);
int aie_x_resize(const aie_step_args *a);
int aie_x_argmax(const aie_step_args *a);
int aie_x_gather_elements(const aie_step_args *a);
int aie_x_cumsum(const aie_step_args *a);
int aie_x_conv_transpose(const aie_step_args *a);
int aie_x_conv_pack(const aie_step_args *a);
int aie_x_global_pool(const aie_step_args *a);
int aie_x_gemm_packed(const aie_step_args *a);
int aie_x_gemm_u8s8_packed(const aie_step_args *a);
int aie_x_conv_u8s8(const aie_step_args *a);
int aie_x_conv_u8s8_dw(const aie_step_args *a);
int aie_x_quantize(const aie_step_args *a);
int aie_x_dequantize(const aie_step_args *a);
int aie_x_lut_u8(const aie_step_args *a);
int aie_x_qadd_u8(const aie_step_args *a);
int aie_x_rnn(const aie_step_args *a);
int aie_x_copy_at(const aie_step_args *a);
int aie_x_qsoftmax_u8(const aie_step_args *a);
int aie_x_qmatmul_u8(const aie_step_args *a);
int aie_x_bitshift(const aie_step_args *a);
int aie_x_cumprod(const aie_step_args *a);
int aie_x_topk(const aie_step_args *a);
int aie_x_scatter_elements(const aie_step_args *a);
int aie_x_scatter_nd(const aie_step_args *a);
int aie_x_gather_nd(const aie_step_args *a);
int aie_x_grid_sample(const aie_step_args *a);
int aie_x_rms_norm(const aie_step_args *a);
int aie_x_attention(const aie_step_args *a);
int aie_x_gemm_bf16_packed(const aie_step_args *a);
int aie_x_conv_bf16(const aie_step_args *a);
int aie_x_conv_bf16_io(const aie_step_args *a);
int aie_x_conv_dw_pw(const aie_step_args *a);
int aie_x_nonzero(const aie_step_args *a);
int aie_x_compress(const aie_step_args *a);
int aie_x_unique(const aie_step_args *a);
int aie_x_nms(const aie_step_args *a);
size_t aie_attention_workspace(int64_t tile, int64_t L, int64_t dk, int64_t dv, int64_t workers);
int aie_x_attention_bf16(const aie_step_args *a);
size_t aie_attention_bf16_workspace(int64_t tile, int64_t L, int64_t dk, int64_t dv, int64_t workers);

/* Size in bytes of a dtype code; 0 when unknown. */
size_t aie_dtype_size(int64_t dtype);

/* Read element i of an index tensor stored as int32 or int64. */
static inline int64_t aie_load_index(const void *p, int64_t dtype, int64_t i) {
    return dtype == AIE_DT_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

#endif
