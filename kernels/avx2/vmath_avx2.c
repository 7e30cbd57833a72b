/* AVX2 + FMA instantiation of core/vmath_simd.h (8 float lanes). */
#include <immintrin.h>

#define VW 8
#define VM_TABLE aie_vm_avx2
#define V_FMA(a, b, c) ((vf)_mm256_fmadd_ps((a), (b), (c)))
#define V_ROUND(x) ((vf)_mm256_round_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define V_FLOOR(x) ((vf)_mm256_round_ps((x), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC))
#define V_CEIL(x) ((vf)_mm256_round_ps((x), _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC))
#define V_SQRT(x) ((vf)_mm256_sqrt_ps(x))

#include "vmath_simd.h"
