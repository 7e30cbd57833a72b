/*
 * The op vocabulary in C: enums, limits and boundary structs, expanded from
 * aie_ops.def (the one place they are written; engine/kernels/abi.py is
 * generated from the same file).
 *   AIE_DT_*      dtype codes (onnx.TensorProto)     aie_dtype_size()
 *   AIE_MAX_DIMS  the most dims a kernel or step takes
 *   AIE_LOC_*     where a plan tensor lives
 *   AIE_X_*       executor opcodes                   aie_exec.h
 *   AIE_U_*       unary ops = epilogue activations   AIE_UF_* flags
 *   AIE_B_*, AIE_R_*, AIE_SR_*  binary, reduction and scatter-reduction codes
 *   aie_exec_plan, aie_step_record, aie_tensor_record, aie_epilogue,
 *   aie_conv2d_params, aie_pool2d_params, aie_*_step structs
 */
#ifndef AIE_OPS_H
#define AIE_OPS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AIE_CONST(NAME, v) enum { AIE_##NAME = v };
#include "aie_ops.def"
#undef AIE_CONST

typedef enum {
#define AIE_DTYPE(v, NAME, bytes) AIE_DT_##NAME = v,
#include "aie_ops.def"
#undef AIE_DTYPE
} aie_dtype;

enum {
#define AIE_LOC(v, NAME) AIE_LOC_##NAME = v,
#include "aie_ops.def"
#undef AIE_LOC
};

/* AIE_X_COUNT: one past the largest opcode (the tables' size). */
enum {
#define AIE_OPCODE(v, NAME, name, fn, params) AIE_X_##NAME = v,
#include "aie_ops.def"
#undef AIE_OPCODE
    AIE_X_COUNT
};

/* Unary flags (aie_ops.def). */
enum { AIE_UF_VEC = 1, AIE_UF_EPI = 2 };

typedef enum {
#define AIE_UNARY(v, NAME, name, flags) AIE_U_##NAME = v,
#include "aie_ops.def"
#undef AIE_UNARY
    AIE_U_COUNT
} aie_unary_op;

/* The AIE_UF_* flags of a unary op; 0 for an unknown code. */
static inline int aie_unary_flags(int64_t op) {
    switch (op) {
#define AIE_UNARY(v, NAME, name, flags) case v: return (flags);
#include "aie_ops.def"
#undef AIE_UNARY
    default: return 0;
    }
}

enum {
#define AIE_BINARY(v, NAME, name) AIE_B_##NAME = v,
#include "aie_ops.def"
#undef AIE_BINARY
    AIE_B_COUNT
};

enum {
#define AIE_REDUCE(v, NAME, name) AIE_R_##NAME = v,
#include "aie_ops.def"
#undef AIE_REDUCE
    AIE_R_COUNT
};

enum {
#define AIE_SCATTER_REDUCTION(v, NAME, name) AIE_SR_##NAME = v,
#include "aie_ops.def"
#undef AIE_SCATTER_REDUCTION
    AIE_SR_COUNT
};

#define AIE_FT_i64 int64_t
#define AIE_FT_i32 int32_t
#define AIE_FT_f32 float
#define AIE_FT_f32p const float *
#define AIE_FT_i32p const int32_t *
#define AIE_FT_i64p const int64_t *
#define AIE_FT_epilogue_p const aie_epilogue *
#define AIE_FT_f64p const double *
#define AIE_FT_u8p const uint8_t *
#define AIE_FT_conv2d_params aie_conv2d_params
#define AIE_FT_pool2d_params aie_pool2d_params
#define AIE_STRUCT(name) typedef struct {
#define AIE_FIELD(name, type, field) AIE_FT_##type field;
/* C++ (the CUDA sources) has no flexible array members and reads no step
 * parameters: the tail is C only. */
#ifdef __cplusplus
#define AIE_TAIL(name, field)
#else
#define AIE_TAIL(name, field) int64_t field[];
#endif
#define AIE_STRUCT_END(name) } aie_##name;
#include "aie_ops.def"
#undef AIE_STRUCT
#undef AIE_FIELD
#undef AIE_TAIL
#undef AIE_STRUCT_END

/* The vocabulary as the compiler saw it, by name (kernels/exec/abi.c), for
 * the test that the generated Python module agrees: an enum constant by its
 * C name ("AIE_X_MATMUL"; INT64_MIN when unknown), sizeof and offsetof of an
 * aie_ops.def struct ("aie_matmul_step"; -1 when unknown), a unary op's
 * AIE_UF_* flags. */
int64_t aie_abi_value(const char *name);
int64_t aie_abi_sizeof(const char *type);
int64_t aie_abi_offsetof(const char *type, const char *field);
int aie_abi_unary_flags(int64_t op);

#ifdef __cplusplus
}
#endif
#endif /* AIE_OPS_H */
