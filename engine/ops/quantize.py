"""QuantizeLinear, DequantizeLinear (8/16-bit integers) and
DynamicQuantizeLinear, composed so that every step is the one the ONNX
reference takes, in the same precision (hence exact): dequantize
(float32(x) - zero_point) * scale; quantize clip(rint(x / scale) +
zero_point) in int32, then narrowed.
Per-tensor, per-axis and blocked scales; per-tensor 8-bit (and int32
dequantisation) with plan-time scale and zero point run as one QUANTIZE /
DEQUANTIZE step, the same operations in one pass. float8 / int4 types stay
unsupported (the importer rejects them)."""

from __future__ import annotations

import numpy as np

from engine.ir import NUMPY_TO_ONNX, ONNX_TO_NUMPY
from engine.kernels.abi import Op, QcastStep
from engine.lowering import LoweringContext
from engine.ops.common import normalize_axis
from engine.ops.compose import Composer, ints

_QUANT = (np.uint8, np.int8, np.uint16, np.int16)


def _broadcastable(c: Composer, v, x, axis: int, block: int):
    """Scale / zero point shaped to broadcast against x (the reference's
    reshape_input: scalar, per-axis vector, or blocks repeated along axis)."""
    if v.rank == 0:
        return v
    if v.size == 1:
        return c.reshape(v, [])
    axis = normalize_axis(axis, x.rank, c.ctx)
    if not block:
        if v.rank != 1 or v.size != x.shape[axis]:
            raise c.ctx.unsupported(f"per-axis parameter of shape {v.shape} for axis {axis} of {x.shape}")
        return c.reshape(v, [v.size if d == axis else 1 for d in range(x.rank)])
    if v.rank != x.rank or v.shape[axis] * block != x.shape[axis] \
            or any(v.shape[d] != x.shape[d] for d in range(x.rank) if d != axis):
        raise c.ctx.unsupported(f"blocked parameter of shape {v.shape} (block {block}) for {x.shape}")
    wide = c.op("Expand", c.op("Unsqueeze", v, ints([axis + 1])),
                ints([block if d == axis + 1 else 1 for d in range(x.rank + 1)]))
    return c.reshape(wide, list(x.shape))


def _axis_block(ctx):
    # The axis matters (and is checked) only for per-axis and blocked scales.
    return ctx.attr("axis", 1), ctx.attr("block_size", 0)


def _per_tensor(ctx, scale, zp, dtypes) -> tuple[float, int] | None:
    """(scale, zero point) when both are plan-time scalars and the integer type
    has a one-pass step (QUANTIZE / DEQUANTIZE); else None (the composed path)."""
    if scale.const is None or scale.size != 1 or (zp is not None and (zp.const is None or zp.size != 1)):
        return None
    if (zp.dtype if zp is not None else np.dtype(np.uint8)) not in [np.dtype(t) for t in dtypes]:
        return None
    return float(scale.const.reshape(())), int(zp.const.reshape(())) if zp is not None else 0


def _qcast(ctx, op, y, x, qtype, scale: float, zero: int) -> None:
    if y.size:
        ctx.step(op, [y, x], QcastStep(n=y.size, dtype=NUMPY_TO_ONNX[np.dtype(qtype)], zero=zero).words(), [scale])


