"""bf16 convolution over NHWC float32 arrays: aie_conv2d_bf16 (kernels/include/aie_conv_lowp.h).

x and y stay float32; the weights are rounded to bf16 once, when packed
(pack_conv_weights_bf16, or pack_conv_bf16 for the converter's raw blob),
and x while each call packs its im2col rows; products are summed in float32.
The packed layout is the same at every ISA level, so a blob packed on an AMX
host runs anywhere (the portable path where the CPU has no bf16 units).
groups must be 1 (grouped and depthwise convolutions stay float32). Error
bounds are stated in the C header; activations as engine.kernels.conv.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from engine.errors import KernelError
from engine.kernels._lib import check
from engine.kernels.conv import (ConvParams, _aligned_bytes, _c, _conv_operands, _conv_params, _epilogue, _f32_array,
                                 _ptr, _threads, _workspace)

# The packed-conv blob header (kernels/core/conv_pack.h): magic "AIEC",
# version, isa, kind as little-endian uint32s; kind 5 = AIE_CONV_PACK_BF16.
_CONV_PACK_MAGIC, _CONV_PACK_BF16 = 0x43454941, 5


def _lib():
    """The library, its conv signatures (these included) declared by engine.kernels.conv."""
    return _c()


def conv_bf16_path() -> str:
    """The micro-kernel aie_conv2d_bf16 runs at the selected level, e.g. "amx_bf16_32x32"."""
    return _lib().aie_conv2d_bf16_path().decode()


def is_bf16_conv_blob(blob: np.ndarray) -> bool:
    """Whether blob was packed by pack_conv_bf16 (its header's kind)."""
    head = np.frombuffer(np.ascontiguousarray(blob[:16]).tobytes(), "<u4") if blob.size >= 16 else ()
    return len(head) == 4 and int(head[0]) == _CONV_PACK_MAGIC and int(head[3]) == _CONV_PACK_BF16


def pack_conv_bf16(w_oihw: np.ndarray) -> np.ndarray:
    """Conv weights (K x C x R x S, group 1) rounded to bf16 and packed: the
    64-byte-aligned uint8 blob aie_conv2d_bf16 reads, valid at every level."""
    w = _f32_array("weights", w_oihw, 4)
    k, c, r, s = w.shape
    if min(w.shape) < 1:
        raise ValueError(f"weights: shape {w.shape}: every dimension must be >= 1")
    # Only C, K, R and S shape the packing; the rest is a valid dummy.
    params = _conv_params((1, r, s, c), k, c, r, s, (1, 1), (0, 0, 0, 0), (1, 1), 1)
    h = _lib()
    size = int(h.aie_conv2d_bf16_packed_size(ctypes.byref(params)))
    if size == 0:
        raise KernelError(f"cannot pack bf16 conv weights of shape {w.shape}: {h.aie_last_error().decode()}")
    blob = _aligned_bytes(size)
    check(h.aie_conv2d_bf16_pack_weights(ctypes.byref(params), _ptr(w), _ptr(blob), size), "conv2d_bf16_pack_weights")
    return blob


def conv_bf16_workspace(p: ConvParams, nthreads: int) -> int:
    """Workspace of an aie_conv2d_bf16 call on nthreads or on 1 (as engine.packing.conv_workspace)."""
    fn = _lib().aie_conv2d_bf16_workspace_size
    return max(int(fn(ctypes.byref(p), n)) for n in {1, max(int(nthreads), 1)})


@dataclass(frozen=True)
class PackedConvWeightsBf16:
    """Conv weights packed once for conv2d_bf16 (bf16, valid at every level)."""

    blob: np.ndarray                         # uint8, 64-byte aligned, position-independent
    weight_shape: tuple[int, int, int, int]  # K, C, R, S

    group = 1


def pack_conv_weights_bf16(w_oihw: np.ndarray) -> PackedConvWeightsBf16:
    """Pack Conv weights (K x C x R x S, group 1) for conv2d_bf16, rounding them to bf16."""
    blob = pack_conv_bf16(w_oihw)
    return PackedConvWeightsBf16(blob, tuple(int(d) for d in w_oihw.shape))


def conv2d_bf16(x_nhwc: np.ndarray, packed: PackedConvWeightsBf16, bias: np.ndarray | None = None, *,
                strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), activation=None,
                residual: np.ndarray | None = None, threads: int | None = None,
                out: np.ndarray | None = None) -> np.ndarray:
    """NHWC convolution, bf16 products and float32 sums, with the fused epilogue
    y = activation(conv + residual + bias); returns N x P x Q x K float32 (into
    `out` when given; `residual` may be `out` itself)."""
    if not isinstance(packed, PackedConvWeightsBf16):
        raise ValueError(f"packed: expected PackedConvWeightsBf16 from pack_conv_weights_bf16, "
                         f"got {type(packed).__name__}")
    params, x, bias, residual, y = _conv_operands("conv2d_bf16", x_nhwc, packed.weight_shape, 1, bias, residual,
                                                  out, strides, pads, dilations)
    ep = _epilogue(activation)
    nt = _threads(threads)
    h = _lib()
    ws_size = h.aie_conv2d_bf16_workspace_size(ctypes.byref(params), nt)
    ws = _workspace(ws_size)
    check(h.aie_conv2d_bf16(ctypes.byref(params), _ptr(x), _ptr(packed.blob), _ptr(bias), _ptr(residual),
                            ctypes.byref(ep), _ptr(y), _ptr(ws), ws_size, nt), "conv2d_bf16")
    return y


__all__ = ["PackedConvWeightsBf16", "conv2d_bf16", "conv_bf16_path", "conv_bf16_workspace", "is_bf16_conv_blob",
           "pack_conv_bf16", "pack_conv_weights_bf16"]
