"""Elementwise kernels over numpy arrays: unary math, broadcasting binary ops,
comparisons, where and casts (C API: kernels/include/aie_eltwise.h).

Binary ops, comparisons and where broadcast like numpy and read their inputs
through their strides (views, transposes and negative strides run without a
copy); unary ops and casts take C-contiguous arrays. Bad input raises
ValueError naming the argument, the problem and what was expected.
"""

from __future__ import annotations

import ctypes

import numpy as np

from engine.errors import KernelError
from engine.kernels._lib import lib
from engine.kernels.abi import DType, MAX_DIMS, UNARY_NAMES, UNARY_VECTOR

# aie_binary/aie_compare/aie_cast dtypes: onnx.TensorProto codes
DTYPE_CODES = {np.dtype(np.float32): DType.F32, np.dtype(np.uint8): DType.U8, np.dtype(np.int32): DType.I32,
               np.dtype(np.int64): DType.I64, np.dtype(np.bool_): DType.BOOL}

# name -> code of the unary ops aie_unary implements (the float32 vector library)
_UNARY = {UNARY_NAMES[u]: u for u in sorted(UNARY_VECTOR)}
_BINARY = {name: i for i, name in enumerate((
    "add", "sub", "mul", "div", "pow", "max", "min", "and", "or", "xor"))}
_COMPARE = {name: i for i, name in enumerate(("equal", "not_equal", "less", "less_equal",
                                              "greater", "greater_equal"))}

_I64P = ctypes.POINTER(ctypes.c_int64)


def threads_arg(threads: int | None) -> int:
    """nthreads for the C call: None means the pool's size."""
    if threads is None:
        return 0
    if not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    return int(threads)


def ptr(a: np.ndarray | None) -> ctypes.c_void_p:
    return ctypes.c_void_p(None if a is None else a.ctypes.data)


def i64s(values) -> ctypes.Array:
    vals = [int(v) for v in values]
    return (ctypes.c_int64 * max(len(vals), 1))(*vals)


def call(fn, what: str, *args) -> None:
    """Call a kernel; a C-side rejection becomes ValueError (bad argument) or KernelError."""
    rc = fn(*args)
    if rc != 0:
        msg = f"{what}: {lib().aie_last_error().decode()}"
        raise ValueError(msg) if rc == -1 else KernelError(msg)


def as_array(x, name: str, dtypes=(np.float32,)) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {type(x).__name__}")
    if x.dtype not in [np.dtype(d) for d in dtypes]:
        want = ", ".join(np.dtype(d).name for d in dtypes)
        raise ValueError(f"{name} has dtype {x.dtype}, expected {want}")
    if x.ndim > MAX_DIMS:
        raise ValueError(f"{name} has {x.ndim} dims, at most {MAX_DIMS} are supported")
    return x


def require_contiguous(x: np.ndarray, name: str) -> np.ndarray:
    if not x.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (pass np.ascontiguousarray({name}))")
    return x


