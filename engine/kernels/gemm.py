"""Matrix multiply over numpy float32 arrays: aie_sgemm and the pre-packed-B API.

Layout rules: every matrix must be row-major with unit column stride (a
C-contiguous array or a row slice of one), or the transpose of such an array
(``x.T``): the transpose is passed to the kernel as a leading dimension and a
transpose flag, never copied. ``out`` must be row-major with unit column
stride. Errors in the arguments raise ValueError naming the argument.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from engine.kernels._lib import check, lib
from engine.kernels.abi import Epilogue, UNARY_EPILOGUE, UNARY_NAMES, Unary
from engine.kernels.levels import isa

# Activation name -> its code: the unary ops a GEMM epilogue applies.
ACTIVATIONS = {UNARY_NAMES[u]: u for u in sorted(UNARY_EPILOGUE) if u != Unary.IDENTITY}
# Parameter defaults follow ONNX (HardSigmoid alpha=0.2 beta=0.5, LeakyRelu alpha=0.01).
_ACT_DEFAULTS = {"clip": (-np.inf, np.inf), "hardsigmoid": (0.2, 0.5), "leaky_relu": (0.01, 0.0)}

_BIAS_NONE, _BIAS_COL, _BIAS_ROW = 0, 1, 2


_declared = False


def _api() -> ctypes.CDLL:
    global _declared
    handle = lib()
    if not _declared:
        i64, f32, vp, sz, ci = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
        ep = ctypes.POINTER(Epilogue)
        handle.aie_sgemm_workspace_size.argtypes = [i64, i64, i64, ci]
        handle.aie_sgemm_workspace_size.restype = sz
        handle.aie_sgemm.argtypes = [ci, ci, i64, i64, i64, f32, vp, i64, vp, i64, f32, vp, i64, ep, vp, sz, ci]
        handle.aie_sgemm.restype = ci
        handle.aie_sgemm_packed_b_size.argtypes = [i64, i64]
        handle.aie_sgemm_packed_b_size.restype = sz
        handle.aie_sgemm_pack_b.argtypes = [ci, i64, i64, vp, i64, vp, sz]
        handle.aie_sgemm_pack_b.restype = ci
        handle.aie_sgemm_packed.argtypes = [ci, i64, i64, i64, f32, vp, i64, vp, f32, vp, i64, ep, vp, sz, ci]
        handle.aie_sgemm_packed.restype = ci
        handle.aie_threads_set.argtypes = [ci]
        handle.aie_threads_get.restype = ci
        _declared = True
    return handle


# One growing workspace per application thread: a fresh multi-MiB numpy
# buffer per call would cost page faults on every call.
_tls = threading.local()


def _workspace(nbytes: int) -> np.ndarray:
    buf = getattr(_tls, "ws", None)
    if buf is None or buf.nbytes < nbytes:
        buf = np.empty(max(nbytes, 1), dtype=np.uint8)
        _tls.ws = buf
    return buf


def set_threads(n: int) -> None:
    """Resize the kernel thread pool (n >= 1)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"set_threads: thread count must be an integer >= 1, got {n!r}")
    check(_api().aie_threads_set(int(n)), "set_threads")


def get_threads() -> int:
    """The kernel thread pool's size (default: CPUs in the affinity mask, or AIE_NUM_THREADS)."""
    return int(_api().aie_threads_get())


