"""Convolution, pooling, BatchNormalization and Resize (NCHW, float32)."""

from __future__ import annotations

import math

import numpy as np

from engine.ops.common import ACT_NONE, X_CONV, X_CONV_TRANSPOSE, X_POOL, X_RESIZE
from engine.ops.elementwise import emit_binary
from engine.ops.linear import gemm_workspace
from engine.plan import LoweringContext, Value, align


def _spatial(ctx, x, kernel):
    """(pads_begin, pads_end, strides, dilations) for a 1-D or 2-D window."""
    nd = len(kernel)
    strides = list(ctx.attr("strides", [1] * nd))
    dil = list(ctx.attr("dilations", [1] * nd))
    pads = list(ctx.attr("pads", [0] * (2 * nd)))
    auto = ctx.attr("auto_pad", "NOTSET")
    begin, end = pads[:nd], pads[nd:]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        for i in range(nd):
            size = x.shape[2 + i]
            out = -(-size // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - size, 0)
            small = total // 2
            begin[i], end[i] = (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
    elif auto == "VALID":
        begin, end = [0] * nd, [0] * nd
    elif auto != "NOTSET":
        raise ctx.unsupported(f"auto_pad={auto!r}")
    return begin, end, strides, dil


def _as_2d(ctx, x, what="input"):
    if x.rank == 3:
        return (x.shape[0], x.shape[1], 1, x.shape[2])
    if x.rank == 4:
        return x.shape
    raise ctx.unsupported(f"{what} of rank {x.rank}: only 1-D and 2-D windows (rank 3 or 4) are supported")


def _lift(vals, one_d, fill):
    return [fill] + list(vals) if one_d else list(vals)


def lower_conv(ctx: LoweringContext) -> None:
    x, w, b = ctx.input(0), ctx.input(1), ctx.input(2)
    for v in (x, w):
        ctx.require_dtype(v, (np.float32,))
    N, C, H, W = _as_2d(ctx, x)
    one_d = x.rank == 3
    kernel = list(w.shape[2:])
    if ctx.attr("kernel_shape") is not None and list(ctx.attr("kernel_shape")) != kernel:
        raise ctx.unsupported(f"kernel_shape {ctx.attr('kernel_shape')} disagrees with weights {w.shape}")
    begin, end, strides, dil = _spatial(ctx, x, kernel)
    kernel, begin, end = _lift(kernel, one_d, 1), _lift(begin, one_d, 0), _lift(end, one_d, 0)
    strides, dil = _lift(strides, one_d, 1), _lift(dil, one_d, 1)
    G = ctx.attr("group", 1)
    M = w.shape[0]
    if C % G or M % G or w.shape[1] != C // G:
        raise ctx.unsupported(f"weights {w.shape} do not match {C} input channels in {G} groups")
    OH = (H + begin[0] + end[0] - dil[0] * (kernel[0] - 1) - 1) // strides[0] + 1
    OW = (W + begin[1] + end[1] - dil[1] * (kernel[1] - 1) - 1) // strides[1] + 1
    if OH <= 0 or OW <= 0:
        raise ctx.unsupported(f"output spatial size {OH}x{OW} is empty for input {x.shape}")
    out = ctx.out(0, (N, M, OW) if one_d else (N, M, OH, OW), np.float32)
    Cg, Mg = C // G, M // G
    direct = kernel == [1, 1] and strides == [1, 1] and begin == [0, 0] and OH == H and OW == W
    ws_bytes = 0
    if not (Cg == 1 and Mg == 1):
        Kc = Cg * kernel[0] * kernel[1]
        ws_bytes = (0 if direct else align(Kc * OH * OW * 4)) + align(gemm_workspace(Mg, OH * OW, Kc, ctx.planner.nthreads))
    ws = ctx.scratch(ws_bytes)
    act, p0, p1 = ctx.attr("_act", ACT_NONE), ctx.attr("_p0", 0.0), ctx.attr("_p1", 0.0)
    ctx.step(X_CONV, [out, x, w, b, ws],
             [N, C, H, W, M, OH, OW, kernel[0], kernel[1], strides[0], strides[1], begin[0], begin[1], dil[0], dil[1],
              G, act, ws_bytes], [p0, p1])


def lower_conv_transpose(ctx: LoweringContext) -> None:
    x, w, b = ctx.input(0), ctx.input(1), ctx.input(2)
    for v in (x, w):
        ctx.require_dtype(v, (np.float32,))
    if x.rank != 4:
        raise ctx.unsupported(f"input of rank {x.rank}: only 2-D transposed convolution")
    if ctx.attr("output_shape") is not None or ctx.attr("auto_pad", "NOTSET") != "NOTSET":
        raise ctx.unsupported("output_shape / auto_pad (give explicit pads)")
    N, C, H, W = x.shape
    G = ctx.attr("group", 1)
    kernel = list(w.shape[2:])
    strides = list(ctx.attr("strides", [1, 1]))
    dil = list(ctx.attr("dilations", [1, 1]))
    pads = list(ctx.attr("pads", [0, 0, 0, 0]))
    outpad = list(ctx.attr("output_padding", [0, 0]))
    M = w.shape[1] * G
    if w.shape[0] != C or C % G:
        raise ctx.unsupported(f"weights {w.shape} do not match {C} input channels in {G} groups")
    OH = strides[0] * (H - 1) + outpad[0] + (kernel[0] - 1) * dil[0] + 1 - pads[0] - pads[2]
    OW = strides[1] * (W - 1) + outpad[1] + (kernel[1] - 1) * dil[1] + 1 - pads[1] - pads[3]
    if OH <= 0 or OW <= 0:
        raise ctx.unsupported(f"empty output {OH}x{OW}")
    out = ctx.out(0, (N, M, OH, OW), np.float32)
    R = (M // G) * kernel[0] * kernel[1]
    ws_bytes = align(R * H * W * 4) + align(gemm_workspace(R, H * W, C // G, ctx.planner.nthreads))
    ctx.step(X_CONV_TRANSPOSE, [out, x, w, b, ctx.scratch(ws_bytes)],
             [N, C, H, W, M, OH, OW, kernel[0], kernel[1], strides[0], strides[1], pads[0], pads[1], dil[0], dil[1],
              G, ws_bytes])


def _pool(ctx: LoweringContext, kind: int) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32,))
    if len(ctx.node.outputs) > 1 and ctx.node.outputs[1]:
        raise ctx.unsupported("the Indices output of MaxPool")
    N, C, H, W = _as_2d(ctx, x)
    one_d = x.rank == 3
    kernel = list(ctx.attr("kernel_shape"))
    begin, end, strides, dil = _spatial(ctx, x, kernel)
    kernel, begin, end = _lift(kernel, one_d, 1), _lift(begin, one_d, 0), _lift(end, one_d, 0)
    strides, dil = _lift(strides, one_d, 1), _lift(dil, one_d, 1)
    if ctx.attr("storage_order", 0):
        raise ctx.unsupported("storage_order=1")
    ceil_mode = ctx.attr("ceil_mode", 0)
    dims = []
    for i, size in enumerate((H, W)):
        span = size + begin[i] + end[i] - dil[i] * (kernel[i] - 1) - 1
        o = (-(-span // strides[i]) if ceil_mode else span // strides[i]) + 1
        if ceil_mode and (o - 1) * strides[i] >= size + begin[i]:
            o -= 1  # the last window must start inside the input or the left pad
        dims.append(o)
    OH, OW = dims
    if ceil_mode:
        # Windows may run past the declared end padding: extend it so the
        # averaging divisor counts exactly the positions ORT counts.
        end = [max(end[i], (dims[i] - 1) * strides[i] + dil[i] * (kernel[i] - 1) + 1 - (H, W)[i] - begin[i])
               for i in range(2)] if not ctx.attr("count_include_pad", 0) else end
    out = ctx.out(0, (N, C, OW) if one_d else (N, C, OH, OW), np.float32)
    if out.size == 0:
        return
    ctx.step(X_POOL, [out, x], [N * C, H, W, OH, OW, kernel[0], kernel[1], strides[0], strides[1], begin[0], begin[1],
                                dil[0], dil[1], kind, ctx.attr("count_include_pad", 0), end[0], end[1]])


def lower_maxpool(ctx: LoweringContext) -> None:
    _pool(ctx, 0)


def lower_avgpool(ctx: LoweringContext) -> None:
    _pool(ctx, 1)


def lower_global_pool(ctx: LoweringContext) -> None:
    from engine.ops.reduce import emit_reduce

    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32,))
    if x.rank < 3:
        raise ctx.unsupported(f"input of rank {x.rank}")
    op = 1 if ctx.node.op == "GlobalAveragePool" else 2
    out = ctx.out(0, x.shape[:2] + (1,) * (x.rank - 2), np.float32)
    emit_reduce(ctx, out, x, op, [0, 0] + [1] * (x.rank - 2))


def lower_batchnorm(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32,))
    if ctx.attr("training_mode", 0):
        raise ctx.unsupported("training_mode=1")
    if len([o for o in ctx.node.outputs if o]) > 1:
        raise ctx.unsupported("running mean/var outputs (training)")
    scale, bias, mean, var = (ctx.const(i).astype(np.float64) for i in range(1, 5))
    eps = ctx.attr("epsilon", 1e-5)
    # Folding the four vectors into one scale and shift is conversion-time
    # arithmetic on constants, done in float64 and rounded once.
    s = scale / np.sqrt(var + eps)
    t = bias - mean * s
    shape = (x.shape[1],) + (1,) * (x.rank - 2) if x.rank > 1 else (1,)
    sv = Value(shape, np.float32, const=s.astype(np.float32).reshape(shape))
    tv = Value(shape, np.float32, const=t.astype(np.float32).reshape(shape))
    tmp = ctx.temp(x.shape, np.float32)
    emit_binary(ctx, tmp, x, sv, 2)
    emit_binary(ctx, ctx.out(0, x.shape, np.float32), tmp, tv, 0)


COORD = {"half_pixel": 0, "asymmetric": 1, "align_corners": 2, "pytorch_half_pixel": 3,
         "tf_half_pixel_for_nearest": 4}
NEAREST = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3}


def lower_resize(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32,))
    mode = ctx.attr("mode", "nearest")
    coord = ctx.attr("coordinate_transformation_mode", "half_pixel")
    nearest = ctx.attr("nearest_mode", "round_prefer_floor")
    if mode not in ("nearest", "linear") or coord not in COORD or nearest not in NEAREST:
        raise ctx.unsupported(f"mode={mode!r}, coordinate_transformation_mode={coord!r}, nearest_mode={nearest!r}")
    if ctx.attr("antialias", 0) or ctx.attr("exclude_outside", 0) or ctx.attr("axes") is not None \
            or ctx.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise ctx.unsupported("antialias / exclude_outside / axes / keep_aspect_ratio_policy")
    scales = ctx.const(2, "scales") if ctx.input(2) is not None else None
    sizes = ctx.const(3, "sizes") if len(ctx.inputs) > 3 and ctx.input(3) is not None else None
    if scales is not None and scales.size:
        scales = [float(s) for s in scales]
        out_shape = [int(math.floor(d * s)) for d, s in zip(x.shape, scales)]
        lengths = [d * s for d, s in zip(x.shape, scales)]
    elif sizes is not None:
        out_shape = [int(s) for s in sizes]
        scales = [o / d if d else 1.0 for o, d in zip(out_shape, x.shape)]
        lengths = [float(o) for o in out_shape]
    else:
        raise ctx.unsupported("neither scales nor sizes given")
    if x.rank != 4 or out_shape[:2] != list(x.shape[:2]):
        raise ctx.unsupported(f"resizing {x.shape} -> {out_shape}: only the last two dims of a 4-D tensor")
    if coord == "tf_crop_and_resize":
        raise ctx.unsupported("tf_crop_and_resize")
    out = ctx.out(0, out_shape, np.float32)
    if out.size == 0:
        return
    ctx.step(X_RESIZE, [out, x], [x.shape[0] * x.shape[1], x.shape[2], x.shape[3], out_shape[2], out_shape[3],
                                  0 if mode == "nearest" else 1, COORD[coord], NEAREST[nearest]],
             [scales[2], scales[3], lengths[2], lengths[3]])


RULES = {
    "Conv": {1: lower_conv}, "ConvTranspose": {1: lower_conv_transpose}, "MaxPool": {8: lower_maxpool}, "AveragePool": {7: lower_avgpool},
    "GlobalAveragePool": {1: lower_global_pool}, "GlobalMaxPool": {1: lower_global_pool},
    "BatchNormalization": {9: lower_batchnorm}, "Resize": {11: lower_resize},
}
_WINDOW = {"auto_pad", "pads", "strides", "dilations", "kernel_shape"}
ATTRS = {
    "Conv": _WINDOW | {"group", "_act", "_p0", "_p1"},
    "ConvTranspose": _WINDOW | {"group", "output_padding", "output_shape"},
    "MaxPool": _WINDOW | {"ceil_mode", "storage_order"},
    "AveragePool": _WINDOW | {"ceil_mode", "count_include_pad"},
    "BatchNormalization": {"epsilon", "momentum", "training_mode", "spatial"},
    "Resize": {"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
               "extrapolation_value", "antialias", "axes", "keep_aspect_ratio_policy"},
}
