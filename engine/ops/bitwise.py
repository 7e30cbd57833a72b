"""BitShift (one broadcasting executor step; signed types as the ONNX
reference: arithmetic right shift, left shift on the bits), BitwiseNot (Xor
with all ones) and BitCast (a view as another type of the same width)."""

from __future__ import annotations

import numpy as np

from engine.ir import NUMPY_TO_ONNX, ONNX_TO_NUMPY
from engine.kernels.abi import BitshiftStep, Op
from engine.lowering import LoweringContext, Value
from engine.ops.common import INTS, broadcast_shape, broadcast_strides, collapse, contiguous_strides
from engine.ops.compose import Composer

def lower_bitshift(ctx: LoweringContext) -> None:
    a, b = ctx.input(0), ctx.input(1)
    ctx.require_dtype(a, INTS)
    if b.dtype != a.dtype:
        raise ctx.unsupported(f"input dtypes differ: {a.dtype.name} and {b.dtype.name}")
    direction = ctx.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.unsupported(f"direction={direction!r} (LEFT or RIGHT)")
    try:
        shape = broadcast_shape(a.shape, b.shape)
    except ValueError as exc:
        raise ctx.unsupported(str(exc)) from None
    out = ctx.out(0, shape, a.dtype)
    if out.size == 0:
        return
    cshape, (so, sa, sb) = collapse(shape, contiguous_strides(shape), broadcast_strides(a.shape, shape),
                                    broadcast_strides(b.shape, shape))
    params = BitshiftStep(dtype=NUMPY_TO_ONNX[a.dtype], right=direction == "RIGHT", rank=len(cshape))
    ctx.step(Op.BITSHIFT, [out, a, b], params.words(cshape, so, sa, sb))


def lower_bitwise_not(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, INTS)
    c = Composer(ctx)
    ones = np.array(-1).astype(x.dtype) if x.dtype.kind == "i" else np.array(np.iinfo(x.dtype).max, x.dtype)
    c.out(0, c.op("BitwiseXor", x, c.scalar(ones, x.dtype)))


def lower_bitcast(ctx: LoweringContext) -> None:
    """The same bytes read as another type of the same width: a view."""
    x = ctx.input(0)
    to = ctx.attr("to")
    if to not in ONNX_TO_NUMPY:
        raise ctx.unsupported(f"to={to}")
    dtype = np.dtype(ONNX_TO_NUMPY[to])
    if dtype.itemsize != x.dtype.itemsize:
        raise ctx.unsupported(f"{x.dtype.name} -> {dtype.name}: widths differ")
    if x.const is not None and x.buf is None:
        ctx.const_out(0, x.const.view(dtype))
    else:
        ctx.set_out(0, Value(x.shape, dtype, buf=x.buf, offset=x.offset))


RULES = {"BitShift": {11: lower_bitshift}, "BitwiseNot": {18: lower_bitwise_not}, "BitCast": {26: lower_bitcast}}
ATTRS = {"BitShift": {"direction"}, "BitCast": {"to"}}
