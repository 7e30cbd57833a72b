"""Reductions over float32 arrays (C API: kernels/include/aie_reduce.h)."""

from __future__ import annotations

import ctypes

import numpy as np

from engine.kernels._lib import lib
from engine.kernels.eltwise import as_array, call, i64s, normalize_axis, ptr, require_contiguous, threads_arg

REDUCE_OPS = ("sum", "mean", "max", "min", "prod", "sum_square", "l1", "l2", "log_sum", "log_sum_exp")


def reduce(x, op: str, axes=None, keepdims: bool = False, threads=None) -> np.ndarray:
    """Reduce x over `axes` (None: all; an empty tuple: none) with one of REDUCE_OPS."""
    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduction {op!r}: expected one of {', '.join(REDUCE_OPS)}")
    require_contiguous(as_array(x, "x"), "x")
    if axes is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axes, (int, np.integer)):
        axes = (axes,)
    norm = sorted({normalize_axis(a, x.ndim, "axes") for a in axes}) if x.ndim else []
    if len(norm) != len(tuple(axes)) and x.ndim:
        raise ValueError(f"axes {tuple(axes)} name the same dim twice")
    mask = sum(1 << a for a in norm)
    kept = tuple(1 if d in norm else n for d, n in enumerate(x.shape)) if keepdims else \
        tuple(n for d, n in enumerate(x.shape) if d not in norm)
    y = np.empty(kept, np.float32)
    call(lib().aie_reduce, f"reduce {op}", REDUCE_OPS.index(op), x.ndim, i64s(x.shape), ptr(x),
         ctypes.c_uint32(mask), ptr(y), threads_arg(threads))
    return y


def _arg(op_code: int, name: str, x, axis: int, keepdims: bool, select_last_index: bool, threads) -> np.ndarray:
    require_contiguous(as_array(x, "x"), "x")
    if x.ndim == 0:
        raise ValueError(f"{name}: x is 0-d; there is no axis to search")
    ax = normalize_axis(axis, x.ndim)
    if x.shape[ax] == 0:
        raise ValueError(f"{name}: axis {axis} is empty, there is no index to return")
    shape = tuple(1 if d == ax else n for d, n in enumerate(x.shape)) if keepdims else x.shape[:ax] + x.shape[ax + 1:]
    y = np.empty(shape, np.int64)
    call(lib().aie_arg_reduce, name, op_code, x.ndim, i64s(x.shape), ptr(x), ax, int(bool(select_last_index)),
         ptr(y), threads_arg(threads))
    return y


def argmax(x, axis: int = 0, keepdims: bool = False, select_last_index: bool = False, threads=None):
    return _arg(REDUCE_OPS.index("max"), "argmax", x, axis, keepdims, select_last_index, threads)


def argmin(x, axis: int = 0, keepdims: bool = False, select_last_index: bool = False, threads=None):
    return _arg(REDUCE_OPS.index("min"), "argmin", x, axis, keepdims, select_last_index, threads)


__all__ = ["reduce", "REDUCE_OPS", "argmax", "argmin"]
