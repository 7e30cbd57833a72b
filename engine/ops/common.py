"""Shared helpers for lowering rules: dtype sets, strides, broadcasting."""

from __future__ import annotations

import numpy as np

FLOAT = (np.float32,)
FLOATS = (np.float32, np.float64)
NUMERIC = (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
INTS = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
ALL = NUMERIC + (np.bool_, np.float16)


def contiguous_strides(shape) -> list[int]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= int(d)
    return strides[::-1]


def broadcast_shape(*shapes) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast") from None


def broadcast_strides(shape, out_shape) -> list[int]:
    """Element strides reading `shape` as if broadcast to `out_shape`."""
    pad = len(out_shape) - len(shape)
    full = [1] * pad + list(shape)
    st = contiguous_strides(full)
    return [0 if full[d] == 1 and out_shape[d] != 1 else st[d] for d in range(len(out_shape))]


def collapse(shape, *strides_list):
    """Drop size-1 dims and merge neighbours that are contiguous for every
    operand (output contiguous), so the executor walks long inner rows."""
    dims = [(int(n), [int(s[d]) for s in strides_list]) for d, n in enumerate(shape) if int(n) != 1]
    if not dims:
        return [1], [[0] for _ in strides_list]
    merged = [dims[0]]
    for n, st in dims[1:]:
        pn, pst = merged[-1]
        if all(ps == s * n for ps, s in zip(pst, st)):
            merged[-1] = (pn * n, st)
        else:
            merged.append((n, st))
    shape_out = [n for n, _ in merged]
    return shape_out, [[st[k] for _, st in merged] for k in range(len(strides_list))]


def normalize_axis(axis: int, rank: int, ctx=None) -> int:
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < max(rank, 1):
        if ctx is not None:
            raise ctx.unsupported(f"axis {axis} out of range for rank {rank}")
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return a
