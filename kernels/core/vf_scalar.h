/*
 * The vector vocabulary (vf_*) of the portable C micro-kernels, shared by the
 * GEMM and the direct convolution so both speak one set of primitives.
 * Include only from objects compiled with the matching ISA flags.
 */
#ifndef AIE_VF_SCALAR_H
#define AIE_VF_SCALAR_H

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
static inline vf vf_mul(vf a, vf b) { return a * b; }
static inline vf vf_add(vf a, vf b) { return a + b; }
static inline vf vf_sub(vf a, vf b) { return a - b; }
/* x86 min/max semantics (the second operand when either is NaN), in
 * the scalar file too, so every path clamps NaN the same way. */
static inline vf vf_min(vf a, vf b) { return a < b ? a : b; }
static inline vf vf_max(vf a, vf b) { return a > b ? a : b; }
static inline float vf_hsum(vf v) { return v; }
#define act_row aie_act_row_s

#endif
