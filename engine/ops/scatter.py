"""ScatterElements (and the deprecated Scatter), ScatterND, GatherND: the
output starts as a copy of data, then one executor step writes the updates
(with an optional reduction); GatherND is one step. Indices are checked at
run time by the executor."""

from __future__ import annotations

import numpy as np

from engine.ir import NUMPY_TO_ONNX
from engine.kernels.abi import GatherNdStep, Op, ScatterElementsStep, ScatterNdStep, ScatterReduction
from engine.lowering import LoweringContext
from engine.ops.common import ALL, normalize_axis
from engine.ops.data import emit_copy

_REDUCIBLE = (np.float32, np.float64, np.int32, np.int64)


def _reduction(ctx, data) -> int:
    name = ctx.attr("reduction", "none")
    if name.upper() not in ScatterReduction.__members__:
        names = ", ".join(m.lower() for m in ScatterReduction.__members__)
        raise ctx.unsupported(f"reduction={name!r} (supported: {names})")
    if name != "none":
        ctx.require_dtype(data, _REDUCIBLE, f"data (reduction {name})")
    return ScatterReduction[name.upper()]


def lower_scatter_elements(ctx: LoweringContext) -> None:
    data, idx, upd = ctx.input(0), ctx.input(1), ctx.input(2)
    ctx.require_dtype(data, ALL)
    ctx.require_dtype(idx, (np.int32, np.int64), "indices")
    red = _reduction(ctx, data)
    if upd.dtype != data.dtype or upd.shape != idx.shape or idx.rank != data.rank:
        raise ctx.unsupported(f"data {data.shape}, indices {idx.shape}, updates {upd.shape} do not match")
    axis = normalize_axis(ctx.attr("axis", 0), data.rank, ctx)
    if any(i > d for k, (i, d) in enumerate(zip(idx.shape, data.shape)) if k != axis):
        raise ctx.unsupported(f"indices {idx.shape} larger than data {data.shape} off axis {axis}")
    out = ctx.out(0, data.shape, data.dtype)
    emit_copy(ctx, out, data)
    if idx.size:
        params = ScatterElementsStep(esize=data.dtype.itemsize, dtype=NUMPY_TO_ONNX[data.dtype], reduction=red,
                                     axis=axis, idx_dtype=NUMPY_TO_ONNX[idx.dtype], rank=data.rank)
        ctx.step(Op.SCATTER_ELEMENTS, [out, idx, upd], params.words(idx.shape, data.shape))


def lower_scatter_nd(ctx: LoweringContext) -> None:
    data, idx, upd = ctx.input(0), ctx.input(1), ctx.input(2)
    ctx.require_dtype(data, ALL)
    ctx.require_dtype(idx, (np.int64,), "indices")
    red = _reduction(ctx, data)
    k = idx.shape[-1] if idx.rank else 0
    if idx.rank < 1 or not 1 <= k <= data.rank or upd.dtype != data.dtype \
            or upd.shape != idx.shape[:-1] + data.shape[k:]:
        raise ctx.unsupported(f"data {data.shape}, indices {idx.shape}, updates {upd.shape} do not match")
    out = ctx.out(0, data.shape, data.dtype)
    emit_copy(ctx, out, data)
    n_tuples = int(np.prod(idx.shape[:-1], dtype=np.int64))
    if n_tuples and out.size:
        params = ScatterNdStep(esize=data.dtype.itemsize, dtype=NUMPY_TO_ONNX[data.dtype], reduction=red,
                               n_tuples=n_tuples, k=k, rank=data.rank)
        ctx.step(Op.SCATTER_ND, [out, idx, upd], params.words(data.shape))


def lower_gather_nd(ctx: LoweringContext) -> None:
    data, idx = ctx.input(0), ctx.input(1)
    ctx.require_dtype(data, ALL)
    ctx.require_dtype(idx, (np.int64,), "indices")
    b = ctx.attr("batch_dims", 0)
    k = idx.shape[-1] if idx.rank else -1
    if idx.rank < 1 or b < 0 or b >= min(idx.rank, data.rank) + (0 if idx.rank > b else 1) \
            or idx.shape[:b] != data.shape[:b] or not 0 <= k <= data.rank - b:
        raise ctx.unsupported(f"data {data.shape}, indices {idx.shape}, batch_dims {b} do not match")
    out = ctx.out(0, idx.shape[:-1] + data.shape[b + k:], data.dtype)
    if out.size == 0:
        return
    n_batch = int(np.prod(data.shape[:b], dtype=np.int64))
    per = int(np.prod(idx.shape[b:-1], dtype=np.int64))
    params = GatherNdStep(esize=data.dtype.itemsize, n_batch=n_batch, per_batch=per,
                          batch_stride=int(np.prod(data.shape[b:], dtype=np.int64)),
                          slice=int(np.prod(data.shape[b + k:], dtype=np.int64)), k=k)
    ctx.step(Op.GATHER_ND, [out, data, idx], params.words(data.shape[b:b + k]))


RULES = {
    "ScatterElements": {11: lower_scatter_elements}, "Scatter": {9: lower_scatter_elements},
    "ScatterND": {11: lower_scatter_nd}, "GatherND": {11: lower_gather_nd},
}
ATTRS = {"ScatterElements": {"axis", "reduction"}, "Scatter": {"axis"}, "ScatterND": {"reduction"},
         "GatherND": {"batch_dims"}}
