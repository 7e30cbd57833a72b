/* AVX-512F instantiation of core/vmath_simd.h (16 float lanes). */
#include <immintrin.h>

#define VW 16
#define VM_TABLE aie_vm_avx512
#define V_FMA(a, b, c) ((vf)_mm512_fmadd_ps((a), (b), (c)))
#define V_ROUND(x) ((vf)_mm512_roundscale_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define V_FLOOR(x) ((vf)_mm512_roundscale_ps((x), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC))
#define V_CEIL(x) ((vf)_mm512_roundscale_ps((x), _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC))
#define V_SQRT(x) ((vf)_mm512_sqrt_ps(x))

#include "vmath_simd.h"
