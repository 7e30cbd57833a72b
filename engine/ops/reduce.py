"""Reductions and normalisations: Reduce*, Softmax/LogSoftmax,
LayerNormalization, ArgMax/ArgMin, CumSum."""

from __future__ import annotations

import numpy as np

from engine.ir import NUMPY_TO_ONNX
from engine.kernels.abi import AxisStep, NormStep, Op, Reduce, ReduceStep, SoftmaxStep
from engine.lowering import LoweringContext
from engine.ops.common import normalize_axis
from engine.ops.data import emit_fill

REDUCE = {"ReduceSum": Reduce.SUM, "ReduceMean": Reduce.MEAN, "ReduceMax": Reduce.MAX, "ReduceMin": Reduce.MIN,
          "ReduceProd": Reduce.PROD, "ReduceSumSquare": Reduce.SUM_SQUARE, "ReduceL1": Reduce.L1,
          "ReduceL2": Reduce.L2, "ReduceLogSum": Reduce.LOG_SUM, "ReduceLogSumExp": Reduce.LOG_SUM_EXP}
# First opset where the op takes axes as an input instead of an attribute.
AXES_INPUT_SINCE = {"ReduceSum": 13}


def axis_step(x, axis: int, flag0: int, flag1: int) -> AxisStep:
    """The [outer, n, inner] view of x around `axis` with the op's two flags
    (aie_axis_step: ArgMax/ArgMin, CumSum, CumProd, TopK)."""
    return AxisStep(dtype=NUMPY_TO_ONNX[x.dtype], outer=int(np.prod(x.shape[:axis], dtype=np.int64)), n=x.shape[axis],
                    inner=int(np.prod(x.shape[axis + 1:], dtype=np.int64)), flag0=flag0, flag1=flag1)


def emit_reduce(ctx, out, x, op: int, reduced: list[int]) -> None:
    if out.size == 0:
        return
    if x.size == 0:
        raise ctx.unsupported(f"reduction of an empty tensor {x.shape}")
    shape, red = [], []
    for d, r in zip(x.shape, reduced):  # merge neighbours with the same role
        if shape and red[-1] == r:
            shape[-1] *= d
        else:
            shape.append(d)
            red.append(r)
    ctx.step(Op.REDUCE, [out, x], ReduceStep(op=op, dtype=NUMPY_TO_ONNX[x.dtype], rank=len(shape)).words(shape, red))


def lower_reduce(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    op = REDUCE[ctx.node.op]
    allowed = (np.float32, np.float64, np.int32, np.int64) if op in (0, 2, 3, 4) else (np.float32, np.float64)
    if op in (2, 3):
        allowed = allowed + (np.uint8, np.int8)
    ctx.require_dtype(x, allowed)
    since = AXES_INPUT_SINCE.get(ctx.node.op, 18)
    if ctx.opset >= since:
        axes = ctx.const(1, "axes") if ctx.input(1) is not None else None
        axes = None if axes is None or axes.size == 0 else [int(a) for a in axes.reshape(-1)]
    else:
        axes = ctx.attr("axes")
    if axes is None and ctx.attr("noop_with_empty_axes", 0):
        ctx.alias(0, x, x.shape)
        return
    keep = ctx.attr("keepdims", 1)
    axes = set(range(x.rank)) if axes is None else {normalize_axis(a, x.rank, ctx) for a in axes}
    shape = [1 if d in axes else n for d, n in enumerate(x.shape)] if keep else \
        [n for d, n in enumerate(x.shape) if d not in axes]
    out = ctx.out(0, shape, x.dtype)
    if x.size == 0:
        init = {0: 0, 1: np.nan, 2: -np.inf, 3: np.inf, 4: 1, 5: 0, 6: 0, 7: 0, 8: -np.inf, 9: -np.inf}[op]
        if x.dtype.kind != "f" and op in (2, 3):
            init = np.iinfo(x.dtype).min if op == 2 else np.iinfo(x.dtype).max
        emit_fill(ctx, out, init)
        return
    emit_reduce(ctx, out, x, op, [1 if d in axes else 0 for d in range(x.rank)])


def lower_softmax(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32,))
    axis = normalize_axis(ctx.attr("axis", -1 if ctx.opset >= 13 else 1), x.rank, ctx)
    out = ctx.out(0, x.shape, np.float32)
    if out.size == 0:
        return
    if ctx.opset >= 13:
        outer = int(np.prod(x.shape[:axis], dtype=np.int64))
        n, inner = x.shape[axis], int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    else:  # opset < 13: softmax over the flattened trailing block
        outer, n, inner = int(np.prod(x.shape[:axis], dtype=np.int64)), int(np.prod(x.shape[axis:], dtype=np.int64)), 1
    ctx.step(Op.SOFTMAX, [out, x], SoftmaxStep(outer=outer, n=n, inner=inner, log=ctx.node.op == "LogSoftmax").words())


def lower_layernorm(ctx: LoweringContext) -> None:
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    ctx.require_dtype(x, (np.float32,))
    if any(o for o in ctx.node.outputs[1:]):
        raise ctx.unsupported("Mean / InvStdDev outputs")
    axis = normalize_axis(ctx.attr("axis", -1), x.rank, ctx)
    n = int(np.prod(x.shape[axis:], dtype=np.int64))
    for v, what in ((scale, "scale"), (bias, "bias")):
        if v is not None and v.size != n:
            raise ctx.unsupported(f"{what} of shape {v.shape} does not cover the normalised block {x.shape[axis:]}")
    out = ctx.out(0, x.shape, np.float32)
    if out.size:
        ctx.step(Op.LAYERNORM, [out, x, scale, bias], NormStep(rows=x.size // n, cols=n).words(),
                 [ctx.attr("epsilon", 1e-5)])


def lower_argmax(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32, np.float64, np.int32, np.int64, np.uint8, np.int8))
    axis = normalize_axis(ctx.attr("axis", 0), x.rank, ctx)
    keep = ctx.attr("keepdims", 1)
    shape = list(x.shape)
    if keep:
        shape[axis] = 1
    else:
        shape.pop(axis)
    out = ctx.out(0, shape, np.int64)
    if out.size == 0:
        return
    if x.shape[axis] == 0:
        raise ctx.unsupported("ArgMax over an empty axis")
    ctx.step(Op.ARGMAX, [out, x], axis_step(x, axis, ctx.attr("select_last_index", 0),
                                            1 if ctx.node.op == "ArgMin" else 0).words())


def lower_cumsum(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32, np.float64, np.int32, np.int64))
    axis = normalize_axis(int(ctx.const(1, "axis").reshape(-1)[0]), x.rank, ctx)
    out = ctx.out(0, x.shape, x.dtype)
    if out.size:
        ctx.step(Op.CUMSUM, [out, x], axis_step(x, axis, ctx.attr("exclusive", 0), ctx.attr("reverse", 0)).words())


RULES = {name: {1: lower_reduce} for name in REDUCE}
RULES.update({"Softmax": {1: lower_softmax}, "LogSoftmax": {1: lower_softmax},
              "ArgMax": {1: lower_argmax}, "ArgMin": {1: lower_argmax},
              "CumSum": {11: lower_cumsum}})
ATTRS = {name: {"axes", "keepdims", "noop_with_empty_axes"} for name in REDUCE}
ATTRS.update({"Softmax": {"axis"}, "LogSoftmax": {"axis"},
              "ArgMax": {"axis", "keepdims", "select_last_index"}, "ArgMin": {"axis", "keepdims", "select_last_index"},
              "CumSum": {"exclusive", "reverse"}})
