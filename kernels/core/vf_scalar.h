/*
 * The vector vocabulary (vf_*) of the portable C micro-kernels, shared by the
 * GEMM and the direct convolution so both speak one set of primitives.
 * Include only from objects compiled with the matching ISA flags.
 */
#ifndef AIE_VF_SCALAR_H
#define AIE_VF_SCALAR_H

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef float vf;
typedef int vm; /* lane mask: a comparison's truth */
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

/* The rest serves vmath_fn.h. Every op rounds once as IEEE says, so the
 * math gives the same bits here as in the vector lanes. */
static inline vf vf_div(vf a, vf b) { return a / b; }
/* vf_fma may round twice here (no FMA in the baseline ISA: the GEMM loop
 * keeps its speed); vf_fma_rn always rounds once (libm fmaf), as the math's
 * exact splits and its agreement with the vector paths need. */
static inline vf vf_fma_rn(vf a, vf b, vf c) { return __builtin_fmaf(a, b, c); }
static inline vf vf_neg(vf a) { return -a; }
static inline vf vf_abs(vf a) { return fabsf(a); }
static inline vf vf_copysign(vf mag, vf s) { return copysignf(mag, s); }
static inline vf vf_sqrt(vf a) { return sqrtf(a); }
static inline vf vf_floor(vf a) { return floorf(a); }
static inline vf vf_ceil(vf a) { return ceilf(a); }
static inline vf vf_round(vf a) { return nearbyintf(a); } /* half to even */
static inline vm vf_lt(vf a, vf b) { return a < b; }
static inline vm vf_le(vf a, vf b) { return a <= b; }
static inline vm vf_gt(vf a, vf b) { return a > b; }
static inline vm vf_eq(vf a, vf b) { return a == b; }
static inline vm vf_isnan(vf a) { return a != a; }
static inline vm vm_and(vm a, vm b) { return a & b; }
static inline vm vm_or(vm a, vm b) { return a | b; }
static inline int vm_any(vm m) { return m != 0; }
static inline vf vf_sel(vm m, vf a, vf b) { return m ? a : b; }
/* e * 2^n for integral n in [-252, 254] (NaN n counts as 0), in two factors
 * so results down to the smallest denormal come out right. */
static inline vf vf_scale2n(vf e, vf n) {
    int32_t ni = n != n ? 0 : (int32_t)n, n1 = ni >> 1, n2 = ni - n1;
    uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &b1, 4);
    memcpy(&s2, &b2, 4);
    return e * s1 * s2;
}
/* x = m 2^(e + 1) with m in [0.5, 1) for positive normal x: returns m, *e
 * gets the unbiased exponent minus one (bits >> 23 - 126). */
static inline vf vf_frexp(vf x, vf *e) {
    uint32_t b;
    memcpy(&b, &x, 4);
    *e = (float)((int32_t)(b >> 23) - 126);
    b = (b & 0x007fffffu) | 0x3f000000u;
    memcpy(&x, &b, 4);
    return x;
}

#include "vmath_fn.h"

#endif
