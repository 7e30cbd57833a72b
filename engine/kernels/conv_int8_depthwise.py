"""int8 depthwise convolution over numpy arrays: aie_conv2d_u8s8_depthwise
(kernels/include/aie_conv_s8.h). x uint8 NHWC with a zero point, w int8
(C, 1, R, S) taken as R x S x C (pack_depthwise_s8), groups == C == K; int32
sums (exact; padding adds nothing), then "int32" or "uint8" out: the int8
GEMM's requantisation, clip(round_half_even((sums + bias[c]) * x_scale *
w_scale[c] / y_scale) + y_zero, 0, 255)."""

from __future__ import annotations

import ctypes

import numpy as np

from engine.kernels._lib import check
from engine.kernels.abi import Qepilogue
from engine.kernels.conv import _c, _conv_params, _ints, _threads, _workspace
from engine.kernels.gemm import _ptr
from engine.kernels.gemm_lowp import OUT_KINDS, _scales

MAX_TAPS = 64  # AIE_DWS8_MAX_TAPS: R * S at most
_declared = False


def _api() -> ctypes.CDLL:
    global _declared
    h = _c()
    if not _declared:
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        h.aie_conv2d_u8s8_depthwise_workspace_size.argtypes = [vp]
        h.aie_conv2d_u8s8_depthwise_workspace_size.restype = sz
        h.aie_conv2d_u8s8_depthwise.argtypes = [vp, vp, ctypes.c_int32, vp, vp, ctypes.POINTER(Qepilogue), vp, sz,
                                                ctypes.c_int]
        h.aie_conv2d_u8s8_depthwise.restype = ctypes.c_int
        _declared = True
    return h


def params(x_shape, r: int, s: int, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1)):
    """The aie_conv2d_params of a depthwise conv over an NHWC x."""
    c = x_shape[3]
    return _conv_params(tuple(x_shape), c, 1, r, s, tuple(strides), tuple(pads), tuple(dilations), c)


def workspace_size(p) -> int:
    return int(_api().aie_conv2d_u8s8_depthwise_workspace_size(ctypes.byref(p)))


def pack_depthwise_s8(w) -> np.ndarray:
    """int8 (C, 1, R, S) weights as the kernel reads them: R x S x C, contiguous."""
    w = np.asarray(w)
    if w.dtype != np.int8 or w.ndim != 4 or w.shape[1] != 1 or min(w.shape) < 1:
        raise ValueError(f"pack_depthwise_s8: weights must be a non-empty int8 C x 1 x R x S array, got {w.dtype} "
                         f"{w.shape}")
    return np.ascontiguousarray(w[:, 0].transpose(1, 2, 0))


def conv2d_u8s8_depthwise(x_nhwc, w, *, x_zero=0, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1),
                          out_dtype="int32", x_scale=None, w_scale=None, y_scale=None, y_zero=0, bias=None,
                          threads=None) -> np.ndarray:
    fn = "conv2d_u8s8_depthwise"
    x = np.ascontiguousarray(x_nhwc)
    if x.dtype != np.uint8 or x.ndim != 4:
        raise ValueError(f"{fn}: x must be a uint8 NHWC array, got {x.dtype} {x.shape}")
    packed = pack_depthwise_s8(w)
    c = x.shape[3]
    if packed.shape[2] != c:
        raise ValueError(f"{fn}: w {np.shape(w)} is not depthwise over x's {c} channels")
    if out_dtype not in ("int32", "uint8"):
        raise ValueError(f"{fn}: out_dtype {out_dtype!r} is not int32 or uint8")
    p = params(x.shape, packed.shape[0], packed.shape[1], _ints("strides", strides, 2, 1), _ints("pads", pads, 4, 0),
               _ints("dilations", dilations, 2, 1))
    P, Q = ctypes.c_int64(), ctypes.c_int64()
    if _c().aie_conv2d_output_shape(ctypes.byref(p), ctypes.byref(P), ctypes.byref(Q)) != 0:
        raise ValueError(f"{fn}: {_c().aie_last_error().decode()}")
    out = np.empty((x.shape[0], P.value, Q.value, c), np.int32 if out_dtype == "int32" else np.uint8)
    q = Qepilogue(out=OUT_KINDS[out_dtype], y_zero=int(y_zero))
    keep = []
    if out_dtype == "uint8":
        q.a_scale, q.y_scale = float(x_scale), float(y_scale)
        scales = _scales(fn, w_scale, c)
        q.b_scale = _ptr(scales)
        keep.append(scales)
        if bias is not None:
            b = np.ascontiguousarray(np.asarray(bias, np.int32).reshape(c))
            q.bias_s32 = _ptr(b)
            keep.append(b)
    wss = workspace_size(p)
    ws = _workspace(wss)
    check(_api().aie_conv2d_u8s8_depthwise(ctypes.byref(p), _ptr(x), int(x_zero), _ptr(packed), _ptr(out),
                                           ctypes.byref(q), _ptr(ws), wss, _threads(threads)), fn)
    del keep
    return out


__all__ = ["MAX_TAPS", "conv2d_u8s8_depthwise", "pack_depthwise_s8", "params", "workspace_size"]
