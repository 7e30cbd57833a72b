/*
 * Direct NHWC convolution micro-kernels, portable C: conv_direct_scalar_wide
 * (4 pixels x 16 channels: the GEMM's scalar tile and packed B panels),
 * _narrow (8 x 8) and half heights. The reference the SIMD
 * variants are tested against and the path without AVX2. Plain float
 * arithmetic, no contraction (ISO C mode).
 */
#include "act_scalar.h"

typedef float vf;
#define VL 1

static inline vf vf_zero(void) { return 0.0f; }
static inline vf vf_set1(float x) { return x; }
static inline vf vf_load(const float *p) { return *p; }
static inline vf vf_loadn(const float *p, int n) { return n > 0 ? *p : 0.0f; }
static inline void vf_store(float *p, vf v) { *p = v; }
static inline void vf_storen(float *p, vf v, int n) {
    if (n > 0) *p = v;
}
static inline vf vf_fma(vf a, vf b, vf c) { return a * b + c; }
static inline vf vf_add(vf a, vf b) { return a + b; }
/* x86 min/max semantics (the second operand on NaN), as the GEMM's scalar file. */
static inline vf vf_min(vf a, vf b) { return a < b ? a : b; }
static inline vf vf_max(vf a, vf b) { return a > b ? a : b; }
#define act_row aie_act_row_s

#define CD_MR 4
#define CD_NV 16
#define CD_NAME conv_direct_scalar
#define CD_TABLE aie_conv_direct_scalar

#include "conv_direct_body.h"
