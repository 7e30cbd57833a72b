"""int8 convolution over numpy arrays: aie_conv2d_u8s8 (kernels/include/aie_conv_s8.h).

x is uint8 NHWC with a zero point, w int8 OIHW (symmetric), packed once by
pack_conv_s8 into the int8 GEMM's B layout (valid at every level); sums are
int32 and exact, padding reads the zero point. The output stage is the int8
GEMM's (engine.kernels.gemm_lowp.matmul_u8s8): "int32" sums, "float32"
dequantised (+ bias, activation) or "uint8" requantised. groups must be 1.
"""

from __future__ import annotations

import ctypes

import numpy as np

from engine.kernels._lib import check
from engine.kernels.abi import Qepilogue
from engine.kernels.conv import _c, _conv_params, _ints, _threads, _workspace
from engine.kernels.gemm import _epilogue, _ptr
from engine.kernels.gemm_lowp import _OUT_DTYPES, _scales, OUT_KINDS

_declared = False


def _api() -> ctypes.CDLL:
    global _declared
    h = _c()
    if not _declared:
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        h.aie_conv2d_s8_packed_size.argtypes = [vp]
        h.aie_conv2d_s8_packed_size.restype = sz
        h.aie_conv2d_s8_pack_weights.argtypes = [vp, vp, vp, sz]
        h.aie_conv2d_s8_pack_weights.restype = ctypes.c_int
        h.aie_conv2d_u8s8_workspace_size.argtypes = [vp, ctypes.c_int]
        h.aie_conv2d_u8s8_workspace_size.restype = sz
        h.aie_conv2d_u8s8.argtypes = [vp, vp, ctypes.c_int32, vp, vp, ctypes.POINTER(Qepilogue), vp, sz,
                                      ctypes.c_int]
        h.aie_conv2d_u8s8.restype = ctypes.c_int
        _declared = True
    return h


def _aligned(n: int) -> np.ndarray:
    raw = np.zeros(n + 64, np.uint8)
    off = (-raw.ctypes.data) % 64
    return raw[off:off + n]


def params(x_shape, w_shape, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1)):
    """The aie_conv2d_params of an NHWC x and OIHW w (group 1)."""
    k, c, r, s = w_shape
    return _conv_params(tuple(x_shape), k, c, r, s, tuple(strides), tuple(pads), tuple(dilations), 1)


def packed_size(p) -> int:
    return int(_api().aie_conv2d_s8_packed_size(ctypes.byref(p)))


def workspace_size(p, nthreads: int) -> int:
    return int(_api().aie_conv2d_u8s8_workspace_size(ctypes.byref(p), int(nthreads)))


def pack_conv_s8(w_oihw) -> np.ndarray:
    """Pack int8 OIHW weights for conv2d_u8s8 (and the CONV_U8S8 step): a 64-byte aligned uint8 blob."""
    w = np.ascontiguousarray(w_oihw)
    if w.dtype != np.int8 or w.ndim != 4 or min(w.shape) < 1:
        raise ValueError(f"pack_conv_s8: weights must be a non-empty int8 K x C x R x S array, got {w.dtype} "
                         f"{w.shape}")
    p = params((1,) + w.shape[2:] + (w.shape[1],), w.shape)
    size = packed_size(p)
    if size == 0:
        raise ValueError(f"pack_conv_s8: cannot pack {w.shape}: {_api().aie_last_error().decode()}")
    blob = _aligned(size)
    check(_api().aie_conv2d_s8_pack_weights(ctypes.byref(p), _ptr(w), _ptr(blob), size), "pack_conv_s8")
    return blob


def conv2d_u8s8(x_nhwc, w_oihw, *, x_zero=0, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1),
                out_dtype="int32", x_scale=None, w_scale=None, y_scale=None, y_zero=0, bias=None, activation=None,
                packed=None, threads=None) -> np.ndarray:
    """The int8 convolution of uint8 NHWC x by int8 OIHW w (packed: its pack_conv_s8 blob, made here when None).

    out_dtype "int32": the sums; "float32": sums * x_scale * w_scale[k] + bias (float32), then activation;
    "uint8": clip(round_half_even((sums + bias[k]) * x_scale * w_scale[k] / y_scale) + y_zero, 0, 255) with an
    int32 bias. Output N x P x Q x K.
    """
    fn = "conv2d_u8s8"
    x = np.ascontiguousarray(x_nhwc)
    w = np.asarray(w_oihw)
    if x.dtype != np.uint8 or x.ndim != 4:
        raise ValueError(f"{fn}: x must be a uint8 NHWC array, got {x.dtype} {x.shape}")
    if w.ndim != 4 or w.shape[1] != x.shape[3]:
        raise ValueError(f"{fn}: w {w.shape} (K x C x R x S) does not match x's {x.shape[3]} channels")
    if out_dtype not in OUT_KINDS:
        raise ValueError(f"{fn}: out_dtype {out_dtype!r} is not one of {', '.join(OUT_KINDS)}")
    p = params(x.shape, w.shape, _ints("strides", strides, 2, 1), _ints("pads", pads, 4, 0),
               _ints("dilations", dilations, 2, 1))
    P, Q = ctypes.c_int64(), ctypes.c_int64()
    if _c().aie_conv2d_output_shape(ctypes.byref(p), ctypes.byref(P), ctypes.byref(Q)) != 0:
        raise ValueError(f"{fn}: {_c().aie_last_error().decode()}")
    blob = pack_conv_s8(w) if packed is None else packed
    k = w.shape[0]
    out = np.empty((x.shape[0], P.value, Q.value, k), _OUT_DTYPES[out_dtype])
    q = Qepilogue(out=OUT_KINDS[out_dtype], y_zero=int(y_zero))
    keep = []
    if out_dtype != "int32":
        q.a_scale = float(x_scale)
        scales = _scales(fn, w_scale, k)
        q.b_scale = _ptr(scales)
        keep.append(scales)
    if out_dtype == "uint8":
        q.y_scale = float(y_scale)
        if bias is not None:
            b = np.ascontiguousarray(np.asarray(bias, np.int32).reshape(k))
            q.bias_s32 = _ptr(b)
            keep.append(b)
    elif out_dtype == "float32":
        ep, bias_keep = _epilogue(bias, activation, out.size // k, k)
        if ep is not None:
            q.ep = ctypes.addressof(ep)
            keep += [ep, bias_keep]
    nt = _threads(threads)
    wss = workspace_size(p, nt)
    ws = _workspace(wss)
    check(_api().aie_conv2d_u8s8(ctypes.byref(p), _ptr(x), int(x_zero), _ptr(blob), _ptr(out), ctypes.byref(q),
                                 _ptr(ws), wss, nt), fn)
    del keep
    return out


__all__ = ["conv2d_u8s8", "pack_conv_s8", "packed_size", "params", "workspace_size"]
