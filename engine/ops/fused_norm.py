"""FusedRMSNorm: what engine.passes.fuse_rmsnorm makes of the decomposed
RMSNorm chain, y = x / sqrt(mean(x^2, last axis) + epsilon) * scale.

One aie_rms_norm step when scale covers exactly the last axis; otherwise
(a scale that broadcasts some other way) the chain's own arithmetic,
composed, so the fusion never changes a result."""

from __future__ import annotations

import numpy as np

from engine.kernels.abi import NormStep, Op
from engine.lowering import LoweringContext
from engine.ops.compose import Composer

_F32 = (np.float32,)


def lower_fused_rms_norm(ctx: LoweringContext) -> None:
    x, scale = ctx.input(0), ctx.input(1)
    ctx.require_dtype(x, _F32)
    ctx.require_dtype(scale, _F32, "scale")
    eps = ctx.attr("epsilon")
    cols = x.shape[-1] if x.rank else 0
    if x.rank >= 1 and cols > 0 and scale.shape in ((cols,), (1,) * (x.rank - 1) + (cols,)) \
            and len(np.broadcast_shapes(x.shape, scale.shape)) == x.rank:
        out = ctx.out(0, x.shape, np.float32)
        if out.size:
            ctx.step(Op.RMS_NORM, [out, x, scale], NormStep(rows=x.size // cols, cols=cols).words(), [eps])
        return
    c = Composer(ctx)
    mean_sq = c.reduce("ReduceMean", c.mul(x, x), [x.rank - 1])
    rms = c.op("Sqrt", c.add(mean_sq, c.scalar(eps, np.float32)))
    c.out(0, c.mul(c.div(x, rms), scale))


RULES = {"FusedRMSNorm": {1: lower_fused_rms_norm}}
ATTRS = {"FusedRMSNorm": {"epsilon"}}
