/* The plan executor's main loop: resolve each step's tensors, dispatch by
 * opcode through one table, stop at the first failing step and name it. */
#include "exec_ops.h"
#include "exec_ext.h"

#include <stdio.h>
#include <string.h>

static const char *const k_names[AIE_X_COUNT] = {
    [AIE_X_COPY] = "copy", [AIE_X_FILL] = "fill", [AIE_X_UNARY] = "unary",
    [AIE_X_BINARY] = "binary", [AIE_X_CAST] = "cast", [AIE_X_WHERE] = "where",
    [AIE_X_GATHER] = "gather", [AIE_X_REDUCE] = "reduce", [AIE_X_SOFTMAX] = "softmax",
    [AIE_X_MATMUL] = "matmul", [AIE_X_CONV] = "conv", [AIE_X_POOL] = "pool",
    [AIE_X_LAYERNORM] = "layernorm", [AIE_X_JUMP_IF_NOT] = "jump_if_not", [AIE_X_JUMP] = "jump",
    [AIE_X_PAD] = "pad", [AIE_X_RESIZE] = "resize", [AIE_X_LSTM] = "lstm",
    [AIE_X_ARGMAX] = "argmax", [AIE_X_GATHER_ELEMENTS] = "gather_elements", [AIE_X_CUMSUM] = "cumsum",
    [AIE_X_CONV_TRANSPOSE] = "conv_transpose", [AIE_X_CONV_PACK] = "conv_pack",
    [AIE_X_GLOBAL_POOL] = "global_pool", [AIE_X_GEMM_PACKED] = "gemm_packed",
};

static const aie_exec_fn k_fns[AIE_X_COUNT] = {
    [AIE_X_COPY] = aie_x_copy, [AIE_X_FILL] = aie_x_fill, [AIE_X_UNARY] = aie_x_unary,
    [AIE_X_BINARY] = aie_x_binary, [AIE_X_CAST] = aie_x_cast, [AIE_X_WHERE] = aie_x_where,
    [AIE_X_GATHER] = aie_x_gather, [AIE_X_REDUCE] = aie_x_reduce, [AIE_X_SOFTMAX] = aie_x_softmax,
    [AIE_X_MATMUL] = aie_x_matmul, [AIE_X_CONV] = aie_x_conv, [AIE_X_POOL] = aie_x_pool,
    [AIE_X_LAYERNORM] = aie_x_layernorm, [AIE_X_PAD] = aie_x_pad, [AIE_X_RESIZE] = aie_x_resize,
    [AIE_X_LSTM] = aie_x_lstm, [AIE_X_ARGMAX] = aie_x_argmax,
    [AIE_X_GATHER_ELEMENTS] = aie_x_gather_elements, [AIE_X_CUMSUM] = aie_x_cumsum,
    [AIE_X_CONV_TRANSPOSE] = aie_x_conv_transpose, [AIE_X_CONV_PACK] = aie_x_conv_pack,
    [AIE_X_GLOBAL_POOL] = aie_x_global_pool, [AIE_X_GEMM_PACKED] = aie_x_gemm_packed,
};

const char *aie_exec_op_name(int64_t op) {
    return (op > 0 && op < AIE_X_COUNT && k_names[op]) ? k_names[op] : aie_exec_ext_name(op);
}

size_t aie_dtype_size(int64_t dt) {
    switch (dt) {
    case AIE_DT_U8: case AIE_DT_I8: case AIE_DT_BOOL: return 1;
    case AIE_DT_U16: case AIE_DT_I16: case AIE_DT_F16: return 2;
    case AIE_DT_F32: case AIE_DT_I32: case AIE_DT_U32: return 4;
    case AIE_DT_I64: case AIE_DT_F64: case AIE_DT_U64: return 8;
    default: return 0;
    }
}

/* Operand pointers per step; a step with more is rejected by the converter. */
#define MAX_STEP_TENSORS 16

int aie_exec_run(const aie_exec_plan *p, void *arena, const void *const *blobs,
                 const void *const *inputs, void *const *outputs, int nthreads) {
    if (!p) return aie_fail(AIE_EINVAL, "aie_exec_run: plan is NULL");
    int rc = aie_ensure_init();
    if (rc != AIE_OK) return rc;
    void *t[MAX_STEP_TENSORS];
    int64_t pc = 0, executed = 0;
    /* Jumps only go forward in plans the converter emits; the bound keeps a
     * corrupted plan from looping forever. */
    const int64_t max_executed = p->n_steps * 4 + 16;
    while (pc < p->n_steps) {
        if (++executed > max_executed) return aie_fail(AIE_EINVAL, "plan does not terminate (step %lld)", (long long)pc);
        const int64_t *s = p->steps + pc * AIE_STEP_WORDS;
        int64_t op = s[AIE_STEP_OP], nt = s[AIE_STEP_NT];
        if (nt > MAX_STEP_TENSORS)
            return aie_fail(AIE_EINVAL, "step %lld (%s): %lld operands, at most %d", (long long)pc,
                            aie_exec_op_name(op), (long long)nt, MAX_STEP_TENSORS);
        for (int64_t i = 0; i < nt; i++) {
            int64_t ti = p->step_tensors[s[AIE_STEP_T0] + i];
            if (ti < 0) { t[i] = NULL; continue; }
            const int64_t *d = p->tensors + ti * AIE_TENSOR_WORDS;
            char *base;
            switch (d[0]) {
            case AIE_LOC_ARENA: base = arena; break;
            case AIE_LOC_BLOB: base = (char *)(uintptr_t)blobs[d[1]]; break;
            case AIE_LOC_INPUT: base = (char *)(uintptr_t)inputs[d[1]]; break;
            case AIE_LOC_OUTPUT: base = outputs[d[1]]; break;
            default: base = NULL; break;
            }
            t[i] = base ? base + d[2] : NULL;
        }
        const int64_t *ip = p->iparams + s[AIE_STEP_I0];
        if (op == AIE_X_JUMP_IF_NOT) {
            pc = (*(const uint8_t *)t[0]) ? pc + 1 : ip[0];
            continue;
        }
        if (op == AIE_X_JUMP) { pc = ip[0]; continue; }
        aie_exec_fn fn = (op > 0 && op < AIE_X_COUNT) ? k_fns[op] : aie_exec_ext_fn(op); /* ext: exec_ext.h */
        if (!fn) return aie_fail(AIE_EINVAL, "step %lld: unknown opcode %lld", (long long)pc, (long long)op);
        int cap = (int)s[AIE_STEP_THREADS], nth = nthreads;
        if (cap > 0 && (nth <= 0 || nth > cap)) nth = cap;
        aie_step_args a = {t, nt, ip, s[AIE_STEP_NI], p->fparams + s[AIE_STEP_F0], s[AIE_STEP_NF], nth};
        rc = fn(&a);
        if (rc != AIE_OK) {
            char msg[200];
            snprintf(msg, sizeof msg, "%s", aie_last_error());
            return aie_fail(rc, "step %lld (%s): %s", (long long)pc, aie_exec_op_name(op), msg);
        }
        pc++;
    }
    return AIE_OK;
}
