"""Convolution, transposed convolution and pooling over NHWC float32 arrays.

Layouts follow the C API (kernels/include/aie_conv.h, aie_pool.h): activations
are NHWC; weights are given in ONNX order (Conv: K x C/group x R x S,
ConvTranspose: C x K/group x R x S) and packed per call, or once with
`pack_conv_weights` for `conv2d_packed`. Pads are (top, left, bottom, right).
Activations: None, "relu", "relu6", "sigmoid", "silu", "hardswish", "gelu",
"gelu_tanh", "tanh", ("clip", lo, hi), ("leaky_relu", slope),
("hardsigmoid", alpha, beta).
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import numpy as np

from engine.errors import KernelError
from engine.kernels._lib import check, lib
from engine.kernels.abi import Conv2dParams, Epilogue, Pool2dParams, UNARY_EPILOGUE, UNARY_NAMES, Unary

_AIE_EINVAL = -1


# The C structs, generated from kernels/include/aie_ops.def: ctypes checks
# argument types by class, so the converter (engine.packing) uses these too.
ConvParams, PoolParams = Conv2dParams, Pool2dParams
CONV_FIELDS = tuple(name for name, _ in ConvParams._fields_)
POOL_FIELDS = tuple(name for name, _ in PoolParams._fields_[:-2])  # then ceil_mode, count_include_pad

# Activation name -> (code, parameter count): the unary ops a conv epilogue applies.
_ACT_PARAMS = {"clip": 2, "hardsigmoid": 2, "leaky_relu": 1}
_ACTIVATIONS = {UNARY_NAMES[u]: (u, _ACT_PARAMS.get(UNARY_NAMES[u], 0))
                for u in sorted(UNARY_EPILOGUE) if u != Unary.IDENTITY}
_POOL_MAX, _POOL_AVG = 0, 1

_bound = False


def _c():
    """The library with argument types declared (once)."""
    global _bound
    h = lib()
    if not _bound:
        cp, pp = ctypes.POINTER(ConvParams), ctypes.POINTER(PoolParams)
        i64p, vp, sz = ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p, ctypes.c_size_t
        ep = ctypes.POINTER(Epilogue)
        for name, res, args in (
            ("aie_conv2d_output_shape", ctypes.c_int, [cp, i64p, i64p]),
            ("aie_conv2d_packed_size", sz, [cp]),
            ("aie_conv2d_pack_weights", ctypes.c_int, [cp, vp, vp, sz]),
            ("aie_conv2d_workspace_size", sz, [cp, ctypes.c_int]),
            ("aie_conv2d_dw_pw_workspace_size", sz, [cp, cp, cp, ctypes.c_int]),  # engine.packing
            ("aie_conv2d_winograd_wins", ctypes.c_int, [cp]),
            ("aie_conv2d_winograd_packed_size", sz, [cp]),
            ("aie_conv2d_pack_winograd", ctypes.c_int, [cp, vp, vp, sz]),
            ("aie_conv2d", ctypes.c_int, [cp, vp, vp, vp, vp, ep, vp, vp, sz, ctypes.c_int]),
            ("aie_conv2d_bf16_packed_size", sz, [cp]),  # engine.kernels.conv_lowp
            ("aie_conv2d_bf16_pack_weights", ctypes.c_int, [cp, vp, vp, sz]),
            ("aie_conv2d_bf16_workspace_size", sz, [cp, ctypes.c_int]),
            ("aie_conv2d_bf16", ctypes.c_int, [cp, vp, vp, vp, vp, ep, vp, vp, sz, ctypes.c_int]),
            ("aie_conv2d_bf16_path", ctypes.c_char_p, []),
            ("aie_conv_transpose2d_output_shape", ctypes.c_int, [cp, i64p, i64p]),
            ("aie_conv_transpose2d_packed_size", sz, [cp]),
            ("aie_conv_transpose2d_pack_weights", ctypes.c_int, [cp, vp, vp, sz]),
            ("aie_conv_transpose2d_workspace_size", sz, [cp, ctypes.c_int]),
            ("aie_conv_transpose2d", ctypes.c_int, [cp, vp, vp, vp, ep, vp, vp, sz, ctypes.c_int]),
            ("aie_pool2d_output_shape", ctypes.c_int, [pp, i64p, i64p]),
            ("aie_pool2d", ctypes.c_int, [ctypes.c_int, pp, vp, vp, ctypes.c_int]),
            ("aie_global_pool", ctypes.c_int,
             [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, vp, vp, ctypes.c_int]),
        ):
            fn = getattr(h, name)
            fn.restype, fn.argtypes = res, args
        _bound = True
    return h


# ---- argument checking ----------------------------------------------------

def _ptr(a: np.ndarray | None):
    return None if a is None else a.ctypes.data


def _f32_array(name: str, a, ndim: int) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise ValueError(f"{name}: expected a numpy.ndarray, got {type(a).__name__}")
    if a.dtype != np.float32:
        raise ValueError(f"{name}: expected dtype float32, got {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name}: must be C-contiguous (use numpy.ascontiguousarray)")
    return a


def _ints(name: str, value, n: int, minimum: int) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in value)
    except TypeError:
        raise ValueError(f"{name}: expected {n} integers, got {value!r}") from None
    if len(out) != n or any(v < minimum for v in out):
        raise ValueError(f"{name}: expected {n} integers >= {minimum}, got {value!r}")
    return out


def _epilogue(activation) -> Epilogue:
    if activation is None:
        return Epilogue(None, 0, 0, 0.0, 0.0)
    if activation == "relu6":
        activation = ("clip", 0.0, 6.0)
    name, *params = (activation,) if isinstance(activation, str) else tuple(activation)
    if name not in _ACTIVATIONS:
        raise ValueError(f"activation {name!r} unknown: expected None, relu6 or one of {', '.join(_ACTIVATIONS)}")
    code, nparams = _ACTIVATIONS[name]
    if len(params) != nparams:
        raise ValueError(f"activation {name!r} takes {nparams} parameter(s), got {len(params)}")
    p = [float(v) for v in params] + [0.0, 0.0]
    return Epilogue(None, 0, code, p[0], p[1])


def _threads(threads: int | None) -> int:
    if threads is None:
        return 0
    if int(threads) < 1:
        raise ValueError(f"threads must be >= 1 or None (the pool's size), got {threads}")
    return int(threads)


def _aligned_bytes(n: int) -> np.ndarray:
    """n bytes starting on a 64-byte boundary (the packed layouts want it)."""
    raw = np.empty(n + 64, dtype=np.uint8)
    off = (-raw.ctypes.data) % 64
    return raw[off:off + n]


_scratch = threading.local()


def _workspace(size: int) -> np.ndarray | None:
    """A per-Python-thread scratch buffer, grown on demand and reused, so a
    benchmark loop does not page-fault a fresh workspace on every call."""
    if size == 0:
        return None
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.size < size:
        buf = _scratch.buf = _aligned_bytes(size)
    return buf


def _shape_or_raise(rc: int, what: str) -> None:
    if rc == _AIE_EINVAL:
        raise ValueError(f"{what}: {lib().aie_last_error().decode()}")
    check(rc, what)


# ---- convolution -----------------------------------------------------------

@dataclass(frozen=True)
class PackedConvWeights:
    """Weights packed once for conv2d_packed, with the attributes they were packed for."""

    blob: np.ndarray            # uint8, 64-byte aligned, position-independent
    weight_shape: tuple[int, int, int, int]  # K, C/group, R, S
    group: int
    isa: str
    winograd: bool = False      # packed by pack_conv_weights(..., winograd=True)


def _conv_params(x_shape, k, cg, r, s, strides, pads, dilations, group, out_pad=(0, 0)) -> ConvParams:
    n, h, w, c = x_shape
    return ConvParams(n, h, w, c, k, r, s, strides[0], strides[1], dilations[0], dilations[1],
                       pads[0], pads[1], pads[2], pads[3], group, out_pad[0], out_pad[1])


def _check_group(group: int, c: int, k: int, cg: int, what: str) -> None:
    if group < 1 or c % group or k % group:
        raise ValueError(f"{what}: group={group} must divide the input channels {c} and output channels {k}")
    if cg * group != c:
        raise ValueError(f"{what}: weights expect {cg * group} input channels ({cg} x group {group}), input has {c}")


def pack_conv_weights(w_oihw: np.ndarray, *, group: int = 1, winograd: bool = False) -> PackedConvWeights:
    """Pack Conv weights (K x C/group x R x S) for the selected ISA.

    winograd=True packs 3x3 weights (group 1) for the Winograd F(2x2, 3x3)
    path, which conv2d_packed then takes for stride-1, dilation-1 calls
    (2.25x fewer multiply-adds; see winograd_wins for when it is faster)."""
    w = _f32_array("weights", w_oihw, 4)
    k, cg, r, s = w.shape
    if min(w.shape) < 1 or group < 1 or k % group:
        raise ValueError(f"weights: shape {w.shape} with group={group}: every dimension must be >= 1 "
                         f"and group must divide K={k}")
    # Only C, K, R, S and groups shape the packing; the rest is a valid dummy.
    params = _conv_params((1, r, s, cg * group), k, cg, r, s, (1, 1), (0, 0, 0, 0), (1, 1), group)
    h = _c()
    size_fn, pack_fn = ((h.aie_conv2d_winograd_packed_size, h.aie_conv2d_pack_winograd) if winograd
                        else (h.aie_conv2d_packed_size, h.aie_conv2d_pack_weights))
    size = size_fn(ctypes.byref(params))
    if size == 0:
        raise ValueError(f"weights: cannot pack shape {w.shape}{' for Winograd' if winograd else ''}: "
                         f"{h.aie_last_error().decode()}")
    blob = _aligned_bytes(size)
    check(pack_fn(ctypes.byref(params), _ptr(w), _ptr(blob), size), "conv2d_pack_weights")
    return PackedConvWeights(blob, (k, cg, r, s), group, h.aie_isa_name(h.aie_selected_isa()).decode(),
                             bool(winograd))


def winograd_wins(x_shape, w_shape, *, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group: int = 1) -> bool:
    """Whether the library picks Winograd for this NHWC conv on the selected
    ISA (3x3, stride 1, dilation 1, group 1, and sizes where it measured
    faster). x_shape None: the spatial size is not known yet."""
    k, cg, r, s = w_shape
    n, hh, ww, c = x_shape if x_shape is not None else (1, 0, 0, cg * group)
    params = _conv_params((n, hh, ww, c), k, cg, r, s, _ints("strides", strides, 2, 1), _ints("pads", pads, 4, 0),
                          _ints("dilations", dilations, 2, 1), group)
    return bool(_c().aie_conv2d_winograd_wins(ctypes.byref(params)))


def _conv_operands(what: str, x_nhwc, weight_shape, group: int, bias, residual, out, strides, pads, dilations):
    """(params, x, bias, residual, y) of a Conv call, every argument checked
    (one ValueError naming it); y is `out` or a new N x P x Q x K array."""
    x = _f32_array("x", x_nhwc, 4)
    k, cg, r, s = weight_shape
    _check_group(group, x.shape[3], k, cg, what)
    strides = _ints("strides", strides, 2, 1)
    dilations = _ints("dilations", dilations, 2, 1)
    pads = _ints("pads", pads, 4, 0)
    params = _conv_params(x.shape, k, cg, r, s, strides, pads, dilations, group)
    h = _c()
    p, q = ctypes.c_int64(), ctypes.c_int64()
    _shape_or_raise(h.aie_conv2d_output_shape(ctypes.byref(params), ctypes.byref(p), ctypes.byref(q)), what)
    y_shape = (x.shape[0], p.value, q.value, k)
    if bias is not None:
        bias = _f32_array("bias", bias, 1)
        if bias.shape != (k,):
            raise ValueError(f"bias: expected shape ({k},), got {bias.shape}")
    if residual is not None:
        residual = _f32_array("residual", residual, 4)
        if residual.shape != y_shape:
            raise ValueError(f"residual: expected the output shape {y_shape}, got {residual.shape}")
    if out is None:
        y = np.empty(y_shape, dtype=np.float32)
    else:
        y = _f32_array("out", out, 4)
        if y.shape != y_shape:
            raise ValueError(f"out: expected the output shape {y_shape}, got {y.shape}")
        if y is x or np.shares_memory(y, x):
            raise ValueError("out: must not overlap the input x")
        if residual is not None and np.shares_memory(y, residual) and residual.ctypes.data != y.ctypes.data:
            raise ValueError("residual: must be `out` itself or not overlap it")
    return params, x, bias, residual, y


def conv2d_packed(x_nhwc: np.ndarray, packed: PackedConvWeights, bias: np.ndarray | None = None, *,
                  strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), activation=None,
                  residual: np.ndarray | None = None, threads: int | None = None,
                  out: np.ndarray | None = None) -> np.ndarray:
    """NHWC convolution with pre-packed weights; returns N x P x Q x K float32
    (written into `out` when given; `residual` may be `out` itself)."""
    params, x, bias, residual, y = _conv_operands("conv2d", x_nhwc, packed.weight_shape, packed.group, bias,
                                                  residual, out, strides, pads, dilations)
    ep = _epilogue(activation)
    nt = _threads(threads)
    h = _c()
    ws_size = h.aie_conv2d_workspace_size(ctypes.byref(params), nt)
    ws = _workspace(ws_size)
    rc = h.aie_conv2d(ctypes.byref(params), _ptr(x), _ptr(packed.blob), _ptr(bias), _ptr(residual),
                      ctypes.byref(ep), _ptr(y), _ptr(ws), ws_size, nt)
    if rc == _AIE_EINVAL and "packed for ISA" in lib().aie_last_error().decode():
        raise KernelError(lib().aie_last_error().decode(), hint="pack_conv_weights again after changing the ISA")
    check(rc, "conv2d")
    return y


def conv2d(x_nhwc: np.ndarray, w_oihw: np.ndarray, bias: np.ndarray | None = None, *, strides=(1, 1),
           pads=(0, 0, 0, 0), dilations=(1, 1), group: int = 1, activation=None,
           residual: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    """NHWC convolution, ONNX Conv semantics (weights K x C/group x R x S), fused epilogue
    y = activation(conv + bias + residual). Packs the weights on every call."""
    x = _f32_array("x", x_nhwc, 4)
    w = _f32_array("weights", w_oihw, 4)
    _check_group(int(group), x.shape[3], w.shape[0], w.shape[1], "conv2d")
    packed = pack_conv_weights(w, group=int(group))
    return conv2d_packed(x, packed, bias, strides=strides, pads=pads, dilations=dilations,
                         activation=activation, residual=residual, threads=threads)


def conv_transpose2d(x_nhwc: np.ndarray, w_ckrs: np.ndarray, bias: np.ndarray | None = None, *,
                     strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), output_padding=(0, 0),
                     group: int = 1, activation=None, threads: int | None = None) -> np.ndarray:
    """NHWC transposed convolution, ONNX ConvTranspose semantics with explicit pads
    (weights C x K/group x R x S)."""
    x = _f32_array("x", x_nhwc, 4)
    w = _f32_array("weights", w_ckrs, 4)
    c, kg, r, s = w.shape
    group = int(group)
    if group < 1 or c % group or x.shape[3] != c:
        raise ValueError(f"conv_transpose2d: weights have {c} input channels, input has {x.shape[3]}, "
                         f"and group={group} must divide them")
    k = kg * group
    strides = _ints("strides", strides, 2, 1)
    dilations = _ints("dilations", dilations, 2, 1)
    pads = _ints("pads", pads, 4, 0)
    out_pad = _ints("output_padding", output_padding, 2, 0)
    params = ConvParams(x.shape[0], x.shape[1], x.shape[2], c, k, r, s, strides[0], strides[1],
                         dilations[0], dilations[1], pads[0], pads[1], pads[2], pads[3], group,
                         out_pad[0], out_pad[1])
    h = _c()
    p, q = ctypes.c_int64(), ctypes.c_int64()
    _shape_or_raise(h.aie_conv_transpose2d_output_shape(ctypes.byref(params), ctypes.byref(p), ctypes.byref(q)),
                    "conv_transpose2d")
    if bias is not None:
        bias = _f32_array("bias", bias, 1)
        if bias.shape != (k,):
            raise ValueError(f"bias: expected shape ({k},), got {bias.shape}")
    size = h.aie_conv_transpose2d_packed_size(ctypes.byref(params))
    blob = _aligned_bytes(size)
    check(h.aie_conv_transpose2d_pack_weights(ctypes.byref(params), _ptr(w), _ptr(blob), size),
          "conv_transpose2d_pack_weights")
    ep = _epilogue(activation)
    nt = _threads(threads)
    y = np.empty((x.shape[0], p.value, q.value, k), dtype=np.float32)
    ws_size = h.aie_conv_transpose2d_workspace_size(ctypes.byref(params), nt)
    ws = _workspace(ws_size)
    check(h.aie_conv_transpose2d(ctypes.byref(params), _ptr(x), _ptr(blob), _ptr(bias), ctypes.byref(ep),
                                 _ptr(y), _ptr(ws), ws_size, nt), "conv_transpose2d")
    return y


# ---- pooling ---------------------------------------------------------------

def _pool(kind: int, what: str, x_nhwc, kernel, strides, pads, dilations, ceil_mode, count_include_pad,
          threads) -> np.ndarray:
    x = _f32_array("x", x_nhwc, 4)
    kernel = _ints("kernel", kernel, 2, 1)
    strides = _ints("strides", strides if strides is not None else (1, 1), 2, 1)
    dilations = _ints("dilations", dilations, 2, 1)
    pads = _ints("pads", pads, 4, 0)
    params = PoolParams(*x.shape, *kernel, *strides, *dilations, *pads, int(bool(ceil_mode)),
                         int(bool(count_include_pad)))
    h = _c()
    p, q = ctypes.c_int64(), ctypes.c_int64()
    _shape_or_raise(h.aie_pool2d_output_shape(ctypes.byref(params), ctypes.byref(p), ctypes.byref(q)), what)
    y = np.empty((x.shape[0], p.value, q.value, x.shape[3]), dtype=np.float32)
    check(h.aie_pool2d(kind, ctypes.byref(params), _ptr(x), _ptr(y), _threads(threads)), what)
    return y


def max_pool2d(x_nhwc: np.ndarray, kernel, *, strides=None, pads=(0, 0, 0, 0), dilations=(1, 1),
               ceil_mode: bool = False, threads: int | None = None) -> np.ndarray:
    """NHWC max pooling, ONNX MaxPool semantics (strides default to 1)."""
    return _pool(_POOL_MAX, "max_pool2d", x_nhwc, kernel, strides, pads, dilations, ceil_mode, False, threads)


def avg_pool2d(x_nhwc: np.ndarray, kernel, *, strides=None, pads=(0, 0, 0, 0), dilations=(1, 1),
               ceil_mode: bool = False, count_include_pad: bool = False,
               threads: int | None = None) -> np.ndarray:
    """NHWC average pooling, ONNX AveragePool semantics (strides default to 1)."""
    return _pool(_POOL_AVG, "avg_pool2d", x_nhwc, kernel, strides, pads, dilations, ceil_mode,
                 count_include_pad, threads)


def _global(kind: int, x_nhwc, threads) -> np.ndarray:
    x = _f32_array("x", x_nhwc, 4)
    n, h, w, c = x.shape
    if h < 1 or w < 1 or c < 1:
        raise ValueError(f"x: global pooling needs H, W, C >= 1, got shape {x.shape}")
    y = np.empty((n, 1, 1, c), dtype=np.float32)
    check(_c().aie_global_pool(kind, n, h * w, c, _ptr(x), _ptr(y), _threads(threads)), "global_pool")
    return y


def global_avg_pool(x_nhwc: np.ndarray, *, threads: int | None = None) -> np.ndarray:
    """Mean over H and W: N x H x W x C -> N x 1 x 1 x C."""
    return _global(_POOL_AVG, x_nhwc, threads)


def global_max_pool(x_nhwc: np.ndarray, *, threads: int | None = None) -> np.ndarray:
    """Max over H and W (NaN propagates): N x H x W x C -> N x 1 x 1 x C."""
    return _global(_POOL_MAX, x_nhwc, threads)


__all__ = ["PackedConvWeights", "pack_conv_weights", "winograd_wins", "conv2d", "conv2d_packed", "conv_transpose2d",
           "max_pool2d", "avg_pool2d", "global_avg_pool", "global_max_pool"]
