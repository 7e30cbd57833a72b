"""Ops that select, mask or gate elements, composed from comparisons, Where
and element-wise steps: Trilu, Hardmax, OneHot, EyeLike, Dropout
(inference), Shrink, Swish, SwiGLU, ReverseSequence. Masks that depend only
on shapes are plan-time constants."""

from __future__ import annotations

import numpy as np

from engine.ir import ONNX_TO_NUMPY
from engine.lowering import LoweringContext
from engine.ops.common import FLOATS, NUMERIC, normalize_axis
from engine.ops.compose import Composer, const, ints, wanted


def lower_trilu(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, NUMERIC + (np.bool_,))
    if x.rank < 2:
        raise ctx.unsupported(f"input of rank {x.rank} (needs >= 2)")
    k = int(ctx.const(1, "k").reshape(-1)[0]) if ctx.input(1) is not None else 0
    n, m = x.shape[-2:]
    diag = np.arange(m)[None, :] - np.arange(n)[:, None]
    keep = diag >= k if ctx.attr("upper", 1) else diag <= k
    c = Composer(ctx)
    c.out(0, c.where(const(keep), x, c.scalar(0, x.dtype)))


def lower_hardmax(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32, np.float64))
    c = Composer(ctx)
    if ctx.opset < 13:  # the input is coerced to 2-D around axis
        axis = normalize_axis(ctx.attr("axis", 1), x.rank, ctx)
        lead = int(np.prod(x.shape[:axis], dtype=np.int64))
        flat = c.reshape(x, [lead, int(np.prod(x.shape[axis:], dtype=np.int64))])
        c.out(0, c.reshape(_hardmax(c, flat, 1), x.shape))
        return
    c.out(0, _hardmax(c, x, normalize_axis(ctx.attr("axis", -1), x.rank, ctx)))


def _hardmax(c: Composer, x, axis: int):
    if x.size == 0:
        return c.op("Identity", x)
    # ArgMax keeps the first maximum, as Hardmax does.
    idx = c.op("ArgMax", x, axis=axis, keepdims=1)
    iota = np.arange(x.shape[axis], dtype=np.int64).reshape([-1 if d == axis else 1 for d in range(x.rank)])
    return c.cast(c.op("Equal", idx, const(iota)), x.dtype)


def lower_one_hot(ctx: LoweringContext) -> None:
    indices, values = ctx.input(0), ctx.input(2)
    ctx.require_dtype(indices, NUMERIC)
    ctx.require_dtype(values, NUMERIC + (np.bool_,), "values")
    depth = ctx.const(1, "depth").reshape(-1)[0]
    if float(depth) != int(depth) or int(depth) < 0:
        raise ctx.unsupported(f"depth {depth} (a non-negative integer)")
    depth = int(depth)
    if values.size != 2:
        raise ctx.unsupported(f"values of shape {values.shape} (needs [off, on])")
    r = indices.rank + 1
    axis = normalize_axis(ctx.attr("axis", -1), r, ctx)
    c = Composer(ctx)
    # Fractional indices truncate toward zero (the reference's astype(int64)).
    idx = c.cast(indices, np.int64)
    # In-range negative indices wrap once; out-of-range ones match nothing.
    idx = c.where(c.op("Less", idx, c.scalar(0, np.int64)), c.add(idx, c.scalar(depth, np.int64)), idx)
    idx = c.op("Unsqueeze", idx, ints([axis]))
    iota = np.arange(depth, dtype=np.int64).reshape([-1 if d == axis else 1 for d in range(r)])
    hit = c.op("Equal", idx, const(iota))
    flat = c.reshape(values, [2])
    off = c.op("Gather", flat, const(np.int64(0)), axis=0)
    on = c.op("Gather", flat, const(np.int64(1)), axis=0)
    c.out(0, c.where(hit, on, off))


