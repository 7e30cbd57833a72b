/* Pooling, portable C: core/pool_body.h at one channel per vector (the path
 * without AVX2). Its reference is ref/pool_ref.c. */
#include "vf_scalar.h"

#define POOL_ROWS aie_pool_rows_scalar
#define GPOOL aie_gpool_scalar
#include "pool_body.h"
