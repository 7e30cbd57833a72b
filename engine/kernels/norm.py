"""Softmax, log-softmax, layer and RMS normalisation (kernels/include/aie_norm.h)."""

from __future__ import annotations

import ctypes
import math

import numpy as np

from engine.kernels._lib import lib
from engine.kernels.eltwise import as_array, call, normalize_axis, ptr, require_contiguous, threads_arg


def _softmax(x, axis: int, log: bool, threads) -> np.ndarray:
    require_contiguous(as_array(x, "x"), "x")
    if x.ndim == 0:
        raise ValueError("softmax: x is 0-d; it needs an axis")
    ax = normalize_axis(axis, x.ndim)
    outer, inner = math.prod(x.shape[:ax]), math.prod(x.shape[ax + 1:])
    y = np.empty_like(x)
    call(lib().aie_softmax, "log_softmax" if log else "softmax", ptr(x), ptr(y), ctypes.c_int64(outer),
         ctypes.c_int64(x.shape[ax]), ctypes.c_int64(inner), int(log), threads_arg(threads))
    return y


def softmax(x, axis: int = -1, threads=None) -> np.ndarray:
    return _softmax(x, axis, False, threads)


def log_softmax(x, axis: int = -1, threads=None) -> np.ndarray:
    return _softmax(x, axis, True, threads)


def _param(p, name: str, shape: tuple[int, ...]) -> np.ndarray:
    as_array(p, name)
    try:
        return np.ascontiguousarray(np.broadcast_to(p, shape))
    except ValueError:
        raise ValueError(f"{name} of shape {p.shape} does not broadcast to the normalised shape {shape}") from None


def _rows_cols(x, axis: int) -> tuple[int, int, int]:
    require_contiguous(as_array(x, "x"), "x")
    if x.ndim == 0:
        raise ValueError("x is 0-d; normalisation needs at least one dim")
    ax = normalize_axis(axis, x.ndim)
    rows, cols = math.prod(x.shape[:ax]), math.prod(x.shape[ax:])
    if cols == 0 and rows > 0:
        raise ValueError(f"the normalised dims {x.shape[ax:]} are empty (the mean of nothing)")
    return ax, rows, cols


def layer_norm(x, scale, bias=None, axis: int = -1, eps: float = 1e-5, return_stats: bool = False, threads=None):
    """ONNX LayerNormalization: normalise over dims [axis, ndim). With
    return_stats, also returns mean and inv_std_dev shaped x.shape[:axis] + (1,)*k."""
    ax, rows, cols = _rows_cols(x, axis)
    nshape = x.shape[ax:]
    s = _param(scale, "scale", nshape)
    b = None if bias is None else _param(bias, "bias", nshape)
    y = np.empty_like(x)
    stat_shape = x.shape[:ax] + (1,) * (x.ndim - ax)
    mean = np.empty(stat_shape, np.float32) if return_stats else None
    inv = np.empty(stat_shape, np.float32) if return_stats else None
    call(lib().aie_layer_norm, "layer_norm", ptr(x), ptr(s), ptr(b), ptr(y), ctypes.c_int64(rows),
         ctypes.c_int64(cols), ctypes.c_float(eps), ptr(mean), ptr(inv), threads_arg(threads))
    return (y, mean, inv) if return_stats else y


def rms_norm(x, scale, axis: int = -1, eps: float = 1e-6, threads=None) -> np.ndarray:
    """y = x / sqrt(mean(x^2 over dims [axis, ndim)) + eps) * scale."""
    ax, rows, cols = _rows_cols(x, axis)
    s = _param(scale, "scale", x.shape[ax:])
    y = np.empty_like(x)
    call(lib().aie_rms_norm, "rms_norm", ptr(x), ptr(s), ptr(y), ctypes.c_int64(rows), ctypes.c_int64(cols),
         ctypes.c_float(eps), threads_arg(threads))
    return y


__all__ = ["softmax", "log_softmax", "layer_norm", "rms_norm"]
