"""Ops whose output shapes depend on input values: NonZero, Compress,
Unique, NonMaxSuppression. Each step writes outputs sized for the most its
input allows plus the count it produced (kernels/core/dynamic_out.c); the
rule declares them through ctx.bounded, and the planner ends the plan's
segment there and plans what follows for the count a run produced
(engine.plan_segments). Compress with a constant condition has a known
shape and stays in the plan."""

from __future__ import annotations

import numpy as np

from engine.ir import NUMPY_TO_ONNX
from engine.kernels.abi import CompressStep, NmsStep, NonzeroStep, Op, UniqueStep
from engine.lowering import LoweringContext
from engine.ops.common import normalize_axis

NONZERO_DTYPES = (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.bool_)
UNIQUE_DTYPES = (np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.bool_)


def _count(ctx: LoweringContext):
    return ctx.temp((1,), np.int64)


def lower_nonzero(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, NONZERO_DTYPES)
    dims = list(x.shape) or [1]  # numpy treats a scalar as one element of rank 1
    rank, n = len(dims), x.size
    y = ctx.temp((rank, max(n, 1)), np.int64)
    count = _count(ctx)
    ctx.step(Op.NONZERO, [y, count, x], NonzeroStep(dtype=NUMPY_TO_ONNX[x.dtype], rank=rank).words(dims))
    ctx.bounded([y], count, lambda c: [(rank, c)])


def _outer_n_inner(shape, axis: int) -> tuple[int, int, int]:
    return (int(np.prod(shape[:axis], dtype=np.int64)), int(shape[axis]),
            int(np.prod(shape[axis + 1:], dtype=np.int64)))


def lower_compress(ctx: LoweringContext) -> None:
    x, cond = ctx.input(0), ctx.input(1)
    ctx.require_dtype(cond, (np.bool_,), "condition")
    if cond.rank != 1:
        raise ctx.unsupported(f"condition of shape {list(cond.shape)}; expected one dimension")
    axis = ctx.attr("axis")
    if axis is None:
        outer, n, inner = 1, x.size, 1
        shape_of = (lambda c: [(c,)])
    else:
        a = normalize_axis(axis, x.rank, ctx)
        outer, n, inner = _outer_n_inner(x.shape, a)
        shape_of = (lambda c: [tuple(x.shape[:a]) + (c,) + tuple(x.shape[a + 1:])])
    m = cond.size
    if m > n:
        raise ctx.unsupported(f"condition of length {m} for an axis of length {n}")
    words = CompressStep(esize=x.dtype.itemsize, outer=outer, n=n, inner=inner, m=m).words()
    count = _count(ctx)
    if cond.const is not None:
        # a known condition: a known shape, and the plan goes on
        y = ctx.out(0, shape_of(int(np.count_nonzero(cond.const[:m])))[0], x.dtype)
        if y.size:
            ctx.step(Op.COMPRESS, [y, count, x, cond], words)
        return
    y = ctx.temp((max(outer * n * inner, 1),), x.dtype)
    ctx.step(Op.COMPRESS, [y, count, x, cond], words)
    ctx.bounded([y], count, shape_of)


def lower_unique(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, UNIQUE_DTYPES)
    axis = ctx.attr("axis")
    if axis is None:
        outer, n, inner = 1, x.size, 1

        def y_shape(c):
            return (c,)
    else:
        a = normalize_axis(axis, x.rank, ctx)
        outer, n, inner = _outer_n_inner(x.shape, a)

        def y_shape(c):
            return tuple(x.shape[:a]) + (c,) + tuple(x.shape[a + 1:])
    room = max(n, 1)
    y = ctx.temp((max(outer * n * inner, 1),), x.dtype)
    indices, inverse, counts = (ctx.temp((room,), np.int64) for _ in range(3))
    count = _count(ctx)
    ws = ctx.temp((4 * room,), np.int64)
    ctx.step(Op.UNIQUE, [y, indices, inverse, counts, count, x, ws],
             UniqueStep(dtype=NUMPY_TO_ONNX[x.dtype], outer=outer, n=n, inner=inner,
                        sorted=int(ctx.attr("sorted", 1))).words())
    ctx.bounded([y, indices, inverse, counts], count, lambda c: [y_shape(c), (c,), (n,), (c,)])


def lower_nms(ctx: LoweringContext) -> None:
    boxes, scores = ctx.input(0), ctx.input(1)
    max_out, iou, score_thr = ctx.input(2), ctx.input(3), ctx.input(4)
    ctx.require_dtype(boxes, (np.float32,), "boxes")
    ctx.require_dtype(scores, (np.float32,), "scores")
    if boxes.rank != 3 or boxes.shape[2] != 4 or scores.rank != 3 or scores.shape[0] != boxes.shape[0] \
            or scores.shape[2] != boxes.shape[1]:
        raise ctx.unsupported(f"boxes {list(boxes.shape)} and scores {list(scores.shape)}; expected "
                              "[batches, boxes, 4] and [batches, classes, boxes]")
    for v, what, dt in ((max_out, "max_output_boxes_per_class", np.int64), (iou, "iou_threshold", np.float32),
                        (score_thr, "score_threshold", np.float32)):
        if v is not None:
            ctx.require_dtype(v, (dt,), what)
            if v.size != 1:
                raise ctx.unsupported(f"{what} of shape {list(v.shape)}; expected one value")
    nb, nbox = boxes.shape[:2]
    nc = scores.shape[1]
    per_class = nbox
    if max_out is not None and max_out.const is not None:
        per_class = max(0, min(nbox, int(max_out.const.reshape(-1)[0])))
    out = ctx.temp((max(nb * nc * per_class, 1), 3), np.int64)
    count = _count(ctx)
    ws = ctx.temp((2 * max(nbox, 1),), np.int64)
    ctx.step(Op.NMS, [out, count, boxes, scores, max_out, iou, score_thr, ws],
             NmsStep(batches=nb, classes=nc, boxes=nbox,
                     center_point_box=int(ctx.attr("center_point_box", 0))).words())
    ctx.bounded([out], count, lambda c: [(c, 3)])


RULES = {"NonZero": {9: lower_nonzero}, "Compress": {9: lower_compress}, "Unique": {11: lower_unique},
         "NonMaxSuppression": {10: lower_nms}}
ATTRS = {"NonZero": set(), "Compress": {"axis"}, "Unique": {"axis", "sorted"},
         "NonMaxSuppression": {"center_point_box"}}
