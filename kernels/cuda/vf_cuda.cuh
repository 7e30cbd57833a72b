/*
 * The vf_* vocabulary at one lane for CUDA device code, so the GPU runs the
 * CPU's activation math (core/vmath_fn.h) step for step. Every operation is
 * an explicitly rounded intrinsic (__fmul_rn, __fadd_rn, ...): nvcc may not
 * contract them into FMAs, so each step rounds as on the CPU, and the build
 * keeps denormals (no -ftz, no --use_fast_math).
 */
#ifndef AIE_VF_CUDA_CUH
#define AIE_VF_CUDA_CUH

#include <stdint.h>

typedef float vf;
typedef bool vm;

#define VMF_FN static __device__ __forceinline__
#define VMF_NO_ROWS 1 /* the rows are CPU loops; the GPU applies one element per thread */

VMF_FN vf vf_zero(void) { return 0.0f; }
VMF_FN vf vf_set1(float x) { return x; }
VMF_FN vf vf_mul(vf a, vf b) { return __fmul_rn(a, b); }
VMF_FN vf vf_add(vf a, vf b) { return __fadd_rn(a, b); }
VMF_FN vf vf_sub(vf a, vf b) { return __fsub_rn(a, b); }
VMF_FN vf vf_div(vf a, vf b) { return __fdiv_rn(a, b); }
VMF_FN vf vf_fma_rn(vf a, vf b, vf c) { return __fmaf_rn(a, b, c); }
/* x86 min/max semantics (the second operand when either is NaN), as the CPU */
VMF_FN vf vf_min(vf a, vf b) { return a < b ? a : b; }
VMF_FN vf vf_max(vf a, vf b) { return a > b ? a : b; }
VMF_FN vf vf_neg(vf a) { return -a; }
VMF_FN vf vf_abs(vf a) { return fabsf(a); }
VMF_FN vf vf_copysign(vf mag, vf s) { return copysignf(mag, s); }
VMF_FN vf vf_round(vf a) { return rintf(a); } /* half to even */
VMF_FN vm vf_lt(vf a, vf b) { return a < b; }
VMF_FN vm vf_le(vf a, vf b) { return a <= b; }
VMF_FN vm vf_gt(vf a, vf b) { return a > b; }
VMF_FN vm vf_eq(vf a, vf b) { return a == b; }
VMF_FN vm vf_isnan(vf a) { return a != a; }
VMF_FN vm vm_and(vm a, vm b) { return a && b; }
VMF_FN vm vm_or(vm a, vm b) { return a || b; }
VMF_FN bool vm_any(vm m) { return m; }
VMF_FN vf vf_sel(vm m, vf a, vf b) { return m ? a : b; }
VMF_FN vf vf_scale2n(vf e, vf n) {
    int32_t ni = n != n ? 0 : (int32_t)n, n1 = ni >> 1, n2 = ni - n1;
    return __fmul_rn(__fmul_rn(e, __int_as_float((n1 + 127) << 23)), __int_as_float((n2 + 127) << 23));
}
VMF_FN vf vf_frexp(vf x, vf *e) {
    uint32_t b = __float_as_uint(x);
    *e = (float)((int32_t)(b >> 23) - 126);
    return __uint_as_float((b & 0x007fffffu) | 0x3f000000u);
}

#include "vmath_fn.h"

#endif /* AIE_VF_CUDA_CUH */