def normalize_axis(axis: int, ndim: int, name: str = "axis") -> int:
    if not isinstance(axis, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {axis!r}")
    if not -ndim <= axis < max(ndim, 1):
        raise ValueError(f"{name} {axis} is out of range for a {ndim}-d array")
    return int(axis) % max(ndim, 1)


def broadcast_strides(a: np.ndarray, shape: tuple[int, ...]) -> list[int]:
    """Element strides of `a` read as `shape` (right-aligned; 0 where broadcast)."""
    pad = len(shape) - a.ndim
    out = [0] * pad
    for d, (n, st) in enumerate(zip(a.shape, a.strides)):
        if st % a.itemsize:
            raise ValueError("array strides are not a multiple of the element size")
        out.append(0 if n == 1 and shape[pad + d] != 1 else st // a.itemsize)
    return out


def _operand(x, other, name: str) -> np.ndarray:
    """Python scalars take the dtype of the array operand."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, (bool, int, float, np.generic)):
        dt = other.dtype if isinstance(other, np.ndarray) else np.float32
        return np.asarray(x, dtype=dt)
    raise ValueError(f"{name} must be a numpy array or a scalar, got {type(x).__name__}")


def _broadcast(*arrays: np.ndarray) -> tuple[int, ...]:
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        raise ValueError("shapes " + ", ".join(str(a.shape) for a in arrays) + " cannot be broadcast together") from None
    if len(shape) > MAX_DIMS:
        raise ValueError(f"broadcast result has {len(shape)} dims, at most {MAX_DIMS} are supported")
    return shape


def _two_operands(fn, code: int, op: str, a, b, threads, dtypes, out_dtype=None) -> np.ndarray:
    """Validate, broadcast and run aie_binary / aie_compare (same signature)."""
    a, b = _operand(a, b, "a"), _operand(b, a, "b")
    as_array(a, "a", dtypes)
    as_array(b, "b", dtypes)
    if a.dtype != b.dtype:
        raise ValueError(f"{op}: operand dtypes differ ({a.dtype} and {b.dtype}); cast one first")
    shape = _broadcast(a, b)
    y = np.empty(shape, out_dtype or a.dtype)
    call(fn, op, code, DTYPE_CODES[a.dtype], len(shape), i64s(shape),
         ptr(a), i64s(broadcast_strides(a, shape)), ptr(b), i64s(broadcast_strides(b, shape)),
         ptr(y), threads_arg(threads))
    return y


def _binary(op: str, a, b, threads, dtypes) -> np.ndarray:
    return _two_operands(lib().aie_binary, _BINARY[op], op, a, b, threads, dtypes)


_NUMERIC = (np.float32, np.int64, np.int32)


def add(a, b, threads=None): return _binary("add", a, b, threads, _NUMERIC)
def sub(a, b, threads=None): return _binary("sub", a, b, threads, _NUMERIC)
def mul(a, b, threads=None): return _binary("mul", a, b, threads, _NUMERIC)
def div(a, b, threads=None): return _binary("div", a, b, threads, _NUMERIC)
def pow(a, b, threads=None): return _binary("pow", a, b, threads, _NUMERIC)  # noqa: A001
def maximum(a, b, threads=None): return _binary("max", a, b, threads, _NUMERIC)
def minimum(a, b, threads=None): return _binary("min", a, b, threads, _NUMERIC)
def logical_and(a, b, threads=None): return _binary("and", a, b, threads, (np.bool_,))
def logical_or(a, b, threads=None): return _binary("or", a, b, threads, (np.bool_,))
def logical_xor(a, b, threads=None): return _binary("xor", a, b, threads, (np.bool_,))


def _compare(op: str, a, b, threads) -> np.ndarray:
    return _two_operands(lib().aie_compare, _COMPARE[op], op, a, b, threads, tuple(DTYPE_CODES), np.bool_)


def equal(a, b, threads=None): return _compare("equal", a, b, threads)
def not_equal(a, b, threads=None): return _compare("not_equal", a, b, threads)
def less(a, b, threads=None): return _compare("less", a, b, threads)
def less_equal(a, b, threads=None): return _compare("less_equal", a, b, threads)
def greater(a, b, threads=None): return _compare("greater", a, b, threads)
def greater_equal(a, b, threads=None): return _compare("greater_equal", a, b, threads)


def where(cond, a, b, threads=None) -> np.ndarray:
    """cond ? a : b with broadcasting; a and b share any dtype of 1, 2, 4 or 8 bytes."""
    as_array(cond, "cond", (np.bool_,))
    a, b = _operand(a, b, "a"), _operand(b, a, "b")
    if a.dtype != b.dtype:
        raise ValueError(f"where: a and b dtypes differ ({a.dtype} and {b.dtype})")
    if a.itemsize not in (1, 2, 4, 8):
        raise ValueError(f"where: element size {a.itemsize} not supported (1, 2, 4 or 8 bytes)")
    shape = _broadcast(cond, a, b)
    y = np.empty(shape, a.dtype)
    call(lib().aie_where, "where", ctypes.c_size_t(a.itemsize), len(shape), i64s(shape),
         ptr(cond), i64s(broadcast_strides(cond, shape)), ptr(a), i64s(broadcast_strides(a, shape)),
         ptr(b), i64s(broadcast_strides(b, shape)), ptr(y), threads_arg(threads))
    return y


def logical_not(x, threads=None) -> np.ndarray:
    require_contiguous(as_array(x, "x", (np.bool_,)), "x")
    y = np.empty_like(x)
    call(lib().aie_logical_not, "logical_not", ptr(x), ptr(y), ctypes.c_int64(x.size), threads_arg(threads))
    return y


def unary(op: str, x, p0: float = 0.0, p1: float = 0.0, threads=None) -> np.ndarray:
    """y = op(x) on a float32 C-contiguous array; op is one of UNARY_OPS."""
    if op not in _UNARY:
        raise ValueError(f"unknown unary op {op!r}: expected one of {', '.join(_UNARY)}")
    require_contiguous(as_array(x, "x"), "x")
    y = np.empty_like(x)
    call(lib().aie_unary, op, _UNARY[op], ptr(x), ptr(y), ctypes.c_int64(x.size),
         ctypes.c_float(p0), ctypes.c_float(p1), threads_arg(threads))
    return y


UNARY_OPS = tuple(_UNARY)


def relu(x, threads=None): return unary("relu", x, threads=threads)
def leaky_relu(x, alpha=0.01, threads=None): return unary("leaky_relu", x, alpha, threads=threads)
def sigmoid(x, threads=None): return unary("sigmoid", x, threads=threads)
def tanh(x, threads=None): return unary("tanh", x, threads=threads)
def erf(x, threads=None): return unary("erf", x, threads=threads)
def hardsigmoid(x, alpha=0.2, beta=0.5, threads=None): return unary("hardsigmoid", x, alpha, beta, threads=threads)
def hardswish(x, threads=None): return unary("hardswish", x, threads=threads)
def silu(x, threads=None): return unary("silu", x, threads=threads)
def exp(x, threads=None): return unary("exp", x, threads=threads)
def log(x, threads=None): return unary("log", x, threads=threads)
def sqrt(x, threads=None): return unary("sqrt", x, threads=threads)
def reciprocal(x, threads=None): return unary("reciprocal", x, threads=threads)
def abs(x, threads=None): return unary("abs", x, threads=threads)  # noqa: A001
def neg(x, threads=None): return unary("neg", x, threads=threads)
def floor(x, threads=None): return unary("floor", x, threads=threads)
def ceil(x, threads=None): return unary("ceil", x, threads=threads)
def round(x, threads=None): return unary("round", x, threads=threads)  # noqa: A001
def sign(x, threads=None): return unary("sign", x, threads=threads)
def softplus(x, threads=None): return unary("softplus", x, threads=threads)
def elu(x, alpha=1.0, threads=None): return unary("elu", x, alpha, threads=threads)


def selu(x, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875, threads=None):
    return unary("selu", x, alpha, gamma, threads=threads)


def clip(x, lo=-np.inf, hi=np.inf, threads=None):
    """min(max(x, lo), hi), as ONNX Clip and numpy.clip: lo > hi gives hi."""
    return unary("clip", x, lo, hi, threads=threads)


def gelu(x, approximate: str = "none", threads=None):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return unary("gelu" if approximate == "none" else "gelu_tanh", x, threads=threads)


def cast(x, dtype, threads=None) -> np.ndarray:
    """x.astype(dtype) for float32, int64, int32, uint8, bool. Float to int
    truncates; NaN, inf or out-of-range values raise ValueError."""
    dts = tuple(DTYPE_CODES)
    require_contiguous(as_array(x, "x", dts), "x")
    dst = np.dtype(dtype)
    if dst not in DTYPE_CODES:
        raise ValueError(f"cast: target dtype {dst} not supported (float32, int64, int32, uint8, bool)")
    y = np.empty(x.shape, dst)
    call(lib().aie_cast, "cast", DTYPE_CODES[x.dtype], DTYPE_CODES[dst], ptr(x), ptr(y),
         ctypes.c_int64(x.size), threads_arg(threads))
    return y


__all__ = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "logical_and", "logical_or",
           "logical_xor", "logical_not", "equal", "not_equal", "less", "less_equal", "greater",
           "greater_equal", "where", "unary", "UNARY_OPS", "relu", "leaky_relu", "sigmoid", "tanh",
           "erf", "gelu", "hardsigmoid", "hardswish", "silu", "exp", "log", "sqrt", "reciprocal",
           "abs", "neg", "clip", "floor", "ceil", "round", "sign", "softplus", "elu", "selu", "cast"]
