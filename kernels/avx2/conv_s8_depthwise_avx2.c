/* int8 depthwise convolution rows, avx2: core/conv_s8_depthwise_body.h. */
#define DWS8_ROWS aie_dwconv_s8_rows_avx2
#include "conv_s8_depthwise_body.h"
