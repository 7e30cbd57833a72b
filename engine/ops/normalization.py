"""Normalisations composed from reductions and element-wise steps:
RMSNormalization, LayerNormalization with its Mean / InvStdDev outputs,
GroupNormalization, InstanceNormalization, LRN, LpNormalization,
MeanVarianceNormalization. Each follows its ONNX function body (float32
stash: the statistics are computed in float32)."""

from __future__ import annotations

import numpy as np

from engine.lowering import LoweringContext
from engine.ops.common import normalize_axis
from engine.ops.compose import Composer, const, ints, wanted
from engine.ops.reduce import lower_layernorm

_F32 = (np.float32,)


def _stash_f32(ctx: LoweringContext) -> None:
    if ctx.attr("stash_type", 1) != 1:
        raise ctx.unsupported(f"stash_type={ctx.attr('stash_type')} (only 1, float32)")


def lower_rms_normalization(ctx: LoweringContext) -> None:
    x, scale = ctx.input(0), ctx.input(1)
    ctx.require_dtype(x, _F32)
    ctx.require_dtype(scale, _F32, "scale")
    _stash_f32(ctx)
    axis = normalize_axis(ctx.attr("axis", -1), x.rank, ctx)
    c = Composer(ctx)
    axes = list(range(axis, x.rank))
    mean_sq = c.reduce("ReduceMean", c.mul(x, x), axes)
    rms = c.op("Sqrt", c.add(mean_sq, c.scalar(ctx.attr("epsilon", 1e-5), np.float32)))
    c.out(0, c.mul(c.mul(x, c.op("Reciprocal", rms)), scale))


def lower_layer_normalization(ctx: LoweringContext) -> None:
    """The fused kernel when only Y is asked for; the decomposition (which
    also yields Mean and InvStdDev) otherwise."""
    if not (wanted(ctx, 1) or wanted(ctx, 2)):
        lower_layernorm(ctx)
        return
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    ctx.require_dtype(x, _F32)
    _stash_f32(ctx)
    axis = normalize_axis(ctx.attr("axis", -1), x.rank, ctx)
    c = Composer(ctx)
    axes = list(range(axis, x.rank))
    mean = c.reduce("ReduceMean", x, axes)
    d = c.sub(x, mean)
    var = c.reduce("ReduceMean", c.mul(d, d), axes)
    inv_std = c.op("Reciprocal", c.op("Sqrt", c.add(var, c.scalar(ctx.attr("epsilon", 1e-5), np.float32))))
    y = c.mul(c.mul(d, inv_std), scale)
    if bias is not None:
        y = c.add(y, bias)
    c.out(0, y)
    if wanted(ctx, 1):
        c.out(1, mean)
    if wanted(ctx, 2):
        c.out(2, inv_std)


def _standardize(c: Composer, x, axes, epsilon: float):
    """(x - mean) / sqrt(var + epsilon) over `axes`, variance as mean((x - mean)^2)."""
    d = c.sub(x, c.reduce("ReduceMean", x, axes))
    var = c.reduce("ReduceMean", c.mul(d, d), axes)
    return c.div(d, c.op("Sqrt", c.add(var, c.scalar(epsilon, x.dtype))))


def _per_channel(c: Composer, v, rank: int):
    """A [C] vector shaped to broadcast over [N, C, spatial...]."""
    return c.reshape(v, [v.size] + [1] * (rank - 2))


def lower_instance_normalization(ctx: LoweringContext) -> None:
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    ctx.require_dtype(x, _F32)
    if x.rank < 3 or scale.shape != (x.shape[1],) or bias.shape != (x.shape[1],):
        raise ctx.unsupported(f"input {x.shape} with scale {scale.shape} / bias {bias.shape}")
    c = Composer(ctx)
    y = _standardize(c, x, list(range(2, x.rank)), ctx.attr("epsilon", 1e-5))
    c.out(0, c.add(c.mul(y, _per_channel(c, scale, x.rank)), _per_channel(c, bias, x.rank)))


