"""bf16 and int8 matrix multiply over numpy arrays: aie_gemm_bf16 and aie_gemm_u8s8.

B is a weight: packed once (pack_b_bf16 / pack_b_s8) into a layout that every
path of its dtype reads, so it stays valid when the ISA level changes. A must
be row-major with unit column stride (a C-contiguous array or a row slice of
one); ``out`` too. numpy has no bf16 dtype: a bf16 A is passed as uint16 bit
patterns (the upper half of each float32). Errors in the arguments raise
ValueError naming the argument. Accuracy and rounding are stated in
kernels/include/aie_gemm_lowp.h.
"""

from __future__ import annotations

import ctypes

import numpy as np

from engine.kernels._lib import check, lib
from engine.kernels.abi import Epilogue, Qepilogue
from engine.kernels.gemm import _epilogue, _matrix, _ptr, _threads, _workspace

_A_F32, _A_BF16 = 0, 1
OUT_KINDS = {"int32": 0, "float32": 1, "uint8": 2}
_OUT_DTYPES = {"int32": np.int32, "float32": np.float32, "uint8": np.uint8}
MAX_K_INT8 = 32768  # AIE_GEMM_S8_MAX_K


_declared = False


def _api() -> ctypes.CDLL:
    global _declared
    handle = lib()
    if not _declared:
        i64, vp, sz, ci = ctypes.c_int64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
        for name in ("aie_gemm_bf16_packed_b_size", "aie_gemm_s8_packed_b_size"):
            getattr(handle, name).argtypes = [i64, i64]
            getattr(handle, name).restype = sz
        for name in ("aie_gemm_bf16_workspace_size", "aie_gemm_u8s8_workspace_size"):
            getattr(handle, name).argtypes = [i64, i64, i64, ci]
            getattr(handle, name).restype = sz
        for name in ("aie_gemm_bf16_pack_b", "aie_gemm_s8_pack_b"):
            getattr(handle, name).argtypes = [ci, i64, i64, vp, i64, vp, sz]
            getattr(handle, name).restype = ci
        handle.aie_gemm_bf16.argtypes = [i64, i64, i64, vp, ci, i64, vp, vp, i64, ctypes.POINTER(Epilogue), vp, sz,
                                         ci]
        handle.aie_gemm_bf16.restype = ci
        handle.aie_gemm_u8s8.argtypes = [i64, i64, i64, vp, i64, ctypes.c_int32, vp, vp, i64,
                                         ctypes.POINTER(Qepilogue), vp, sz, ci]
        handle.aie_gemm_u8s8.restype = ci
        handle.aie_gemm_bf16_path.restype = ctypes.c_char_p
        handle.aie_gemm_s8_path.restype = ctypes.c_char_p
        _declared = True
    return handle


def paths() -> dict[str, str]:
    """The micro-kernel each dtype runs at the selected level, e.g. {"bf16": "amx_bf16_32x32", ...}."""
    api = _api()
    return {"bf16": api.aie_gemm_bf16_path().decode(), "int8": api.aie_gemm_s8_path().decode()}


def u8s8_workspace_size(m: int, n: int, k: int, nthreads: int) -> int:
    """Bytes of workspace aie_gemm_u8s8 needs for an M x N x K product on nthreads (the plans' step size)."""
    return int(_api().aie_gemm_u8s8_workspace_size(m, n, k, nthreads))


class PackedLowpB:
    """A weight matrix B (K x N) packed once for the bf16 or int8 GEMM."""

    def __init__(self, buffer: np.ndarray, k: int, n: int, dtype: str):
        self.buffer, self.k, self.n, self.dtype = buffer, k, n, dtype

    @property
    def shape(self) -> tuple[int, int]:
        return (self.k, self.n)

    def __repr__(self) -> str:
        return f"PackedLowpB({self.dtype}, K={self.k}, N={self.n}, {self.buffer.nbytes} bytes)"


def _pack(fn: str, b, trans_b: bool, dtypes, dtype: str) -> PackedLowpB:
    b, b_t, ldb = _matrix("b", b, dtypes, fn)
    tb = bool(trans_b) != b_t
    k, n = (b.shape[1], b.shape[0]) if trans_b else b.shape
    if dtype == "int8" and k > MAX_K_INT8:
        raise ValueError(f"{fn}: K={k} is above {MAX_K_INT8}, where the int32 sums could overflow")
    api = _api()
    size = getattr(api, f"aie_gemm_{'bf16' if dtype == 'bf16' else 's8'}_packed_b_size")(k, n)
    buf = np.empty(size, dtype=np.uint8)
    rc = getattr(api, f"aie_gemm_{'bf16' if dtype == 'bf16' else 's8'}_pack_b")(int(tb), k, n, _ptr(b), ldb,
                                                                                 _ptr(buf), size)
    check(rc, fn)
    return PackedLowpB(buf, k, n, dtype)


