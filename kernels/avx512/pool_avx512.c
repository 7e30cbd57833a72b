/* Pooling, AVX-512: core/pool_body.h at 16 channels per vector. */
#include "vf_avx512.h"

#define POOL_ROWS aie_pool_rows_avx512
#define GPOOL aie_gpool_avx512
#include "pool_body.h"
