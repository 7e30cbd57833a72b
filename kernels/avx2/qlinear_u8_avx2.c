/* The uint8 QMATMUL_U8 and QADD_U8 loops, avx2: core/qmatmul_u8_body.h, core/qadd_u8_body.h. */
#define QMM_ROWS_TASK qmm_rows_avx2
#include "qmatmul_u8_body.h"
#define QADD_CHUNK_TASK qadd_chunk_avx2
#include "qadd_u8_body.h"

const aie_q8_kernels aie_q8_avx2 = {"avx2", qmm_rows_avx2, qadd_chunk_avx2};