def pack_b_bf16(b, *, trans_b=False) -> PackedLowpB:
    """Pack op(b) (float32, K x N) for matmul_bf16, rounding it to bf16 (nearest even)."""
    return _pack("pack_b_bf16", b, trans_b, (np.float32,), "bf16")


def pack_b_s8(b, *, trans_b=False) -> PackedLowpB:
    """Pack op(b) (int8, K x N) for matmul_u8s8."""
    return _pack("pack_b_s8", b, trans_b, (np.int8,), "int8")


def workspace_bf16(m: int, n: int, k: int, nthreads: int) -> int:
    """Bytes of scratch aie_gemm_bf16 needs for an M x N x K product (a plan
    carves them out of its arena)."""
    return int(_api().aie_gemm_bf16_workspace_size(m, n, k, nthreads))


def _a_rows(fn: str, a, dtypes, packed) -> tuple[np.ndarray, int, int]:
    if not isinstance(packed, PackedLowpB):
        raise ValueError(f"{fn}: packed must be a PackedLowpB from pack_b_*, got {type(packed).__name__}")
    a, a_t, lda = _matrix("a", a, dtypes, fn)
    if a_t and a.shape[0] > 1 and a.shape[1] > 1:
        raise ValueError(f"{fn}: a must be row-major (transposed views are not supported); "
                         "pass np.ascontiguousarray(a)")
    m, k = a.shape
    if k != packed.k:
        raise ValueError(f"{fn}: a is {m}x{k} but the packed B is {packed.k}x{packed.n}")
    return a, m, max(lda, k, 1)


