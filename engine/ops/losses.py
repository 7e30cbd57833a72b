"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, composed as in
their ONNX function bodies: gather the target class along axis 1, weight,
mask ignore_index, reduce."""

from __future__ import annotations

import numpy as np

from engine.lowering import LoweringContext
from engine.ops.compose import Composer, ints, wanted

REDUCTIONS = ("none", "sum", "mean")


def _nll(ctx: LoweringContext, c: Composer, logp, target, weight):
    """The per-element or reduced loss of log-probabilities logp [N, C, d...]
    against target [N, d...]."""
    ctx.require_dtype(target, (np.int32, np.int64), "target")
    reduction = ctx.attr("reduction", "mean")
    if reduction not in REDUCTIONS:
        raise ctx.unsupported(f"reduction={reduction!r} (supported: {', '.join(REDUCTIONS)})")
    if logp.rank < 2 or target.shape != logp.shape[:1] + logp.shape[2:]:
        raise ctx.unsupported(f"input {logp.shape} and target {target.shape} do not match ([N, C, d...], [N, d...])")
    if weight is not None and weight.shape != (logp.shape[1],):
        raise ctx.unsupported(f"weight of shape {weight.shape}, expected ({logp.shape[1]},)")
    ignore = ctx.attr("ignore_index")
    valid = None
    if ignore is not None:
        valid = c.op("Not", c.op("Equal", target, c.scalar(ignore, target.dtype)))
        # Ignored positions gather class 0 and are weighted 0 below.
        target = c.where(valid, target, c.scalar(0, target.dtype))
    picked = c.op("GatherElements", logp, c.op("Unsqueeze", target, ints([1])), axis=1)
    loss = c.op("Neg", c.op("Squeeze", picked, ints([1])))
    w = c.op("Gather", weight, target, axis=0) if weight is not None else None
    if valid is not None:
        mask = c.cast(valid, logp.dtype)
        w = mask if w is None else c.mul(w, mask)
    if w is not None:
        loss = c.mul(loss, w)
    if reduction == "none":
        return loss
    axes = list(range(loss.rank))
    total = c.reduce("ReduceSum", loss, axes, keepdims=0)
    if reduction == "sum":
        return total
    if w is None:
        return c.div(total, c.scalar(loss.size, logp.dtype))
    return c.div(total, c.reduce("ReduceSum", w, axes, keepdims=0))


def lower_nll_loss(ctx: LoweringContext) -> None:
    x, target, weight = ctx.input(0), ctx.input(1), ctx.input(2)
    ctx.require_dtype(x, (np.float32, np.float64))
    c = Composer(ctx)
    c.out(0, _nll(ctx, c, x, target, weight))


def lower_softmax_cross_entropy(ctx: LoweringContext) -> None:
    x, target, weight = ctx.input(0), ctx.input(1), ctx.input(2)
    ctx.require_dtype(x, (np.float32,))
    if x.rank < 2:
        raise ctx.unsupported(f"scores of rank {x.rank} (needs [N, C, d...])")
    c = Composer(ctx)
    logp = c.op("LogSoftmax", x, axis=1)
    c.out(0, _nll(ctx, c, logp, target, weight))
    if wanted(ctx, 1):
        c.out(1, logp)


RULES = {
    "NegativeLogLikelihoodLoss": {12: lower_nll_loss},
    "SoftmaxCrossEntropyLoss": {12: lower_softmax_cross_entropy},
}
ATTRS = {
    "NegativeLogLikelihoodLoss": {"ignore_index", "reduction"},
    "SoftmaxCrossEntropyLoss": {"ignore_index", "reduction"},
}
