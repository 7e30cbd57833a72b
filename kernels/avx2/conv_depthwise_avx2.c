/* Depthwise convolution, AVX2 + FMA: core/conv_depthwise_body.h at 8
 * channels per vector. */
#include "vf_avx2.h"

#define DW_ROWS aie_dwconv_rows_avx2
#define DW_SPAN aie_dwconv_span_avx2
#include "conv_depthwise_body.h"
