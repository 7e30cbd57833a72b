/* Pooling, AVX2: core/pool_body.h at 8 channels per vector. */
#include "vf_avx2.h"

#define POOL_ROWS aie_pool_rows_avx2
#define GPOOL aie_gpool_avx2
#include "pool_body.h"