def _matrix(name: str, x, dtypes=(np.float32,), fn: str = "matmul") -> tuple[np.ndarray, bool, int]:
    """(array, stored_transposed, leading dimension) for a 2-D operand of one of dtypes."""
    if not isinstance(x, np.ndarray):
        raise ValueError(f"{fn}: {name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype not in dtypes:
        raise ValueError(f"{fn}: {name} must be {' or '.join(np.dtype(d).name for d in dtypes)}, got {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"{fn}: {name} must be 2-D, got shape {x.shape}")
    rows, cols = x.shape
    s0, s1 = x.strides
    item = x.itemsize
    if (s1 == item or cols <= 1) and s0 >= 0 and s0 % item == 0 and (rows <= 1 or s0 // item >= cols):
        return x, False, max(1, s0 // item if rows > 1 else cols)
    if (s0 == item or rows <= 1) and s1 >= 0 and s1 % item == 0 and (cols <= 1 or s1 // item >= rows):
        return x, True, max(1, s1 // item if cols > 1 else rows)
    raise ValueError(
        f"{fn}: {name} with shape {x.shape} and strides {x.strides} is not row-major or a transpose of a "
        f"row-major array; pass np.ascontiguousarray({name})"
    )


def _epilogue(bias, activation, m: int, n: int) -> tuple[Epilogue | None, np.ndarray | None]:
    ep = Epilogue()
    keep = None
    if bias is not None:
        if not isinstance(bias, np.ndarray) or bias.dtype != np.float32:
            raise ValueError("matmul: bias must be a float32 numpy array")
        if bias.shape in ((n,), (1, n)):
            kind = _BIAS_COL
        elif bias.shape == (m, 1):
            kind = _BIAS_ROW
        else:
            raise ValueError(
                f"matmul: bias shape {bias.shape} does not broadcast over the ({m}, {n}) result as a row ({n},) or "
                f"(1, {n}), or a column ({m}, 1)"
            )
        keep = np.ascontiguousarray(bias).reshape(-1)
        ep.bias = keep.ctypes.data
        ep.bias_kind = kind
    if activation is not None:
        name, *params = (activation,) if isinstance(activation, str) else tuple(activation)
        if name not in ACTIVATIONS:
            raise ValueError(f"matmul: unknown activation {name!r}; expected one of {', '.join(ACTIVATIONS)}")
        defaults = _ACT_DEFAULTS.get(name, ())
        if len(params) > max(len(defaults), 0) or (name == "leaky_relu" and len(params) > 1):
            raise ValueError(f"matmul: activation {name!r} takes at most {len(defaults)} parameters, got {params}")
        values = list(params) + list(defaults[len(params):])
        ep.act = ACTIVATIONS[name]
        ep.p0 = float(values[0]) if values else 0.0
        ep.p1 = float(values[1]) if len(values) > 1 else 0.0
    if bias is None and activation is None:
        return None, None
    return ep, keep


def _out(out, m: int, n: int, beta: float, inputs) -> tuple[np.ndarray, int]:
    if out is None:
        if beta != 0.0:
            raise ValueError("matmul: beta != 0 needs out= (the C that beta scales)")
        out = np.empty((m, n), dtype=np.float32)
    else:
        if not isinstance(out, np.ndarray) or out.dtype != np.float32:
            raise ValueError("matmul: out must be a float32 numpy array")
        if out.shape != (m, n):
            raise ValueError(f"matmul: out has shape {out.shape}, expected ({m}, {n})")
        if not out.flags.writeable:
            raise ValueError("matmul: out is read-only")
        for x in inputs:
            if x is not None and np.may_share_memory(out, x):
                raise ValueError("matmul: out overlaps an input; the kernel would read what it writes")
    if m and n:
        item = out.itemsize
        s0, s1 = out.strides
        if not (s1 == item or n <= 1) or s0 % item or (m > 1 and s0 // item < n):
            raise ValueError(f"matmul: out with strides {out.strides} must be row-major with unit column stride")
        return out, max(1, s0 // item if m > 1 else n)
    return out, max(1, n)


def _threads(threads) -> int:
    if threads is None:
        return 0
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"matmul: threads must be an integer >= 1 or None, got {threads!r}")
    return int(threads)


def _ptr(x: np.ndarray | None):
    # __array_interface__ is ~3x cheaper than x.ctypes.data, which matters for small matrices
    return None if x is None or x.size == 0 else x.__array_interface__["data"][0]


# The small-M path (M <= 8 rows) packs nothing: no workspace to size or pass.
_SMALL_M = 8


_F32 = np.dtype(np.float32)  # builtin dtypes are singletons: `is` is the cheap test


def _plain_pair(a, b) -> bool:
    """Both operands non-empty C-contiguous 2-D float32 ndarrays with matching inner dimensions."""
    return (type(a) is np.ndarray and type(b) is np.ndarray and a.dtype is _F32 and b.dtype is _F32
            and a.ndim == 2 and b.ndim == 2 and a.flags.c_contiguous and b.flags.c_contiguous
            and a.shape[1] == b.shape[0] and a.size and b.size)


def _matmul_plain(a: np.ndarray, b: np.ndarray, out, nt: int) -> np.ndarray | None:
    """a @ b for operands _plain_pair accepts, into out (None: a fresh array);
    None when out is not a plain C-contiguous float32 result (the general
    path then explains what is wrong with it).

    The common call (no epilogue, no transposes) skips the general argument
    handling: a small product then costs little more than the ctypes call
    itself (~7 us against ~16-24 us before; numpy's is ~1 us).
    """
    m, k = a.shape
    n = b.shape[1]
    pa, pb = a.ctypes.data, b.ctypes.data
    if out is None:
        out = np.empty((m, n), dtype=_F32)
        pc = out.ctypes.data
    else:
        if not (type(out) is np.ndarray and out.dtype is _F32 and out.shape == (m, n) and out.flags.c_contiguous
                and out.flags.writeable):
            return None
        pc = out.ctypes.data
        end = pc + out.nbytes  # contiguous buffers: overlap is an interval test
        if (pa < end and pc < pa + a.nbytes) or (pb < end and pc < pb + b.nbytes):
            return None
    api = _api()
    if m <= _SMALL_M:
        ws, wss = None, 0
    else:
        wss = api.aie_sgemm_workspace_size(m, n, k, nt)
        ws = _ptr(_workspace(wss))
    rc = api.aie_sgemm(0, 0, m, n, k, 1.0, pa, k, pb, n, 0.0, pc, n, None, ws, wss, nt)
    if rc:
        check(rc, "matmul")
    return out


def matmul(a, b, *, bias=None, activation=None, alpha=1.0, beta=0.0, out=None, trans_a=False, trans_b=False,
           threads=None) -> np.ndarray:
    """out = activation(alpha * op(a) @ op(b) + beta * out + bias), float32.

    op(x) is x.T when trans_x. bias: shape (N,) or (1, N) (per column) or
    (M, 1) (per row). activation: a name from ACTIVATIONS, or a tuple
    (name, *params): ("clip", lo, hi), ("leaky_relu", slope),
    ("hardsigmoid", alpha, beta). threads: None = the pool's size.
    """
    if (bias is None and activation is None and alpha == 1.0 and beta == 0.0 and not trans_a and not trans_b
            and _plain_pair(a, b)):
        done = _matmul_plain(a, b, out, 0 if threads is None else _threads(threads))
        if done is not None:
            return done
    a, a_t, lda = _matrix("a", a)
    b, b_t, ldb = _matrix("b", b)
    ta, tb = bool(trans_a) != a_t, bool(trans_b) != b_t
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    k2, n = (b.shape[1], b.shape[0]) if trans_b else b.shape
    if k != k2:
        raise ValueError(f"matmul: inner dimensions differ: op(a) is {m}x{k}, op(b) is {k2}x{n}")
    ep, bias_keep = _epilogue(bias, activation, m, n)
    out, ldc = _out(out, m, n, float(beta), (a, b, bias))
    nt = _threads(threads)
    api = _api()
    small = m <= _SMALL_M and not (ta and tb)
    wss = 0 if small else api.aie_sgemm_workspace_size(m, n, k, nt)
    ws = None if small else _ptr(_workspace(wss))
    rc = api.aie_sgemm(int(ta), int(tb), m, n, k, float(alpha), _ptr(a), lda, _ptr(b), ldb, float(beta), _ptr(out),
                       ldc, ctypes.byref(ep) if ep is not None else None, ws, wss, nt)
    check(rc, "matmul")
    del bias_keep
    return out


class PackedB:
    """A weight matrix B (K x N) packed once for the current ISA's micro-kernel."""

    def __init__(self, buffer: np.ndarray, k: int, n: int, isa: str):
        self.buffer, self.k, self.n, self.isa = buffer, k, n, isa

    @property
    def shape(self) -> tuple[int, int]:
        return (self.k, self.n)

    def __repr__(self) -> str:
        return f"PackedB(K={self.k}, N={self.n}, isa={self.isa}, {self.buffer.nbytes} bytes)"


def pack_b(b, *, trans_b=False) -> PackedB:
    """Pack op(b) (K x N) for matmul_packed; the result is tied to the current ISA."""
    b, b_t, ldb = _matrix("b", b)
    tb = bool(trans_b) != b_t
    k, n = (b.shape[1], b.shape[0]) if trans_b else b.shape
    api = _api()
    size = api.aie_sgemm_packed_b_size(k, n)
    buf = np.empty(size, dtype=np.uint8)
    check(api.aie_sgemm_pack_b(int(tb), k, n, _ptr(b), ldb, _ptr(buf), size), "pack_b")
    return PackedB(buf, k, n, isa())


def matmul_packed(a, packed: PackedB, *, bias=None, activation=None, alpha=1.0, beta=0.0, out=None, trans_a=False,
                  threads=None) -> np.ndarray:
    """matmul with a B pre-packed by pack_b (same options as matmul)."""
    if not isinstance(packed, PackedB):
        raise ValueError(f"matmul_packed: packed must be a PackedB from pack_b, got {type(packed).__name__}")
    if packed.isa != isa():
        raise ValueError(f"matmul_packed: B was packed for ISA {packed.isa} but {isa()} is selected; pack it again")
    a, a_t, lda = _matrix("a", a)
    ta = bool(trans_a) != a_t
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    if k != packed.k:
        raise ValueError(f"matmul_packed: op(a) is {m}x{k} but the packed B is {packed.k}x{packed.n}")
    n = packed.n
    ep, bias_keep = _epilogue(bias, activation, m, n)
    out, ldc = _out(out, m, n, float(beta), (a, bias))
    nt = _threads(threads)
    api = _api()
    wss = 0 if m <= _SMALL_M else api.aie_sgemm_workspace_size(m, n, k, nt)
    ws = None if m <= _SMALL_M else _ptr(_workspace(wss))
    rc = api.aie_sgemm_packed(int(ta), m, n, k, float(alpha), _ptr(a), lda, _ptr(packed.buffer), float(beta),
                              _ptr(out), ldc, ctypes.byref(ep) if ep is not None else None, ws, wss, nt)
    check(rc, "matmul_packed")
    del bias_keep
    return out


__all__ = ["ACTIVATIONS", "PackedB", "get_threads", "matmul", "matmul_packed", "pack_b", "set_threads"]
