/* Depthwise convolution, portable C: core/conv_depthwise_body.h at one
 * channel per vector (the path without AVX2). Its reference is
 * ref/conv_ref.c. */
#include "vf_scalar.h"

#define DW_ROWS aie_dwconv_rows_scalar
#define DW_SPAN aie_dwconv_span_scalar
#include "conv_depthwise_body.h"
