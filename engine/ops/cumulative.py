"""CumProd: one executor step per tensor (CumSum lives in engine.ops.reduce)."""

from __future__ import annotations

import numpy as np

from engine.kernels.abi import Op
from engine.lowering import LoweringContext
from engine.ops.common import normalize_axis
from engine.ops.reduce import axis_step


def lower_cumprod(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32, np.float64, np.int32, np.int64, np.uint32, np.uint64))
    axis = normalize_axis(int(ctx.const(1, "axis").reshape(-1)[0]), x.rank, ctx)
    out = ctx.out(0, x.shape, x.dtype)
    if out.size:
        ctx.step(Op.CUMPROD, [out, x], axis_step(x, axis, ctx.attr("exclusive", 0), ctx.attr("reverse", 0)).words())


RULES = {"CumProd": {26: lower_cumprod}}
ATTRS = {"CumProd": {"exclusive", "reverse"}}