def _out(fn: str, out, m: int, n: int, dtype, inputs) -> tuple[np.ndarray, int]:
    if out is None:
        return np.empty((m, n), dtype=dtype), max(1, n)
    if not isinstance(out, np.ndarray) or out.dtype != dtype:
        raise ValueError(f"{fn}: out must be a {np.dtype(dtype).name} numpy array")
    if out.shape != (m, n):
        raise ValueError(f"{fn}: out has shape {out.shape}, expected ({m}, {n})")
    if not out.flags.writeable:
        raise ValueError(f"{fn}: out is read-only")
    if any(x is not None and np.may_share_memory(out, x) for x in inputs):
        raise ValueError(f"{fn}: out overlaps an input; the kernel would read what it writes")
    item = out.itemsize
    s0, s1 = out.strides
    if m and n and (not (s1 == item or n <= 1) or s0 % item or (m > 1 and s0 // item < n)):
        raise ValueError(f"{fn}: out with strides {out.strides} must be row-major with unit column stride")
    return out, max(1, s0 // item if m > 1 else n)


def matmul_bf16(a, packed: PackedLowpB, *, bias=None, activation=None, out=None, threads=None) -> np.ndarray:
    """activation(a @ B + bias) in float32 from bf16 inputs with float32 sums.

    a: float32 (rounded to bf16 while it is packed) or uint16 bf16 bit
    patterns, M x K. bias and activation as for engine.kernels.matmul.
    """
    fn = "matmul_bf16"
    if isinstance(packed, PackedLowpB) and packed.dtype != "bf16":
        raise ValueError(f"{fn}: packed holds an {packed.dtype} B; use pack_b_bf16")
    a, m, lda = _a_rows(fn, a, (np.float32, np.uint16), packed)
    n = packed.n
    ep, bias_keep = _epilogue(bias, activation, m, n)
    out, ldc = _out(fn, out, m, n, np.float32, (a, bias))
    nt = _threads(threads)
    api = _api()
    wss = api.aie_gemm_bf16_workspace_size(m, n, packed.k, nt)
    ws = _ptr(_workspace(wss)) if wss else None
    rc = api.aie_gemm_bf16(m, n, packed.k, _ptr(a), _A_BF16 if a.dtype == np.uint16 else _A_F32, lda,
                           _ptr(packed.buffer), _ptr(out), ldc, ctypes.byref(ep) if ep is not None else None, ws,
                           wss, nt)
    check(rc, fn)
    del bias_keep
    return out


def _scales(fn: str, b_scale, n: int) -> np.ndarray:
    s = np.asarray(b_scale, dtype=np.float32).reshape(-1)
    if s.size == 1:
        s = np.full(n, s[0], dtype=np.float32)
    if s.size != n:
        raise ValueError(f"{fn}: b_scale has {s.size} values, expected 1 or N={n} (one per output column)")
    return np.ascontiguousarray(s)


def matmul_u8s8(a, packed: PackedLowpB, *, a_zero=0, out_dtype="int32", a_scale=None, b_scale=None, y_scale=None,
                y_zero=0, bias=None, activation=None, out=None, threads=None) -> np.ndarray:
    """sum_k (a - a_zero) * B in int32, then by out_dtype:

    "int32": the sums. "float32": sums * a_scale * b_scale[j], then bias
    (float32) and activation as for matmul. "uint8": requantised,
    clip(round_half_even((sums + bias[j]) * (a_scale * b_scale[j] / y_scale))
    + y_zero, 0, 255) with an int32 bias. a: uint8 M x K; b_scale: one value
    or one per column.
    """
    fn = "matmul_u8s8"
    if isinstance(packed, PackedLowpB) and packed.dtype != "int8":
        raise ValueError(f"{fn}: packed holds a {packed.dtype} B; use pack_b_s8")
    if out_dtype not in OUT_KINDS:
        raise ValueError(f"{fn}: out_dtype {out_dtype!r} is not one of {', '.join(OUT_KINDS)}")
    for name, zero in (("a_zero", a_zero), ("y_zero", y_zero)):
        if isinstance(zero, bool) or not isinstance(zero, (int, np.integer)) or not 0 <= zero <= 255:
            raise ValueError(f"{fn}: {name} must be an integer in 0..255 (a uint8 zero point), got {zero!r}")
    a, m, lda = _a_rows(fn, a, (np.uint8,), packed)
    n = packed.n
    q = Qepilogue(out=OUT_KINDS[out_dtype], y_zero=int(y_zero))
    keep = []
    if out_dtype != "int32":
        if a_scale is None or b_scale is None:
            raise ValueError(f"{fn}: out_dtype={out_dtype} needs a_scale and b_scale")
        q.a_scale = float(a_scale)
        scales = _scales(fn, b_scale, n)
        q.b_scale = _ptr(scales)
        keep.append(scales)
    if out_dtype == "uint8":
        if y_scale is None:
            raise ValueError(f"{fn}: out_dtype=uint8 needs y_scale")
        q.y_scale = float(y_scale)
        if activation is not None:
            raise ValueError(f"{fn}: activation applies to float32 outputs only")
        if bias is not None:
            bias = np.asarray(bias)
            if bias.dtype != np.int32 or bias.reshape(-1).size != n:
                raise ValueError(f"{fn}: bias for uint8 outputs must be int32 with N={n} values, got {bias.dtype} "
                                 f"{bias.shape}")
            bias = np.ascontiguousarray(bias.reshape(-1))
            q.bias_s32 = _ptr(bias)
            keep.append(bias)
    elif out_dtype == "float32":
        ep, bias_keep = _epilogue(bias, activation, m, n)
        if ep is not None:
            q.ep = ctypes.addressof(ep)
            keep += [ep, bias_keep]
    elif bias is not None or activation is not None:
        raise ValueError(f"{fn}: bias and activation need out_dtype float32 or uint8")
    out, ldc = _out(fn, out, m, n, _OUT_DTYPES[out_dtype], (a, bias))
    nt = _threads(threads)
    api = _api()
    wss = api.aie_gemm_u8s8_workspace_size(m, n, packed.k, nt)
    ws = _ptr(_workspace(wss)) if wss else None
    rc = api.aie_gemm_u8s8(m, n, packed.k, _ptr(a), lda, int(a_zero), _ptr(packed.buffer), _ptr(out), ldc,
                           ctypes.byref(q), ws, wss, nt)
    check(rc, fn)
    del keep
    return out


__all__ = ["OUT_KINDS", "PackedLowpB", "matmul_bf16", "matmul_u8s8", "pack_b_bf16", "pack_b_s8", "paths",
           "u8s8_workspace_size", "workspace_bf16"]
