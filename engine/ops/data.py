"""Data-movement and shape ops: every one is a view, a strided copy, a fill
or a gather in the executor; shapes themselves are plan-time constants."""

from __future__ import annotations

import numpy as np

from engine.kernels.abi import CopyStep, DType, FillStep, GatherElementsStep, GatherStep, Op, PadStep
from engine.lowering import LoweringContext, Step, Value
from engine.ops.common import ALL, broadcast_shape, broadcast_strides, collapse, contiguous_strides, normalize_axis


def emit_copy(planner_or_ctx, dst: Value, src: Value, shape=None, strides=None, offset_elems: int = 0,
              dst_strides=None) -> None:
    """dst <- src over `shape`: src read with element `strides` from
    `offset_elems`, dst written with `dst_strides` (contiguous by default)."""
    shape = list(dst.shape if shape is None else shape)
    strides = contiguous_strides(shape) if strides is None else list(strides)
    dst_strides = contiguous_strides(shape) if dst_strides is None else list(dst_strides)
    if int(np.prod(shape, dtype=np.int64)) == 0:
        return
    cshape, (cdst, cst) = collapse(shape, dst_strides, strides)
    if src.buf is None:
        planner_or_ctx_planner(planner_or_ctx).materialize(src)
    view = Value(src.shape, src.dtype, buf=src.buf, offset=src.offset + offset_elems * src.dtype.itemsize)
    step = _step_fn(planner_or_ctx)
    step(Op.COPY, [dst, view], CopyStep(esize=src.dtype.itemsize, rank=len(cshape)).words(cshape, cdst, cst))


def planner_or_ctx_planner(p):
    return p.planner if isinstance(p, LoweringContext) else p


def _step_fn(p):
    if isinstance(p, LoweringContext):
        return p.step

    return lambda op, tensors, ints=(), floats=(): p.emit(Step(op, list(tensors), list(ints), list(floats)))


