"""Data movement over numpy arrays of any 1/2/4/8-byte dtype: transpose,
expand, tile, gather, concat, split, slice, pad, and float32 2-D resize
(C API: kernels/include/aie_layout.h). Semantics follow ONNX (and numpy
where they agree)."""

from __future__ import annotations

import builtins
import ctypes
import math

import numpy as np

from engine.kernels._lib import lib
from engine.kernels.eltwise import MAX_DIMS, call, i64s, normalize_axis, ptr, require_contiguous, threads_arg


def _array(x, name: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {type(x).__name__}")
    if x.itemsize not in (1, 2, 4, 8):
        raise ValueError(f"{name} has dtype {x.dtype} ({x.itemsize} bytes); 1, 2, 4 or 8-byte elements only")
    if x.ndim > MAX_DIMS:
        raise ValueError(f"{name} has {x.ndim} dims, at most {MAX_DIMS} are supported")
    return x


def _es(x: np.ndarray) -> ctypes.c_size_t:
    return ctypes.c_size_t(x.itemsize)


def contiguous(x, threads=None) -> np.ndarray:
    """A C-contiguous copy of any view (negative and zero strides included)."""
    _array(x, "x")
    y = np.empty(x.shape, x.dtype)
    st = [s // x.itemsize for s in x.strides]
    call(lib().aie_copy_strided, "contiguous", _es(x), x.ndim, i64s(x.shape), ptr(x), i64s(st), ptr(y),
         threads_arg(threads))
    return y


def transpose(x, perm=None, threads=None) -> np.ndarray:
    require_contiguous(_array(x, "x"), "x")
    perm = tuple(reversed(range(x.ndim))) if perm is None else tuple(int(p) for p in perm)
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(f"transpose: perm {perm} is not a permutation of 0..{x.ndim - 1}")
    y = np.empty(tuple(x.shape[p] for p in perm), x.dtype)
    call(lib().aie_transpose, "transpose", _es(x), x.ndim, i64s(x.shape), i64s(perm), ptr(x), ptr(y),
         threads_arg(threads))
    return y


def expand(x, shape, threads=None) -> np.ndarray:
    """ONNX Expand: broadcast x against `shape` (the result may be larger than `shape`)."""
    require_contiguous(_array(x, "x"), "x")
    try:
        out = np.broadcast_shapes(x.shape, tuple(int(s) for s in shape))
    except ValueError:
        raise ValueError(f"expand: shape {tuple(shape)} is not broadcast-compatible with {x.shape}") from None
    if len(out) > MAX_DIMS:
        raise ValueError(f"expand: result has {len(out)} dims, at most {MAX_DIMS}")
    y = np.empty(out, x.dtype)
    call(lib().aie_expand, "expand", _es(x), len(out), i64s(out), x.ndim, i64s(x.shape), ptr(x), ptr(y),
         threads_arg(threads))
    return y


def tile(x, reps, threads=None) -> np.ndarray:
    require_contiguous(_array(x, "x"), "x")
    reps = tuple(int(r) for r in reps)
    if len(reps) != x.ndim:
        raise ValueError(f"tile: {len(reps)} reps for a {x.ndim}-d array (ONNX Tile needs one per dim)")
    if any(r < 0 for r in reps):
        raise ValueError(f"tile: reps {reps} must be >= 0")
    y = np.empty(tuple(n * r for n, r in zip(x.shape, reps)), x.dtype)
    call(lib().aie_tile, "tile", _es(x), x.ndim, i64s(x.shape), i64s(reps), ptr(x), ptr(y), threads_arg(threads))
    return y


def gather(x, indices, axis: int = 0, threads=None) -> np.ndarray:
    """ONNX Gather: x.take(indices, axis) with negative indices counting from
    the end; an out-of-range index raises ValueError naming it."""
    require_contiguous(_array(x, "x"), "x")
    if x.ndim == 0:
        raise ValueError("gather: x is 0-d")
    idx = np.asarray(indices)
    if idx.dtype not in (np.int64, np.int32):
        raise ValueError(f"gather: indices have dtype {idx.dtype}, expected int64 or int32")
    idx = np.array(idx, dtype=np.int64)  # a C-contiguous copy that keeps 0-d
    ax = normalize_axis(axis, x.ndim)
    out = x.shape[:ax] + idx.shape + x.shape[ax + 1:]
    if len(out) > MAX_DIMS:
        raise ValueError(f"gather: result has {len(out)} dims, at most {MAX_DIMS}")
    y = np.empty(out, x.dtype)
    call(lib().aie_gather, "gather", _es(x), ptr(x), ctypes.c_int64(math.prod(x.shape[:ax])),
         ctypes.c_int64(x.shape[ax]), ctypes.c_int64(math.prod(x.shape[ax + 1:])),
         ctypes.cast(ptr(idx), ctypes.POINTER(ctypes.c_int64)), ctypes.c_int64(idx.size), ptr(y),
         threads_arg(threads))
    return y


def concat(xs, axis: int = 0, threads=None) -> np.ndarray:
    xs = [require_contiguous(_array(x, f"xs[{i}]"), f"xs[{i}]") for i, x in enumerate(xs)]
    if not xs:
        raise ValueError("concat: no inputs")
    ref = xs[0]
    if ref.ndim == 0:
        raise ValueError("concat: inputs are 0-d")
    ax = normalize_axis(axis, ref.ndim)
    for i, x in enumerate(xs):
        if x.dtype != ref.dtype or x.ndim != ref.ndim or x.shape[:ax] + x.shape[ax + 1:] != ref.shape[:ax] + ref.shape[ax + 1:]:
            raise ValueError(f"concat: xs[{i}] {x.dtype}{x.shape} does not match xs[0] {ref.dtype}{ref.shape} "
                             f"outside axis {ax}")
    lens = [x.shape[ax] for x in xs]
    y = np.empty(ref.shape[:ax] + (sum(lens),) + ref.shape[ax + 1:], ref.dtype)
    ptrs = (ctypes.c_void_p * len(xs))(*[x.ctypes.data for x in xs])
    call(lib().aie_concat, "concat", _es(ref), len(xs), ptrs, i64s(lens), ctypes.c_int64(math.prod(ref.shape[:ax])),
         ctypes.c_int64(math.prod(ref.shape[ax + 1:])), ptr(y), threads_arg(threads))
    return y


def split(x, sizes, axis: int = 0, threads=None) -> list[np.ndarray]:
    require_contiguous(_array(x, "x"), "x")
    if x.ndim == 0:
        raise ValueError("split: x is 0-d")
    ax = normalize_axis(axis, x.ndim)
    sizes = [int(s) for s in sizes]
    if any(s < 0 for s in sizes) or sum(sizes) != x.shape[ax]:
        raise ValueError(f"split: sizes {sizes} must be >= 0 and sum to dim {ax} = {x.shape[ax]}")
    ys = [np.empty(x.shape[:ax] + (s,) + x.shape[ax + 1:], x.dtype) for s in sizes]
    ptrs = (ctypes.c_void_p * max(len(ys), 1))(*[y.ctypes.data for y in ys])
    call(lib().aie_split, "split", _es(x), ptr(x), ctypes.c_int64(math.prod(x.shape[:ax])),
         ctypes.c_int64(math.prod(x.shape[ax + 1:])), len(ys), i64s(sizes), ptrs, threads_arg(threads))
    return ys


def slice(x, starts, ends, axes=None, steps=None, threads=None) -> np.ndarray:  # noqa: A001
    """ONNX Slice (starts/ends clamped as ONNX and Python do; negative steps walk backwards)."""
    require_contiguous(_array(x, "x"), "x")
    starts, ends = list(starts), list(ends)
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(starts) if steps is None else list(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError("slice: starts, ends, axes and steps must have the same length")
    first, step, count = [0] * x.ndim, [1] * x.ndim, list(x.shape)
    seen = set()
    for s, e, a, k in zip(starts, ends, axes, steps):
        d = normalize_axis(int(a), x.ndim, "axes")
        if d in seen:
            raise ValueError(f"slice: axis {a} given twice")
        seen.add(d)
        if int(k) == 0:
            raise ValueError(f"slice: step of axis {a} is 0")
        r = range(*builtins.slice(int(s), int(e), int(k)).indices(x.shape[d]))
        first[d], step[d], count[d] = (r.start if len(r) else 0), int(k), len(r)
    y = np.empty(tuple(count), x.dtype)
    call(lib().aie_slice, "slice", _es(x), x.ndim, i64s(x.shape), ptr(x), i64s(first), i64s(step), i64s(count),
         ptr(y), threads_arg(threads))
    return y


_PAD_MODES = {"constant": 0, "reflect": 1, "edge": 2, "wrap": 3}


def pad(x, pads, mode: str = "constant", value=0, threads=None) -> np.ndarray:
    """ONNX Pad: pads = [begin_0, ..., begin_n-1, end_0, ..., end_n-1];
    negative pads crop."""
    require_contiguous(_array(x, "x"), "x")
    if mode not in _PAD_MODES:
        raise ValueError(f"pad: mode {mode!r} unknown (expected {', '.join(_PAD_MODES)})")
    pads = [int(p) for p in pads]
    if len(pads) != 2 * x.ndim:
        raise ValueError(f"pad: {len(pads)} pads for a {x.ndim}-d array (need {2 * x.ndim})")
    if any(p < 0 for p in pads):
        b, e = pads[:x.ndim], pads[x.ndim:]
        x = slice(x, [max(-p, 0) for p in b], [n - max(-p, 0) for n, p in zip(x.shape, e)], threads=threads)
        pads = [max(p, 0) for p in pads]
    val = np.asarray(value, dtype=x.dtype).reshape(1)
    out = tuple(n + pads[d] + pads[x.ndim + d] for d, n in enumerate(x.shape))
    y = np.empty(out, x.dtype)
    call(lib().aie_pad, "pad", _es(x), x.ndim, i64s(x.shape), ptr(x), i64s(pads), _PAD_MODES[mode], ptr(val), ptr(y),
         threads_arg(threads))
    return y


_COORD = {"half_pixel": 0, "asymmetric": 1, "align_corners": 2, "pytorch_half_pixel": 3}
_NEAREST = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3}


def resize(x, scales=None, sizes=None, mode: str = "nearest", coordinate_transformation_mode: str = "half_pixel",
           nearest_mode: str = "round_prefer_floor", layout: str = "NCHW", threads=None) -> np.ndarray:
    """ONNX Resize of the two spatial dims of a 4-d float32 NCHW or NHWC
    array. scales/sizes have 4 entries in the array's own layout order; the
    batch and channel entries must be 1 (scales) or unchanged (sizes)."""
    require_contiguous(_array(x, "x"), "x")
    if x.dtype != np.float32 or x.ndim != 4:
        raise ValueError(f"resize: x must be a 4-d float32 array, got {x.dtype}{x.shape}")
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"resize: layout {layout!r} (expected 'NCHW' or 'NHWC')")
    if mode not in ("nearest", "linear"):
        raise ValueError(f"resize: mode {mode!r} not supported (expected 'nearest' or 'linear')")
    if coordinate_transformation_mode not in _COORD:
        raise ValueError(f"resize: coordinate_transformation_mode {coordinate_transformation_mode!r} not supported "
                         f"(expected one of {', '.join(_COORD)})")
    if nearest_mode not in _NEAREST:
        raise ValueError(f"resize: nearest_mode {nearest_mode!r} unknown (expected one of {', '.join(_NEAREST)})")
    sp = (2, 3) if layout == "NCHW" else (1, 2)
    nc = (0, 1) if layout == "NCHW" else (0, 3)
    if (scales is None) == (sizes is None):
        raise ValueError("resize: give exactly one of scales and sizes")
    if scales is not None:
        sc = np.asarray(scales, dtype=np.float32)
        if sc.shape != (4,) or any(sc[d] != 1 for d in nc) or not np.all(sc > 0):
            raise ValueError(f"resize: scales {list(sc)} must have 4 positive entries with 1 on the batch and channel dims")
        out = [int(math.floor(x.shape[d] * float(sc[d]))) for d in range(4)]
        sh, sw = float(sc[sp[0]]), float(sc[sp[1]])
    else:
        out = [int(s) for s in sizes]
        if len(out) != 4 or any(out[d] != x.shape[d] for d in nc) or any(s < 0 for s in out):
            raise ValueError(f"resize: sizes {out} must have 4 entries keeping the batch and channel dims {x.shape}")
        # in double, as the ONNX reference computes them
        sh = out[sp[0]] / x.shape[sp[0]] if x.shape[sp[0]] else 1.0
        sw = out[sp[1]] / x.shape[sp[1]] if x.shape[sp[1]] else 1.0
    y = np.empty(tuple(out), np.float32)
    n, c = x.shape[nc[0]], x.shape[nc[1]]
    call(lib().aie_resize2d, "resize", ptr(x), ptr(y), 0 if layout == "NCHW" else 1, ctypes.c_int64(n),
         ctypes.c_int64(c), ctypes.c_int64(x.shape[sp[0]]), ctypes.c_int64(x.shape[sp[1]]),
         ctypes.c_int64(out[sp[0]]), ctypes.c_int64(out[sp[1]]), ctypes.c_double(sh), ctypes.c_double(sw),
         0 if mode == "nearest" else 1, _COORD[coordinate_transformation_mode], _NEAREST[nearest_mode],
         threads_arg(threads))
    return y


__all__ = ["contiguous", "transpose", "expand", "tile", "gather", "concat", "split", "slice", "pad", "resize"]
