/* The uint8 QMATMUL_U8 and QADD_U8 loops, scalar: core/qmatmul_u8_body.h, core/qadd_u8_body.h. */
#define QMM_ROWS_TASK qmm_rows_scalar
#include "qmatmul_u8_body.h"
#define QADD_CHUNK_TASK qadd_chunk_scalar
#include "qadd_u8_body.h"

const aie_q8_kernels aie_q8_scalar = {"scalar", qmm_rows_scalar, qadd_chunk_scalar};