def lower_group_normalization(ctx: LoweringContext) -> None:
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    ctx.require_dtype(x, _F32)
    _stash_f32(ctx)
    groups = ctx.attr("num_groups")
    if x.rank < 3 or not groups or x.shape[1] % groups or scale.shape != (x.shape[1],) \
            or bias.shape != (x.shape[1],):
        raise ctx.unsupported(f"input {x.shape}, {groups} groups, scale {scale.shape}, bias {bias.shape}")
    c = Composer(ctx)
    grouped = c.reshape(x, [x.shape[0], groups, x.shape[1] // groups] + list(x.shape[2:]))
    y = c.reshape(_standardize(c, grouped, list(range(2, x.rank + 1)), ctx.attr("epsilon", 1e-5)), x.shape)
    c.out(0, c.add(c.mul(y, _per_channel(c, scale, x.rank)), _per_channel(c, bias, x.rank)))


def lower_lrn(ctx: LoweringContext) -> None:
    """x / (bias + alpha/size * sum of squares over a window of channels)^beta:
    the window sum is `size` shifted slices of the zero-padded squares."""
    x = ctx.input(0)
    ctx.require_dtype(x, _F32)
    size = ctx.attr("size")
    if x.rank < 3 or not size or size < 1:
        raise ctx.unsupported(f"input {x.shape} with size {size}")
    alpha, beta, bias = ctx.attr("alpha", 1e-4), ctx.attr("beta", 0.75), ctx.attr("bias", 1.0)
    c = Composer(ctx)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    pads = [0] * (2 * x.rank)
    pads[1], pads[x.rank + 1] = before, after  # the channel axis only
    sq = c.op("Pad", c.mul(x, x), ints(pads), const(np.zeros((), np.float32)), mode="constant")
    ch = x.shape[1]
    total = None
    for j in range(size):
        part = c.op("Slice", sq, ints([j]), ints([j + ch]), ints([1]))
        total = part if total is None else c.add(total, part)
    scaled = c.add(c.scalar(bias, np.float32), c.mul(c.scalar(alpha / size, np.float32), total))
    c.out(0, c.div(x, c.op("Pow", scaled, c.scalar(beta, np.float32))))


def lower_lp_normalization(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32, np.float64))
    p = ctx.attr("p", 2)
    if p not in (1, 2):
        raise ctx.unsupported(f"p={p} (ONNX allows 1 and 2)")
    axis = normalize_axis(ctx.attr("axis", -1), x.rank, ctx)
    c = Composer(ctx)
    norm = c.reduce("ReduceL1" if p == 1 else "ReduceL2", x, [axis])
    zero = c.scalar(0, x.dtype)
    # A zero norm gives 0, not 0/0 (the ONNX reference).
    c.out(0, c.where(c.op("Equal", norm, zero), zero, c.div(x, norm)))


def lower_mean_variance_normalization(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, _F32)
    axes = [normalize_axis(a, x.rank, ctx) for a in ctx.attr("axes", [0, 2, 3])]
    c = Composer(ctx)
    mean = c.reduce("ReduceMean", x, axes)
    mean_sq = c.reduce("ReduceMean", c.mul(x, x), axes)
    var = c.sub(mean_sq, c.mul(mean, mean))
    # 1e-9: the epsilon of the ONNX function body.
    std = c.op("Sqrt", c.add(var, c.scalar(1e-9, np.float32)))
    c.out(0, c.div(c.sub(x, mean), std))


RULES = {
    "RMSNormalization": {23: lower_rms_normalization},
    "LayerNormalization": {1: lower_layer_normalization},
    "LpNormalization": {1: lower_lp_normalization},
    "MeanVarianceNormalization": {9: lower_mean_variance_normalization},
    "InstanceNormalization": {6: lower_instance_normalization},
    "GroupNormalization": {21: lower_group_normalization},
    "LRN": {1: lower_lrn},
}
ATTRS = {
    "RMSNormalization": {"axis", "epsilon", "stash_type"},
    "LayerNormalization": {"axis", "epsilon", "stash_type"},
    "LpNormalization": {"axis", "p"},
    "MeanVarianceNormalization": {"axes"},
    "InstanceNormalization": {"epsilon"},
    "GroupNormalization": {"epsilon", "num_groups", "stash_type"},
    "LRN": {"alpha", "beta", "bias", "size"},
}
