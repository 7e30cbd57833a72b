"""Shared helpers for lowering rules: opcodes, strides, broadcasting."""

from __future__ import annotations

import numpy as np

# Opcodes: mirror kernels/include/aie_exec.h.
X_COPY, X_FILL, X_UNARY, X_BINARY, X_CAST, X_WHERE, X_GATHER, X_REDUCE, X_SOFTMAX = 1, 2, 3, 4, 5, 6, 7, 8, 9
X_MATMUL, X_CONV, X_POOL, X_LAYERNORM, X_JUMP_IF_NOT, X_JUMP, X_PAD, X_RESIZE, X_LSTM = 10, 11, 12, 13, 14, 15, 16, 17, 18
X_ARGMAX, X_GATHER_ELEMENTS, X_CUMSUM, X_CONV_TRANSPOSE = 19, 20, 21, 22
X_CONV_PACK, X_GLOBAL_POOL, X_GEMM_PACKED = 23, 24, 25

# aie_activation (kernels/include/aie_gemm.h)
ACT_NONE, ACT_RELU, ACT_CLIP, ACT_GELU, ACT_GELU_TANH, ACT_SIGMOID, ACT_SILU, ACT_HARDSWISH = 0, 1, 2, 3, 4, 5, 6, 7
ACT_HARDSIGMOID, ACT_LEAKY_RELU, ACT_TANH = 8, 9, 10

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