def lower_identity(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.alias(0, x, x.shape)


def lower_shape(ctx: LoweringContext) -> None:
    shape = np.array(ctx.input(0).shape, np.int64)
    r = len(shape)
    start = ctx.attr("start", 0)
    end = ctx.attr("end", r)
    start = min(max(start + r if start < 0 else start, 0), r)
    end = min(max(end + r if end < 0 else end, 0), r)
    ctx.const_out(0, shape[start:end])


def lower_size(ctx: LoweringContext) -> None:
    ctx.const_out(0, np.array(ctx.input(0).size, np.int64))


def lower_reshape(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    target = [int(d) for d in ctx.const(1, "shape")]
    allowzero = ctx.attr("allowzero", 0)
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= x.rank:
                raise ctx.unsupported(f"shape {target}: 0 at dim {i} copies a dim the input {x.shape} lacks")
            d = x.shape[i]
        out.append(d)
    if out.count(-1) > 1:
        raise ctx.unsupported(f"shape {target} has more than one -1")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or x.size % known:
            raise ctx.unsupported(f"cannot reshape {x.shape} to {target}")
        out[out.index(-1)] = x.size // known
    if int(np.prod(out, dtype=np.int64)) != x.size:
        raise ctx.unsupported(f"cannot reshape {x.shape} ({x.size} elements) to {target}")
    ctx.alias(0, x, out)


def lower_flatten(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    axis = ctx.attr("axis", 1)
    axis = axis + x.rank if axis < 0 else axis
    if not 0 <= axis <= x.rank:
        raise ctx.unsupported(f"axis {ctx.attr('axis')} out of range for rank {x.rank}")
    lead = int(np.prod(x.shape[:axis], dtype=np.int64))
    ctx.alias(0, x, (lead, x.size // lead if lead else int(np.prod(x.shape[axis:], dtype=np.int64))))


def _axes(ctx, attr_name="axes", input_index=1):
    if ctx.opset >= 13 and input_index < len(ctx.inputs) and ctx.input(input_index) is not None:
        return [int(a) for a in ctx.const(input_index, "axes").reshape(-1)]
    if ctx.opset < 13:
        return ctx.attr(attr_name)
    return None


def lower_squeeze(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    axes = _axes(ctx)
    if axes is None:
        shape = [d for d in x.shape if d != 1]
    else:
        axes = {normalize_axis(a, x.rank, ctx) for a in axes}
        for a in axes:
            if x.shape[a] != 1:
                raise ctx.unsupported(f"cannot squeeze axis {a} of size {x.shape[a]}")
        shape = [d for i, d in enumerate(x.shape) if i not in axes]
    ctx.alias(0, x, shape)


def lower_unsqueeze(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    axes = _axes(ctx)
    r = x.rank + len(axes)
    axes = sorted(normalize_axis(a, r, ctx) for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    ctx.alias(0, x, shape)


def lower_transpose(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    perm = ctx.attr("perm") or list(range(x.rank))[::-1]
    if sorted(perm) != list(range(x.rank)):
        raise ctx.unsupported(f"perm {perm} is not a permutation of rank {x.rank}")
    st = contiguous_strides(x.shape)
    shape = [x.shape[p] for p in perm]
    out = ctx.out(0, shape, x.dtype)
    emit_copy(ctx, out, x, shape, [st[p] for p in perm])


def lower_concat(ctx: LoweringContext) -> None:
    xs = [v for v in ctx.inputs if v is not None]
    rank = xs[0].rank
    axis = normalize_axis(ctx.attr("axis"), rank, ctx)
    parts = xs
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in parts)
    for x in parts:
        if x.rank != rank or any(x.shape[d] != shape[d] for d in range(rank) if d != axis):
            raise ctx.unsupported(f"inputs {[p.shape for p in parts]} do not concatenate on axis {axis}")
    out = ctx.out(0, shape, xs[0].dtype)
    # Each part is one strided copy into its slab of the output.
    ost = contiguous_strides(shape)
    at = 0
    for x in parts:
        if x.size:
            view = Value(x.shape, out.dtype, buf=out.buf, offset=out.offset + at * ost[axis] * out.dtype.itemsize)
            emit_copy(ctx, view, x, x.shape, contiguous_strides(x.shape), dst_strides=ost)
        at += x.shape[axis]


def lower_split(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    axis = normalize_axis(ctx.attr("axis", 0), x.rank, ctx)
    n_out = len(ctx.node.outputs)
    split = None
    if len(ctx.inputs) > 1 and ctx.input(1) is not None:
        split = [int(s) for s in ctx.const(1, "split")]
    elif ctx.attr("split") is not None:
        split = list(ctx.attr("split"))
    if split is None:
        dim = x.shape[axis]
        nos = ctx.attr("num_outputs", n_out)
        chunk = -(-dim // nos)
        split = [min(chunk, dim - i * chunk) for i in range(nos)]
    if sum(split) != x.shape[axis] or len(split) != n_out:
        raise ctx.unsupported(f"split {split} does not match dim {x.shape[axis]} / {n_out} outputs")
    st = contiguous_strides(x.shape)
    at = 0
    for i, s in enumerate(split):
        shape = list(x.shape)
        shape[axis] = s
        out = ctx.out(i, shape, x.dtype)
        emit_copy(ctx, out, x, shape, st, offset_elems=at * st[axis])
        at += s


def _slice_params(ctx, x):
    if ctx.opset >= 10:
        starts = [int(v) for v in ctx.const(1, "starts")]
        ends = [int(v) for v in ctx.const(2, "ends")]
        axes = [int(v) for v in ctx.const(3, "axes")] if ctx.input(3) is not None else list(range(len(starts)))
        steps = [int(v) for v in ctx.const(4, "steps")] if ctx.input(4) is not None else [1] * len(starts)
    else:
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes = ctx.attr("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    return starts, ends, axes, steps


def lower_slice(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    starts, ends, axes, steps = _slice_params(ctx, x)
    shape, st = list(x.shape), contiguous_strides(x.shape)
    begin = [0] * x.rank
    out_st = list(st)
    for s, e, a, k in zip(starts, ends, axes, steps):
        a = normalize_axis(a, x.rank, ctx)
        if k == 0:
            raise ctx.unsupported("slice step 0")
        rng = range(x.shape[a])[slice(s, e, k)]
        shape[a] = len(rng)
        begin[a] = rng.start if len(rng) else 0
        out_st[a] = st[a] * k
    out = ctx.out(0, shape, x.dtype)
    emit_copy(ctx, out, x, shape, out_st, offset_elems=sum(b * s for b, s in zip(begin, st)))


def lower_expand(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    target = [int(d) for d in ctx.const(1, "shape")]
    try:
        shape = broadcast_shape(x.shape, target)
    except ValueError as exc:
        raise ctx.unsupported(str(exc)) from None
    out = ctx.out(0, shape, x.dtype)
    emit_copy(ctx, out, x, shape, broadcast_strides(x.shape, shape))


def lower_tile(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    reps = [int(r) for r in ctx.const(1, "repeats")]
    if len(reps) != x.rank:
        raise ctx.unsupported(f"repeats {reps} do not match rank {x.rank}")
    # Tile = copy of a view with a stride-0 repeat dim before every dim.
    st = contiguous_strides(x.shape)
    shape, strides = [], []
    for d in range(x.rank):
        shape += [reps[d], x.shape[d]]
        strides += [0, st[d]]
    out = ctx.out(0, [r * d for r, d in zip(reps, x.shape)], x.dtype)
    emit_copy(ctx, out, x, shape, strides)


def lower_gather(ctx: LoweringContext) -> None:
    data, idx = ctx.input(0), ctx.input(1)
    axis = normalize_axis(ctx.attr("axis", 0), data.rank, ctx)
    ctx.require_dtype(idx, (np.int32, np.int64), "indices")
    shape = list(data.shape[:axis]) + list(idx.shape) + list(data.shape[axis + 1:])
    out = ctx.out(0, shape, data.dtype)
    if out.size == 0:
        return
    outer = int(np.prod(data.shape[:axis], dtype=np.int64))
    inner = int(np.prod(data.shape[axis + 1:], dtype=np.int64))
    params = GatherStep(esize=data.dtype.itemsize, outer=outer, axis_dim=data.shape[axis], inner=inner, nidx=idx.size,
                        idx_dtype=DType.I32 if idx.dtype == np.int32 else DType.I64)
    ctx.step(Op.GATHER, [out, data, idx], params.words())


def lower_gather_elements(ctx: LoweringContext) -> None:
    data, idx = ctx.input(0), ctx.input(1)
    axis = normalize_axis(ctx.attr("axis", 0), data.rank, ctx)
    ctx.require_dtype(idx, (np.int32, np.int64), "indices")
    out = ctx.out(0, idx.shape, data.dtype)
    if out.size == 0:
        return
    params = GatherElementsStep(esize=data.dtype.itemsize, axis=axis,
                                idx_dtype=DType.I32 if idx.dtype == np.int32 else DType.I64, rank=data.rank)
    ctx.step(Op.GATHER_ELEMENTS, [out, data, idx], params.words(idx.shape, data.shape))


def _value_bits(value, dtype) -> int:
    raw = np.zeros(8, np.uint8)
    b = np.array(value).astype(dtype).tobytes()
    raw[:len(b)] = np.frombuffer(b, np.uint8)
    return int(raw.view(np.int64)[0])


def emit_fill(ctx, out: Value, value) -> None:
    if out.size:
        params = FillStep(esize=out.dtype.itemsize, n=out.size, value=_value_bits(value, out.dtype))
        ctx.step(Op.FILL, [out], params.words())


def lower_constant(ctx: LoweringContext) -> None:
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in ctx.node.attrs:
            v = ctx.node.attrs[key]
            if key == "value":
                arr = v
            elif key.startswith("value_float"):
                arr = np.array(v, np.float32)
            else:
                arr = np.array(v, np.int64)
            ctx.const_out(0, arr)
            return
    raise ctx.unsupported(f"attributes {sorted(ctx.node.attrs)} (sparse or string constants)")


def lower_constant_of_shape(ctx: LoweringContext) -> None:
    shape = [int(d) for d in ctx.const(0, "shape")]
    value = ctx.attr("value")
    arr = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    ctx.const_out(0, np.full(shape, arr[0], arr.dtype))


def lower_range(ctx: LoweringContext) -> None:
    start, limit, delta = (ctx.const(i).reshape(()) for i in range(3))
    if delta == 0:
        raise ctx.unsupported("Range delta 0")
    n = max(int(np.ceil((limit - start) / delta)), 0)
    ctx.const_out(0, (start + np.arange(n) * delta).astype(start.dtype))


def lower_pad(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    mode = ctx.attr("mode", "constant")
    if ctx.opset >= 11:
        pads = [int(p) for p in ctx.const(1, "pads")]
        cv = ctx.const(2, "constant_value") if ctx.input(2) is not None else None
        value = 0 if cv is None or cv.size == 0 else cv.reshape(-1)[0]
        axes = [int(a) for a in ctx.const(3, "axes")] if ctx.input(3) is not None else list(range(x.rank))
    else:
        pads, value, axes = ctx.attr("pads"), ctx.attr("value", 0.0), list(range(x.rank))
    axes = [normalize_axis(a, x.rank, ctx) for a in axes]
    begin, end = [0] * x.rank, [0] * x.rank
    for k, a in enumerate(axes):
        begin[a], end[a] = pads[k], pads[k + len(axes)]
    if mode not in ("constant", "reflect", "edge"):
        raise ctx.unsupported(f"mode {mode!r} (supported: constant, reflect, edge)")
    if any(p < 0 for p in begin + end):
        # Negative pads crop: pad the non-negative part, then slice.
        raise ctx.unsupported("negative pads")
    shape = [d + b + e for d, b, e in zip(x.shape, begin, end)]
    if mode != "constant" and any(d == 0 for d in x.shape):
        raise ctx.unsupported(f"{mode} padding of an empty tensor")
    out = ctx.out(0, shape, x.dtype)
    if out.size == 0:
        return
    params = PadStep(esize=x.dtype.itemsize, mode={"constant": 0, "reflect": 1, "edge": 2}[mode],
                     value=_value_bits(value, x.dtype), rank=x.rank)
    ctx.step(Op.PAD, [out, x], params.words(x.shape, shape, begin))


def lower_depth_to_space(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    b = ctx.attr("blocksize")
    n, c, h, w = x.shape
    mode = ctx.attr("mode", "DCR")
    if mode == "DCR":
        tmp_shape, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    else:
        tmp_shape, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    st = contiguous_strides(tmp_shape)
    shape = [tmp_shape[p] for p in perm]
    out = ctx.out(0, (n, c // (b * b), h * b, w * b), x.dtype)
    emit_copy(ctx, out, x, shape, [st[p] for p in perm])


def lower_space_to_depth(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    b = ctx.attr("blocksize")
    n, c, h, w = x.shape
    tmp_shape = (n, c, h // b, b, w // b, b)
    perm = (0, 3, 5, 1, 2, 4)
    st = contiguous_strides(tmp_shape)
    out = ctx.out(0, (n, c * b * b, h // b, w // b), x.dtype)
    emit_copy(ctx, out, x, [tmp_shape[p] for p in perm], [st[p] for p in perm])


RULES = {
    "Identity": {1: lower_identity},
    "Shape": {1: lower_shape},
    "Size": {1: lower_size},
    "Reshape": {5: lower_reshape},
    "Flatten": {1: lower_flatten},
    "Squeeze": {1: lower_squeeze},
    "Unsqueeze": {1: lower_unsqueeze},
    "Transpose": {1: lower_transpose},
    "Concat": {4: lower_concat},
    "Split": {2: lower_split},
    "Slice": {10: lower_slice},
    "Expand": {8: lower_expand},
    "Tile": {6: lower_tile},
    "Gather": {1: lower_gather},
    "GatherElements": {11: lower_gather_elements},
    "Constant": {1: lower_constant},
    "ConstantOfShape": {9: lower_constant_of_shape},
    "Range": {11: lower_range},
    "Pad": {11: lower_pad},
    "DepthToSpace": {1: lower_depth_to_space},
    "SpaceToDepth": {1: lower_space_to_depth},
}
ATTRS = {
    "Shape": {"start", "end"}, "Reshape": {"allowzero"}, "Flatten": {"axis"}, "Squeeze": {"axes"},
    "Unsqueeze": {"axes"}, "Transpose": {"perm"}, "Concat": {"axis"}, "Split": {"axis", "split", "num_outputs"},
    "Gather": {"axis"}, "GatherElements": {"axis"}, "ConstantOfShape": {"value"},
    "Constant": {"value", "value_float", "value_floats", "value_int", "value_ints"},
    "Pad": {"mode"}, "DepthToSpace": {"blocksize", "mode"}, "SpaceToDepth": {"blocksize"},
}
DTYPES = {name: ALL for name in RULES}
