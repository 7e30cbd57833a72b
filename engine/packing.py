"""Conversion-time calls into the kernel library: weight packing, workspace
sizes and parameter validation for the NHWC convolution/pooling and packed
GEMM steps (kernels/include/aie_conv.h, aie_pool.h, aie_gemm.h).

Packed weights are private, ISA-specific byte blobs (the library tags them
with the ISA and rejects a mismatch): the converter stores them in the .aie
next to the raw weights, with the ISA they were packed for, and a plan built
on a host whose selected ISA differs packs again from the raw weights.
"""

from __future__ import annotations

import ctypes

import numpy as np

from engine.errors import KernelError
from engine.kernels.conv import _c
from engine.kernels.conv import CONV_FIELDS, POOL_FIELDS, ConvParams, PoolParams  # noqa: F401 - one struct class each
from engine.kernels.gemm import _api


def _lib():
    """The library, its conv/pool and GEMM signatures declared once by the
    numpy layer that owns them (engine.kernels.conv, engine.kernels.gemm)."""
    _api()
    return _c()


def host_isa() -> int:
    """The selected ISA's code (aie_isa): what packed blobs are tagged with."""
    return int(_lib().aie_selected_isa())


def _last_error() -> str:
    return _lib().aie_last_error().decode()


def _aligned(nbytes: int) -> np.ndarray:
    raw = np.zeros(nbytes + 64, np.uint8)
    off = (-raw.ctypes.data) % 64
    return raw[off:off + nbytes]


def conv_params(**kw) -> ConvParams:
    p = ConvParams()
    for f in CONV_FIELDS:
        setattr(p, f, int(kw.get(f, 0)))
    return p


def conv_output_shape(p: ConvParams, transposed: bool = False) -> tuple[int, int] | str:
    """(P, Q), or the library's reason the params are invalid."""
    h = _lib()
    P, Q = ctypes.c_int64(), ctypes.c_int64()
    fn = h.aie_conv_transpose2d_output_shape if transposed else h.aie_conv2d_output_shape
    if fn(ctypes.byref(p), ctypes.byref(P), ctypes.byref(Q)) != 0:
        return _last_error()
    return P.value, Q.value


def packed_conv_size(p: ConvParams, transposed: bool = False) -> int:
    h = _lib()
    return int((h.aie_conv_transpose2d_packed_size if transposed else h.aie_conv2d_packed_size)(ctypes.byref(p)))


def conv_workspace(p: ConvParams, nthreads: int, transposed: bool = False) -> int:
    """Workspace for a run on nthreads or on 1: a step too small to split
    runs on the caller alone (engine.plan.step_threads), and one thread's
    tiles can need more than each of two threads' tiles."""
    h = _lib()
    fn = h.aie_conv_transpose2d_workspace_size if transposed else h.aie_conv2d_workspace_size
    return max(int(fn(ctypes.byref(p), n)) for n in {1, max(int(nthreads), 1)})


def dw_pw_workspace(ex: ConvParams | None, dw: ConvParams, pw: ConvParams, nthreads: int) -> int:
    """aie_conv2d_dw_pw's workspace for a run on nthreads or on 1 (as
    conv_workspace); ex None: no expand conv. 0: the convs do not fit together."""
    fn = _lib().aie_conv2d_dw_pw_workspace_size
    e = ctypes.byref(ex) if ex is not None else None
    return max(int(fn(e, ctypes.byref(dw), ctypes.byref(pw), n)) for n in {1, max(int(nthreads), 1)})


def winograd_wins(p: ConvParams) -> bool:
    """The library's choice of the Winograd F(2x2, 3x3) path for these params
    on the selected ISA (H = W = 0: spatial size unknown, decide by channels)."""
    return bool(_lib().aie_conv2d_winograd_wins(ctypes.byref(p)))


