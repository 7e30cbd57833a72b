/*
 * Broadcast iteration shared by the binary, compare and where drivers
 * (internal). An output of `shape` (contiguous) is walked row by row: the
 * innermost dim is a row, and each operand's start offset for a row comes
 * from an odometer over the outer dims. Before that the shape is
 * simplified: size-1 dims are dropped and neighbouring dims are merged when
 * every operand's strides allow it, so "same shape" collapses to one row and
 * a bias add to [rows, cols] with a 0 row stride.
 */
#ifndef AIE_ELTWISE_ND_H
#define AIE_ELTWISE_ND_H

#include <stdint.h>

#include "aie_eltwise.h"

#define AIE_ND_MAX_OPS 3

typedef struct {
    int ndim;        /* >= 1 after simplification */
    int nops;
    int64_t shape[AIE_MAX_DIMS];
    int64_t st[AIE_ND_MAX_OPS][AIE_MAX_DIMS];
    int64_t rows;    /* product of shape[0 .. ndim-2] */
    int64_t n;       /* shape[ndim-1] */
    int64_t numel;
} aie_nd;

/* Validate and simplify. Returns AIE_OK or AIE_EINVAL (with the reason). */
int aie_nd_init(aie_nd *nd, const char *what, int ndim, const int64_t *shape, int nops,
                const int64_t *const *strides);

/* Odometer over the rows of an aie_nd. */
typedef struct {
    int64_t idx[AIE_MAX_DIMS];
    int64_t off[AIE_ND_MAX_OPS];
} aie_nd_pos;

void aie_nd_seek(const aie_nd *nd, aie_nd_pos *p, int64_t row);
void aie_nd_next_row(const aie_nd *nd, aie_nd_pos *p);

#endif /* AIE_ELTWISE_ND_H */
