/*
 * Winograd F(2x2, 3x3) input/output tile transforms for the portable scalar build (the
 * arithmetic is in core/winograd_body.h, once for every ISA).
 */
#include "vf_scalar.h"

#define WG_NAME winograd_scalar
#define WG_TABLE aie_winograd_scalar

#include "winograd_body.h"
