/* The C side of the op vocabulary, by name, for tests/kernels/test_abi.py:
 * the generated Python module (engine/kernels/abi.py) is checked against
 * what the compiler made of aie_ops.def (enum values, struct sizes and
 * field offsets), not against another reading of the same text. */
#include "aie_ops.h"

#include <stddef.h>
#include <string.h>

int64_t aie_abi_value(const char *name) {
#define AIE_CONST(NAME, v) if (!strcmp(name, "AIE_" #NAME)) return AIE_##NAME;
#define AIE_DTYPE(v, NAME, bytes) if (!strcmp(name, "AIE_DT_" #NAME)) return AIE_DT_##NAME;
#define AIE_LOC(v, NAME) if (!strcmp(name, "AIE_LOC_" #NAME)) return AIE_LOC_##NAME;
#define AIE_OPCODE(v, NAME, name_, fn, params) if (!strcmp(name, "AIE_X_" #NAME)) return AIE_X_##NAME;
#define AIE_UNARY(v, NAME, name_, flags) if (!strcmp(name, "AIE_U_" #NAME)) return AIE_U_##NAME;
#define AIE_BINARY(v, NAME, name_) if (!strcmp(name, "AIE_B_" #NAME)) return AIE_B_##NAME;
#define AIE_REDUCE(v, NAME, name_) if (!strcmp(name, "AIE_R_" #NAME)) return AIE_R_##NAME;
#define AIE_SCATTER_REDUCTION(v, NAME, name_) if (!strcmp(name, "AIE_SR_" #NAME)) return AIE_SR_##NAME;
#include "aie_ops.def"
#undef AIE_CONST
#undef AIE_DTYPE
#undef AIE_LOC
#undef AIE_OPCODE
#undef AIE_UNARY
#undef AIE_BINARY
#undef AIE_REDUCE
#undef AIE_SCATTER_REDUCTION
    if (!strcmp(name, "AIE_X_COUNT")) return AIE_X_COUNT;
    if (!strcmp(name, "AIE_U_COUNT")) return AIE_U_COUNT;
    if (!strcmp(name, "AIE_UF_VEC")) return AIE_UF_VEC;
    if (!strcmp(name, "AIE_UF_EPI")) return AIE_UF_EPI;
    return INT64_MIN;
}

/* field NULL: sizeof the struct; else offsetof the field (a tail included). */
static int64_t layout(const char *type, const char *field) {
#define AIE_STRUCT(s) if (!strcmp(type, "aie_" #s) && !field) return (int64_t)sizeof(aie_##s);
#define AIE_FIELD(s, t, f) \
    if (!strcmp(type, "aie_" #s) && field && !strcmp(field, #f)) return (int64_t)offsetof(aie_##s, f);
#define AIE_TAIL(s, f) AIE_FIELD(s, i64, f)
#define AIE_STRUCT_END(s)
#include "aie_ops.def"
#undef AIE_STRUCT
#undef AIE_FIELD
#undef AIE_TAIL
#undef AIE_STRUCT_END
    return -1;
}

int64_t aie_abi_sizeof(const char *type) { return layout(type, NULL); }
int64_t aie_abi_offsetof(const char *type, const char *field) { return field ? layout(type, field) : -1; }

int aie_abi_unary_flags(int64_t op) { return aie_unary_flags(op); }
