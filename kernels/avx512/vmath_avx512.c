/* AVX-512F instantiation of core/vmath_simd.h (16 float lanes). */
#include "vf_avx512.h"

#define VM_TABLE aie_vm_avx512

#include "vmath_simd.h"
