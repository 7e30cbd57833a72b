"""TopK: one executor step sorts each lane (value order, ties by the lower
index, as ONNX specifies)."""

from __future__ import annotations

import numpy as np

from engine.kernels.abi import Op
from engine.lowering import LoweringContext
from engine.ops.common import normalize_axis
from engine.ops.reduce import axis_step


def lower_topk(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32, np.float64, np.int32, np.int64))
    if ctx.opset >= 10:
        k = int(ctx.const(1, "K").reshape(-1)[0])
    else:
        k = ctx.attr("k")
    axis = normalize_axis(ctx.attr("axis", -1), x.rank, ctx)
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise ctx.unsupported(f"K={k} outside [0, {n}] for axis {axis} of {x.shape}")
    shape = list(x.shape)
    shape[axis] = k
    vals = ctx.out(0, shape, x.dtype)
    idx = ctx.out(1, shape, np.int64)
    if vals.size == 0:
        return
    # sorted=0 leaves the order unspecified; sorted output is one valid order.
    ctx.step(Op.TOPK, [vals, idx, x, ctx.temp((n,), np.int64)], axis_step(x, axis, k, ctx.attr("largest", 1)).words())


RULES = {"TopK": {1: lower_topk}}
ATTRS = {"TopK": {"axis", "k", "largest", "sorted"}}
