/* Depthwise convolution, AVX-512: core/conv_depthwise_body.h at 16 channels
 * per vector. */
#include "vf_avx512.h"

#define DW_ROWS aie_dwconv_rows_avx512
#define DW_SPAN aie_dwconv_span_avx512
#include "conv_depthwise_body.h"
