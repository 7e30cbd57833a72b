"""Ops that scatter values to computed positions, composed on
ScatterElements: Col2Im (overlapping blocks summed back into an image),
MaxUnpool (values put back at their MaxPool indices) and TensorScatter
(KV-cache writes). Col2Im's and MaxUnpool's position maps depend only on
shapes, so they are plan-time constants."""

from __future__ import annotations

import itertools

import numpy as np

from engine.lowering import LoweringContext
from engine.ops.compose import Composer, const, ints


def _col2im_positions(image, block, dil, pads, strides):
    """Flat position in the padded image of every (block offset, block)
    column entry, in the input's [prod(block), L] order; and the padded
    image shape."""
    nd = len(image)
    padded = [image[d] + pads[d] + pads[d + nd] for d in range(nd)]
    counts = [(padded[d] - (dil[d] * (block[d] - 1) + 1)) // strides[d] + 1 for d in range(nd)]
    if any(n <= 0 for n in counts):
        return None, padded, counts
    pstrides = [int(np.prod(padded[d + 1:], dtype=np.int64)) for d in range(nd)]
    pos = []
    for k in itertools.product(*(range(b) for b in block)):
        for blk in itertools.product(*(range(n) for n in counts)):
            pos.append(sum((blk[d] * strides[d] + k[d] * dil[d]) * pstrides[d] for d in range(nd)))
    return np.array(pos, np.int64), padded, counts


def lower_col2im(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32, np.float64, np.int32, np.int64))
    image = [int(v) for v in ctx.const(1, "image_shape").reshape(-1)]
    block = [int(v) for v in ctx.const(2, "block_shape").reshape(-1)]
    nd = len(image)
    dil = list(ctx.attr("dilations", [1] * nd))
    pads = list(ctx.attr("pads", [0] * (2 * nd)))
    strides = list(ctx.attr("strides", [1] * nd))
    kprod = int(np.prod(block, dtype=np.int64))
    if x.rank != 3 or len(block) != nd or kprod == 0 or x.shape[1] % kprod:
        raise ctx.unsupported(f"input {x.shape} for image {image} and block {block}")
    pos, padded, counts = _col2im_positions(image, block, dil, pads, strides)
    if pos is None or int(np.prod(counts, dtype=np.int64)) != x.shape[2]:
        raise ctx.unsupported(f"{x.shape[2]} blocks do not tile image {image} (blocks per dim {counts})")
    n, ch = x.shape[0], x.shape[1] // kprod
    c = Composer(ctx)
    cols = c.reshape(x, [n, ch, kprod * x.shape[2]])
    idx = const(np.broadcast_to(pos, (n, ch, pos.size)).copy())
    canvas = const(np.zeros((n, ch, int(np.prod(padded, dtype=np.int64))), x.dtype))
    summed = c.op("ScatterElements", canvas, idx, cols, axis=2, reduction="add")
    img = c.reshape(summed, [n, ch] + padded)
    if any(pads):
        img = c.op("Slice", img, ints(pads[:nd]), ints([pads[d] + image[d] for d in range(nd)]),
                   ints(range(2, 2 + nd)))
    c.out(0, img)


def lower_max_unpool(ctx: LoweringContext) -> None:
    x, idx = ctx.input(0), ctx.input(1)
    ctx.require_dtype(x, (np.float32,))
    ctx.require_dtype(idx, (np.int64,), "indices")
    if idx.shape != x.shape or x.rank < 3:
        raise ctx.unsupported(f"X {x.shape} with indices {idx.shape}")
    nd = x.rank - 2
    kernel = ctx.attr("kernel_shape")
    strides = ctx.attr("strides", [1] * nd)
    pads = ctx.attr("pads", [0] * (2 * nd))
    if not kernel or len(kernel) != nd:
        raise ctx.unsupported(f"kernel_shape {kernel} for X {x.shape}")
    # MaxPool's indices are flat positions in the unpooled (natural) shape;
    # a larger output_shape pads that result at the end of each dim.
    natural = list(x.shape[:2]) + [(x.shape[2 + d] - 1) * strides[d] - pads[d] - pads[d + nd] + kernel[d]
                                   for d in range(nd)]
    out_shape = natural
    if ctx.input(2) is not None:
        out_shape = [int(v) for v in ctx.const(2, "output_shape").reshape(-1)]
    if len(out_shape) != x.rank or any(o < n for o, n in zip(out_shape, natural)) or out_shape[:2] != natural[:2]:
        raise ctx.unsupported(f"output_shape {out_shape} for X {x.shape} (unpooled {natural})")
    c = Composer(ctx)
    flat = const(np.zeros(int(np.prod(natural, dtype=np.int64)), np.float32))
    y = c.reshape(c.op("ScatterElements", flat, c.reshape(idx, [-1]), c.reshape(x, [-1]), axis=0), natural)
    if out_shape != natural:
        y = c.op("Pad", y, ints([0] * x.rank + [o - n for o, n in zip(out_shape, natural)]),
                 const(np.zeros((), np.float32)), mode="constant")
    c.out(0, y)


def lower_tensor_scatter(ctx: LoweringContext) -> None:
    """KV-cache write: update's rows go to write_indices[batch] + s along
    axis (modulo the cache length in circular mode). The positions are
    computed by steps at run time, so a changing write position reuses the
    plan."""
    past, upd, where = ctx.input(0), ctx.input(1), ctx.input(2)
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ctx.unsupported(f"mode={mode!r}")
    axis = ctx.attr("axis", -2) % max(past.rank, 1)
    if upd.dtype != past.dtype or upd.rank != past.rank or axis == 0 \
            or any(u != p for d, (u, p) in enumerate(zip(upd.shape, past.shape)) if d != axis) \
            or upd.shape[axis] > past.shape[axis]:
        raise ctx.unsupported(f"past_cache {past.shape} and update {upd.shape} on axis {axis}")
    c = Composer(ctx)
    steps = np.arange(upd.shape[axis], dtype=np.int64).reshape([-1 if d == axis else 1 for d in range(upd.rank)])
    if where is None:
        idx = const(steps)
    else:
        ctx.require_dtype(where, (np.int64,), "write_indices")
        start = c.reshape(where, [past.shape[0]] + [1] * (past.rank - 1))
        idx = c.add(start, const(steps))
    if mode == "circular":
        idx = c.op("Mod", idx, c.scalar(past.shape[axis], np.int64))
    idx = c.op("Expand", idx, ints(upd.shape))
    c.out(0, c.op("ScatterElements", past, idx, upd, axis=axis))


RULES = {"Col2Im": {18: lower_col2im}, "MaxUnpool": {11: lower_max_unpool}, "TensorScatter": {24: lower_tensor_scatter}}
ATTRS = {"Col2Im": {"dilations", "pads", "strides"}, "MaxUnpool": {"kernel_shape", "pads", "strides"},
         "TensorScatter": {"axis", "mode"}}