def lower_eye_like(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    if x.rank != 2:
        raise ctx.unsupported(f"input of rank {x.rank} (needs 2)")
    dt = ctx.attr("dtype")
    if dt is not None and dt not in ONNX_TO_NUMPY:
        raise ctx.unsupported(f"dtype {dt}")
    dtype = ONNX_TO_NUMPY[dt] if dt is not None else x.dtype
    # A function of the input's shape only: a plan-time constant.
    ctx.const_out(0, np.eye(x.shape[0], x.shape[1], k=ctx.attr("k", 0), dtype=dtype))


def lower_dropout(ctx: LoweringContext) -> None:
    """Inference Dropout is the identity with an all-true mask; training
    with a positive ratio draws random numbers and is not supported."""
    x = ctx.input(0)
    training = False
    if ctx.opset >= 12:
        ratio = float(ctx.const(1, "ratio").reshape(-1)[0]) if ctx.input(1) is not None else 0.5
        if ctx.input(2) is not None:
            training = bool(ctx.const(2, "training_mode").reshape(-1)[0])
    else:
        ratio = ctx.attr("ratio", 0.5)
        training = ctx.opset < 7 and not ctx.attr("is_test", 0)
    if training and ratio != 0.0:
        raise ctx.unsupported(f"training_mode with ratio {ratio} (random masks)")
    ctx.alias(0, x, x.shape)
    if wanted(ctx, 1):
        ctx.const_out(1, np.ones(x.shape, np.bool_))


def lower_shrink(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32, np.float64))
    lambd, bias = ctx.attr("lambd", 0.5), ctx.attr("bias", 0.0)
    c = Composer(ctx)
    lo = c.where(c.op("Less", x, c.scalar(-lambd, x.dtype)), c.add(x, c.scalar(bias, x.dtype)), c.scalar(0, x.dtype))
    c.out(0, c.where(c.op("Greater", x, c.scalar(lambd, x.dtype)), c.sub(x, c.scalar(bias, x.dtype)), lo))


def lower_swish(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, FLOATS)
    c = Composer(ctx)
    alpha = ctx.attr("alpha", 1.0)
    z = x if alpha == 1.0 else c.mul(x, c.scalar(alpha, x.dtype))
    c.out(0, c.mul(x, c.op("Sigmoid", z)))


def lower_swiglu(ctx: LoweringContext) -> None:
    a, b = ctx.input(0), ctx.input(1)
    ctx.require_dtype(a, FLOATS)
    if b.shape != a.shape or b.dtype != a.dtype:
        raise ctx.unsupported(f"A {a.shape} {a.dtype.name} and B {b.shape} {b.dtype.name} differ")
    c = Composer(ctx)
    alpha = ctx.attr("alpha", 1.0)
    z = a if alpha == 1.0 else c.mul(a, c.scalar(alpha, a.dtype))
    c.out(0, c.mul(c.mul(a, c.op("Sigmoid", z)), b))


def lower_reverse_sequence(ctx: LoweringContext) -> None:
    """Position t of batch b reads lens[b] - 1 - t while t < lens[b]: the
    gather indices are computed by steps, so the lengths may change per run."""
    x, lens = ctx.input(0), ctx.input(1)
    ctx.require_dtype(lens, (np.int32, np.int64), "sequence_lens")
    t_ax, b_ax = ctx.attr("time_axis", 0), ctx.attr("batch_axis", 1)
    if x.rank < 2 or {t_ax, b_ax} not in ({0, 1},) or lens.shape != (x.shape[b_ax],):
        raise ctx.unsupported(f"input {x.shape}, sequence_lens {lens.shape}, time_axis {t_ax}, batch_axis {b_ax}")
    c = Composer(ctx)
    steps = const(np.arange(x.shape[t_ax], dtype=np.int64).reshape([-1 if d == t_ax else 1 for d in range(x.rank)]))
    n = c.reshape(c.cast(lens, np.int64), [-1 if d == b_ax else 1 for d in range(x.rank)])
    reversed_pos = c.sub(c.sub(n, c.scalar(1, np.int64)), steps)
    idx = c.where(c.op("Less", steps, n), reversed_pos, steps)
    c.out(0, c.op("GatherElements", x, c.op("Expand", idx, ints(x.shape)), axis=t_ax))


RULES = {
    "Trilu": {14: lower_trilu}, "Hardmax": {1: lower_hardmax}, "OneHot": {9: lower_one_hot},
    "EyeLike": {9: lower_eye_like}, "Dropout": {1: lower_dropout}, "Shrink": {9: lower_shrink},
    "Swish": {24: lower_swish}, "SwiGLU": {28: lower_swiglu}, "ReverseSequence": {10: lower_reverse_sequence},
}
ATTRS = {
    "Trilu": {"upper"}, "Hardmax": {"axis"}, "OneHot": {"axis"}, "EyeLike": {"dtype", "k"},
    "Dropout": {"ratio", "seed", "is_test"}, "Shrink": {"lambd", "bias"}, "Swish": {"alpha"}, "SwiGLU": {"alpha"},
    "ReverseSequence": {"batch_axis", "time_axis"},
}
