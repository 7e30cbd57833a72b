/*
 * Winograd F(2x2, 3x3) input/output tile transforms for AVX2 (the
 * arithmetic is in core/winograd_body.h, once for every ISA).
 */
#include "vf_avx2.h"

#define WG_NAME winograd_avx2
#define WG_TABLE aie_winograd_avx2

#include "winograd_body.h"
