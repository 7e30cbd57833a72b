/* AVX2 + FMA instantiation of core/vmath_simd.h (8 float lanes). */
#include "vf_avx2.h"

#define VM_TABLE aie_vm_avx2

#include "vmath_simd.h"
