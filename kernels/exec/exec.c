/* The plan executor's main loop: resolve each step's tensors, dispatch by
 * opcode through one table, stop at the first failing step and name it. */
#include "exec_ops.h"

#include <stdio.h>
#include <string.h>

static const char *const k_names[AIE_X_COUNT] = {
#define AIE_OPCODE(v, NAME, name, fn, params) [v] = #name,
#include "aie_ops.def"
#undef AIE_OPCODE
};

static const aie_exec_fn k_fns[AIE_X_COUNT] = {
#define AIE_OPCODE(v, NAME, name, fn, params) [v] = fn,
#include "aie_ops.def"
#undef AIE_OPCODE
};

/* The int64 words of each step's parameter struct (its head: a tail's
 * length is the struct's own business). */
static const int64_t k_param_words[AIE_X_COUNT] = {
#define AIE_OPCODE(v, NAME, name, fn, params) [v] = (int64_t)(sizeof(aie_##params) / sizeof(int64_t)),
#include "aie_ops.def"
#undef AIE_OPCODE
};

const char *aie_exec_op_name(int64_t op) { return (op > 0 && op < AIE_X_COUNT && k_names[op]) ? k_names[op] : "?"; }

size_t aie_dtype_size(int64_t dt) {
    switch (dt) {
#define AIE_DTYPE(v, NAME, bytes) case v: return bytes;
#include "aie_ops.def"
#undef AIE_DTYPE
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
    /* A Loop's jump back (engine/ops/loops.py) repeats its body at most
     * 2^32 times per step of the plan; the bound keeps a corrupted plan, or
     * a model's endless loop, from running forever. */
    const int64_t max_executed = (p->n_steps + 16) << 32;
    while (pc < p->n_steps) {
        if (++executed > max_executed) return aie_fail(AIE_EINVAL, "plan does not terminate (step %lld)", (long long)pc);
        const aie_step_record *s = (const aie_step_record *)(const void *)p->steps + pc;
        int64_t op = s->op, nt = s->nt;
        if (nt > MAX_STEP_TENSORS)
            return aie_fail(AIE_EINVAL, "step %lld (%s): %lld operands, at most %d", (long long)pc,
                            aie_exec_op_name(op), (long long)nt, MAX_STEP_TENSORS);
        for (int64_t i = 0; i < nt; i++) {
            int64_t ti = p->step_tensors[s->t0 + i];
            if (ti < 0) { t[i] = NULL; continue; }
            const aie_tensor_record *d = (const aie_tensor_record *)(const void *)p->tensors + ti;
            char *base;
            switch (d->kind) {
            case AIE_LOC_ARENA: base = arena; break;
            case AIE_LOC_BLOB: base = (char *)(uintptr_t)blobs[d->index]; break;
            case AIE_LOC_INPUT: base = (char *)(uintptr_t)inputs[d->index]; break;
            case AIE_LOC_OUTPUT: base = outputs[d->index]; break;
            default: base = NULL; break;
            }
            t[i] = base ? base + d->offset : NULL;
        }
        if (op > 0 && op < AIE_X_COUNT && s->ni < k_param_words[op])
            return aie_fail(AIE_EINVAL, "step %lld (%s): %lld parameter words, its struct has %lld", (long long)pc,
                            aie_exec_op_name(op), (long long)s->ni, (long long)k_param_words[op]);
        const int64_t *ip = p->iparams + s->i0;
        const aie_jump_step *jump = (const aie_jump_step *)(const void *)ip;
        if (op == AIE_X_JUMP_IF_NOT) {
            pc = (*(const uint8_t *)t[0]) ? pc + 1 : jump->target;
            continue;
        }
        if (op == AIE_X_JUMP) { pc = jump->target; continue; }
        aie_exec_fn fn = (op > 0 && op < AIE_X_COUNT) ? k_fns[op] : NULL;
        if (!fn) return aie_fail(AIE_EINVAL, "step %lld: unknown opcode %lld", (long long)pc, (long long)op);
        int cap = (int)s->threads, nth = nthreads;
        if (cap > 0 && (nth <= 0 || nth > cap)) nth = cap;
        aie_step_args a = {t, nt, ip, s->ni, p->fparams + s->f0, s->nf, nth};
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