def lower_dequantize_linear(ctx: LoweringContext) -> None:
    x, scale, zp = ctx.input(0), ctx.input(1), ctx.input(2)
    ctx.require_dtype(x, _QUANT + (np.int32,))
    ctx.require_dtype(scale, (np.float32,), "scale")
    out_dt = ctx.attr("output_dtype", 0)
    if out_dt and ONNX_TO_NUMPY.get(out_dt) != np.float32:
        raise ctx.unsupported(f"output_dtype {out_dt} (only float32)")
    if zp is not None and zp.dtype != x.dtype:
        raise ctx.unsupported(f"zero point dtype {zp.dtype.name} differs from x {x.dtype.name}")
    qp = _per_tensor(ctx, scale, zp, (np.uint8, np.int8, np.int32)) if x.dtype in (np.uint8, np.int8, np.int32) \
        else None
    if qp is not None:
        _qcast(ctx, Op.DEQUANTIZE, ctx.out(0, x.shape, np.float32), x, x.dtype, *qp)
        return
    axis, block = _axis_block(ctx)
    c = Composer(ctx)
    dx = c.cast(x, np.float32)
    if zp is not None:
        dx = c.sub(dx, _broadcastable(c, c.cast(zp, np.float32), x, axis, block))
    c.out(0, c.mul(dx, _broadcastable(c, scale, x, axis, block)))


def lower_quantize_linear(ctx: LoweringContext) -> None:
    x, scale, zp = ctx.input(0), ctx.input(1), ctx.input(2)
    ctx.require_dtype(x, (np.float32,))
    ctx.require_dtype(scale, (np.float32,), "scale")
    if ctx.attr("precision", 0):
        raise ctx.unsupported("precision")
    out_dt = ctx.attr("output_dtype", 0)
    target = zp.dtype if zp is not None else np.dtype(ONNX_TO_NUMPY.get(out_dt, np.uint8)) if out_dt \
        else np.dtype(np.uint8)
    if out_dt and ONNX_TO_NUMPY.get(out_dt) != target:
        raise ctx.unsupported(f"output_dtype {out_dt} and zero point {target.name} disagree")
    if target not in [np.dtype(t) for t in _QUANT]:
        raise ctx.unsupported(f"quantized type {target.name} (supported: uint8, int8, uint16, int16)")
    qp = _per_tensor(ctx, scale, zp, (np.uint8, np.int8)) if target in (np.uint8, np.int8) else None
    if qp is not None:
        _qcast(ctx, Op.QUANTIZE, ctx.out(0, x.shape, target), x, target, *qp)
        return
    axis, block = _axis_block(ctx)
    c = Composer(ctx)
    q = c.cast(c.op("Round", c.div(x, _broadcastable(c, scale, x, axis, block))), np.int32)
    if zp is not None:
        q = c.add(q, _broadcastable(c, c.cast(zp, np.int32), x, axis, block))
    info = np.iinfo(target)
    q = c.op("Clip", q, c.scalar(info.min, np.int32), c.scalar(info.max, np.int32))
    c.out(0, c.cast(q, target))


def lower_dynamic_quantize_linear(ctx: LoweringContext) -> None:
    """The ONNX function body: a uint8 scale and zero point from the range
    of x (widened to include 0), then QuantizeLinear."""
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32,))
    if x.size == 0:
        raise ctx.unsupported(f"an empty input {x.shape}")
    c = Composer(ctx)
    zero = c.scalar(0, np.float32)
    lo = c.op("Min", c.reduce("ReduceMin", x, list(range(x.rank)), keepdims=0), zero)
    hi = c.op("Max", c.reduce("ReduceMax", x, list(range(x.rank)), keepdims=0), zero)
    scale = c.div(c.sub(hi, lo), c.scalar(255, np.float32))
    zp_fp = c.op("Clip", c.sub(zero, c.div(lo, scale)), zero, c.scalar(255, np.float32))
    zp = c.cast(c.op("Round", zp_fp), np.uint8)
    c.out(0, c.op("QuantizeLinear", x, scale, zp))
    c.out(1, scale)
    c.out(2, zp)


RULES = {"QuantizeLinear": {10: lower_quantize_linear}, "DequantizeLinear": {10: lower_dequantize_linear},
         "DynamicQuantizeLinear": {11: lower_dynamic_quantize_linear}}
ATTRS = {"QuantizeLinear": {"axis", "saturate", "block_size", "output_dtype", "precision"},
         "DequantizeLinear": {"axis", "block_size", "output_dtype"}}
