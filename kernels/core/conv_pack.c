/* Packed convolution weight header: fill and check (see conv_pack.h). */
#include <string.h>

#include "conv_pack.h"

void aie_conv_pack_header_fill(aie_conv_pack_header *h, const aie_conv2d_params *p, int kind) {
    memset(h, 0, sizeof *h);
    h->magic = AIE_CONV_PACK_MAGIC;
    h->version = AIE_CONV_PACK_VERSION;
    h->isa = (uint32_t)aie_selected_isa();
    h->kind = (uint32_t)kind;
    h->C = p->C;
    h->K = p->K;
    h->R = p->R;
    h->S = p->S;
    h->groups = p->groups;
    const int64_t Cg = p->C / p->groups, Kg = p->K / p->groups;
    if (kind == AIE_CONV_PACK_GEMM)
        h->group_bytes = AIE_ROUND_UP(aie_sgemm_packed_b_size(p->R * p->S * Cg, Kg), AIE_ALIGN);
    else if (kind == AIE_CONV_PACK_TRANSPOSE)
        h->group_bytes = AIE_ROUND_UP(aie_sgemm_packed_b_size(Cg, p->R * p->S * Kg), AIE_ALIGN);
    else if (kind == AIE_CONV_PACK_WINOGRAD)
        h->group_bytes = AIE_ROUND_UP(aie_sgemm_packed_b_size(p->C, p->K), AIE_ALIGN);
    else if (kind == AIE_CONV_PACK_BF16)
        h->group_bytes = AIE_ROUND_UP(aie_gemm_bf16_packed_b_size(p->R * p->S * p->C, p->K), AIE_ALIGN);
    else
        h->group_bytes = 0;
}

int aie_conv_pack_header_check(const aie_conv_pack_header *h, const aie_conv2d_params *p, int kind, const char *op) {
    if (h->magic != AIE_CONV_PACK_MAGIC || h->version != AIE_CONV_PACK_VERSION)
        return aie_fail(AIE_EINVAL, "%s: packed weights have a bad magic/version (not made by *_pack_weights?)", op);
    if (h->kind != (uint32_t)kind)
        return aie_fail(AIE_EINVAL, "%s: packed weights are of kind %u, these params need kind %d", op, h->kind,
                        kind);
    if (h->C != p->C || h->K != p->K || h->R != p->R || h->S != p->S || h->groups != p->groups)
        return aie_fail(AIE_EINVAL,
                        "%s: packed weights are for C=%lld K=%lld R=%lld S=%lld groups=%lld, params say "
                        "C=%lld K=%lld R=%lld S=%lld groups=%lld",
                        op, (long long)h->C, (long long)h->K, (long long)h->R, (long long)h->S, (long long)h->groups,
                        (long long)p->C, (long long)p->K, (long long)p->R, (long long)p->S, (long long)p->groups);
    if (kind != AIE_CONV_PACK_DEPTHWISE && kind != AIE_CONV_PACK_BF16 && h->isa != (uint32_t)aie_selected_isa())
        return aie_fail(AIE_EINVAL, "%s: weights were packed for ISA %s, the selected ISA is %s: repack them", op,
                        aie_isa_name((aie_isa)h->isa), aie_isa_name(aie_selected_isa()));
    return AIE_OK;
}

int aie_conv_check_call(const aie_conv2d_params *p, const float *x, const void *packed_w, const float *y,
                        const aie_epilogue *ep, int kind, const char *op, aie_epilogue *e) {
    if (!x || !packed_w || !y) return aie_fail(AIE_EINVAL, "%s: NULL input, weights or output", op);
    if (ep && ep->bias)
        return aie_fail(AIE_EINVAL, "%s: ep->bias must be NULL (pass the bias as the `bias` argument)", op);
    int rc = aie_conv_pack_header_check(packed_w, p, kind, op);
    if (rc) return rc;
    *e = (aie_epilogue){NULL, AIE_BIAS_NONE, AIE_U_IDENTITY, 0.f, 0.f};
    if (ep) {
        e->act = ep->act;
        e->p0 = ep->p0;
        e->p1 = ep->p1;
    }
    return AIE_OK;
}