# The packed-conv blob header (kernels/core/conv_pack.h): magic "AIEC", version,
# isa, kind (4 = Winograd) as little-endian uint32s.
_CONV_PACK_MAGIC, _CONV_PACK_WINOGRAD = 0x43454941, 4


def is_winograd_blob(blob: np.ndarray) -> bool:
    head = np.frombuffer(np.ascontiguousarray(blob[:16]).tobytes(), "<u4") if blob.size >= 16 else ()
    return len(head) == 4 and int(head[0]) == _CONV_PACK_MAGIC and int(head[3]) == _CONV_PACK_WINOGRAD


def pack_conv(w: np.ndarray, group: int, transposed: bool = False, winograd: bool = False) -> np.ndarray:
    """Pack Conv (K, C/g, R, S) or ConvTranspose (C, K/g, R, S) weights;
    winograd=True: 3x3 Conv weights for the Winograd path (see winograd_wins)."""
    w = np.ascontiguousarray(w, np.float32)
    if transposed:
        C, Kg, R, S = w.shape
        p = conv_params(N=1, H=1, W=1, C=C, K=Kg * group, R=R, S=S, stride_h=1, stride_w=1, dil_h=1, dil_w=1,
                        groups=group)
    else:
        K, Cg, R, S = w.shape
        # Only C, K, R, S and groups shape the packing; the rest is a valid dummy.
        p = conv_params(N=1, H=R, W=S, C=Cg * group, K=K, R=R, S=S, stride_h=1, stride_w=1, dil_h=1, dil_w=1,
                        groups=group)
    h = _lib()
    if winograd and not transposed:
        size_fn, fn = h.aie_conv2d_winograd_packed_size, h.aie_conv2d_pack_winograd
    elif transposed:
        size_fn, fn = h.aie_conv_transpose2d_packed_size, h.aie_conv_transpose2d_pack_weights
    else:
        size_fn, fn = h.aie_conv2d_packed_size, h.aie_conv2d_pack_weights
    size = int(size_fn(ctypes.byref(p)))
    if size == 0:
        raise KernelError(f"cannot pack weights of shape {w.shape} (group {group}): {_last_error()}")
    blob = _aligned(size)
    if fn(ctypes.byref(p), w.ctypes.data, blob.ctypes.data, size) != 0:
        raise KernelError(f"packing weights of shape {w.shape}: {_last_error()}")
    return blob


def pack_gemm_b(b: np.ndarray, trans_b: bool) -> np.ndarray:
    """Pack op(B) (K x N) of a 2-D constant B for aie_sgemm_packed."""
    b = np.ascontiguousarray(b, np.float32)
    K, N = (b.shape[1], b.shape[0]) if trans_b else b.shape
    h = _lib()
    size = int(h.aie_sgemm_packed_b_size(K, N))
    blob = _aligned(size)
    if h.aie_sgemm_pack_b(int(bool(trans_b)), K, N, b.ctypes.data, b.shape[1], blob.ctypes.data, size) != 0:
        raise KernelError(f"packing B of shape {b.shape}: {_last_error()}")
    return blob


def gemm_workspace(M: int, N: int, K: int, nthreads: int) -> int:
    """As conv_workspace: enough for nthreads and for 1."""
    fn = _lib().aie_sgemm_workspace_size
    return max(int(fn(M, N, K, n)) for n in {1, max(int(nthreads), 1)})


def pool_output_shape(p: PoolParams) -> tuple[int, int] | str:
    P, Q = ctypes.c_int64(), ctypes.c_int64()
    if _lib().aie_pool2d_output_shape(ctypes.byref(p), ctypes.byref(P), ctypes.byref(Q)) != 0:
        return _last_error()
    return P.value, Q.value


def pool_params(ceil_mode: int = 0, count_include_pad: int = 0, **kw) -> PoolParams:
    p = PoolParams()
    for f in POOL_FIELDS:
        setattr(p, f, int(kw.get(f, 0)))
    p.ceil_mode, p.count_include_pad = int(ceil_mode), int(count_include_pad)
    return p
