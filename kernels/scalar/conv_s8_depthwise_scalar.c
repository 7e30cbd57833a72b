/* int8 depthwise convolution rows, scalar: core/conv_s8_depthwise_body.h. */
#define DWS8_ROWS aie_dwconv_s8_rows_scalar
#include "conv_s8_depthwise_body.h"
