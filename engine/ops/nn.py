"""Convolution, pooling, BatchNormalization and Resize, float32.

Convolution and pooling run on the library's NHWC kernels. Nodes the layout
pass (engine.passes.to_kernel_layout) marked _nhwc read and write NHWC
tensors directly; any other (NCHW) node is lowered as transpose in, NHWC
kernel, transpose out. Conv weights come pre-packed from the converter
(input 3, tagged _packed_isa) or are packed at plan time. A group-1 Conv
whose `_precision` attribute is "bf16" runs the bf16 kernel (CONV_BF16:
bf16 products, fp32 sums, aie_conv_lowp.h) on its bf16 blob; between two
such convs (engine.passes.precision.mark_bf16_activations: `_y_bf16`) the
activation is a uint16 tensor of bf16 bits (CONV_BF16_IO).
"""

from __future__ import annotations

import math

import numpy as np

from engine.kernels.abi import (Binary, ConvBf16IoStep, ConvDwPwStep, ConvPackStep, ConvStep, GlobalPoolStep, Op,
                               PoolStep, Reduce, ResizeStep, Unary)
from engine.kernels.conv_lowp import conv_bf16_workspace, is_bf16_conv_blob, pack_conv_bf16
from engine.lowering import LoweringContext, Value
from engine.ops.data import emit_copy
from engine.ops.elementwise import emit_binary, emit_unary
from engine.ops.reduce import emit_reduce
from engine.packing import (conv_output_shape, conv_params, conv_workspace, dw_pw_workspace, host_isa,
                            is_winograd_blob, pack_conv, packed_conv_size, pool_output_shape, pool_params, winograd_wins)


def _spatial(ctx, sizes, kernel):
    """(pads_begin, pads_end, strides, dilations) for a 1-D or 2-D window over
    spatial dims of the given sizes."""
    nd = len(kernel)
    strides = list(ctx.attr("strides", [1] * nd))
    dil = list(ctx.attr("dilations", [1] * nd))
    pads = list(ctx.attr("pads", [0] * (2 * nd)))
    auto = ctx.attr("auto_pad", "NOTSET")
    begin, end = pads[:nd], pads[nd:]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        for i in range(nd):
            size = sizes[i]
            out = -(-size // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - size, 0)
            small = total // 2
            begin[i], end[i] = (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
    elif auto == "VALID":
        begin, end = [0] * nd, [0] * nd
    elif auto != "NOTSET":
        raise ctx.unsupported(f"auto_pad={auto!r}")
    return begin, end, strides, dil


def _lift(vals, one_d, fill):
    return [fill] + list(vals) if one_d else list(vals)


def _image(ctx, x: Value, what: str = "input"):
    """(x as NHWC (N, H, W, C), one_d) for a step input: NHWC nodes (laid out
    by engine.passes.to_kernel_layout) read x as is; an NCHW node's input is
    transposed into a temporary."""
    if ctx.attr("_nhwc", 0):
        if x.rank != 4:
            raise ctx.unsupported(f"NHWC {what} of rank {x.rank}")
        return x, False
    if x.rank == 3:
        N, C, W = x.shape
        H = 1
    elif x.rank == 4:
        N, C, H, W = x.shape
    else:
        raise ctx.unsupported(f"{what} of rank {x.rank}: only 1-D and 2-D windows (rank 3 or 4) are supported")
    xt = ctx.temp((N, H, W, C), x.dtype)
    if xt.size:
        emit_copy(ctx, xt, x, (N, H, W, C), (C * H * W, W, 1, H * W))
    return xt, x.rank == 3


def _emit_image_out(ctx, y: Value, one_d: bool) -> None:
    """Output 0 from the NHWC result y: y itself for NHWC nodes, else NCHW."""
    N, P, Q, K = y.shape
    if ctx.attr("_nhwc", 0):
        return
    out = ctx.out(0, (N, K, Q) if one_d else (N, K, P, Q), np.float32)
    if out.size:
        emit_copy(ctx, out, y, (N, K, P, Q), (P * Q * K, 1, Q * K, K))


def _nhwc_result(ctx, shape) -> Value:
    return ctx.out(0, shape, np.float32) if ctx.attr("_nhwc", 0) else ctx.temp(shape, np.float32)


def _packed_weights_bf16(ctx, w: Value) -> Value | None:
    """The bf16 weight blob of a group-1 Conv: the converter's (input 3; one
    layout at every ISA level), else packed now from constant weights; None
    for weights computed at run time (the node then runs in fp32)."""
    packed = ctx.input(3)
    if packed is not None and packed.const is not None and is_bf16_conv_blob(packed.const):
        return packed
    if w.const is None:
        return None
    blob = pack_conv_bf16(w.const.reshape(w.shape[:2] + (1,) + w.shape[2:]) if w.rank == 3 else w.const)
    return Value(blob.shape, np.uint8, const=blob)


def _packed_weights(ctx, w: Value, params, group: int, transposed: bool, blob_input: int = 3,
                    isa_attr: str = "_packed_isa") -> Value:
    """The packed weight blob: the converter's (input 3; ConvDwPw's 1x1s:
    inputs 6 and 10, tagged _pw_packed_isa / _ex_packed_isa) when it was
    packed for this host's ISA, else packed now from a constant, else by a
    step."""
    packed = ctx.input(blob_input)
    # Winograd where the library prefers it for this input size: the
    # converter chose by channel counts alone, so a blob of the other kind
    # is packed again (from the raw weights, which the .aie keeps).
    wino = not transposed and winograd_wins(params)
    if packed is not None and ctx.attr(isa_attr) == host_isa() and (
            w.const is None or packed.const is None or is_winograd_blob(packed.const) == wino):
        return packed
    if w.const is not None:
        w4 = w.const.reshape(w.shape[:2] + (1,) + w.shape[2:]) if w.rank == 3 else w.const
        blob = pack_conv(w4, group, transposed, winograd=wino)
        return Value(blob.shape, np.uint8, const=blob)
    size = packed_conv_size(params, transposed)
    if size == 0:
        raise ctx.unsupported(f"weights {w.shape} cannot be packed for group {group}")
    out = ctx.temp((size,), np.uint8)
    ctx.step(Op.CONV_PACK, [out, w], ConvPackStep(conv=params, transposed=int(transposed), packed_bytes=size).words())
    return out


def _window_params(ctx, nhwc, K, kernel, begin, end, strides, dil, G):
    """(conv params, P, Q) of a 2-D window over an NHWC input; an invalid
    window (larger than the padded input, ...) is the library's reason."""
    N, H, W, C = nhwc
    params = conv_params(N=N, H=H, W=W, C=C, K=K, R=kernel[0], S=kernel[1], stride_h=strides[0],
                         stride_w=strides[1], dil_h=dil[0], dil_w=dil[1], pad_top=begin[0], pad_left=begin[1],
                         pad_bottom=end[0], pad_right=end[1], groups=G)
    pq = conv_output_shape(params)
    if isinstance(pq, str):
        raise ctx.unsupported(pq)
    return params, pq[0], pq[1]


def lower_conv(ctx: LoweringContext) -> None:
    x, w, b = ctx.input(0), ctx.input(1), ctx.input(2)
    if w is None and ctx.attr("_w_shape") is not None and ctx.attr("_precision") == "bf16":
        # the converter kept only the bf16 blob (input 3) of these weights
        w = Value(tuple(ctx.attr("_w_shape")), np.float32)
    if w is None:
        raise ctx.unsupported("input W is missing")
    ctx.require_dtype(w, (np.float32,), "weights")
    # uint16: bf16 bits written by a bf16 conv (mark_bf16_activations); only a bf16 NHWC conv reads them
    bf16_io = ctx.attr("_precision", "fp32") == "bf16" and ctx.attr("_nhwc", 0)
    ctx.require_dtype(x, (np.float32, np.uint16) if bf16_io else (np.float32,))
    if w.rank != x.rank:
        raise ctx.unsupported(f"weights of rank {w.rank} for an input of rank {x.rank}")
    xt, one_d = _image(ctx, x)
    N, H, W, C = xt.shape
    kernel = _lift(w.shape[2:], one_d, 1)
    if ctx.attr("kernel_shape") is not None and _lift(ctx.attr("kernel_shape"), one_d, 1) != kernel:
        raise ctx.unsupported(f"kernel_shape {ctx.attr('kernel_shape')} disagrees with weights {w.shape}")
    begin, end, strides, dil = _spatial(ctx, (H, W)[2 - len(w.shape[2:]):], w.shape[2:])
    begin, end = _lift(begin, one_d, 0), _lift(end, one_d, 0)
    strides, dil = _lift(strides, one_d, 1), _lift(dil, one_d, 1)
    G = ctx.attr("group", 1)
    K = w.shape[0]
    if G < 1 or C % G or K % G or w.shape[1] != C // G:
        raise ctx.unsupported(f"weights {w.shape} do not match {C} input channels in {G} groups")
    params, P, Q = _window_params(ctx, (N, H, W, C), K, kernel, begin, end, strides, dil, G)
    # bf16 nodes (the precision pass's _precision) run CONV_BF16 where its
    # weights are constants; grouped convs and run-time weights stay fp32.
    packed = _packed_weights_bf16(ctx, w) if ctx.attr("_precision", "fp32") == "bf16" and G == 1 else None
    if packed is None and ctx.input(1) is None:
        raise ctx.unsupported("only a bf16 weight blob is stored (_w_shape), but input 3 is not one")
    op, workspace = (Op.CONV_BF16, conv_bf16_workspace) if packed is not None else (Op.CONV, conv_workspace)
    residual = ctx.input(4)
    io = (BF16_X if x.dtype == np.uint16 else 0) | (BF16_Y if bf16_io and ctx.attr("_y_bf16", 0) else 0) \
        | (BF16_RES if residual is not None and residual.dtype == np.uint16 else 0)
    if io and packed is None:
        raise ctx.unsupported("a bf16 (uint16) operand, but the weights are not constant: no bf16 kernel")
    if io and residual is not None and residual.shape != (N, P, Q, K):
        raise ctx.unsupported(f"a bf16 residual of shape {residual.shape} for an output of {(N, P, Q, K)}: "
                              "only a fused residual of the output's shape is read in bf16")
    if io:
        op = Op.CONV_BF16_IO
    if packed is None:
        packed = _packed_weights(ctx, w, params, G, False)
    act, p0, p1 = ctx.attr("_act", 0), ctx.attr("_p0", 0.0), ctx.attr("_p1", 0.0)
    if b is not None:
        ctx.require_dtype(b, (np.float32,))
        if b.shape != (K,):
            raise ctx.unsupported(f"bias of shape {b.shape}, expected ({K},)")
    y = ctx.out(0, (N, P, Q, K), np.uint16) if io & BF16_Y else _nhwc_result(ctx, (N, P, Q, K))
    if residual is not None and residual.shape != y.shape:
        # The fused residual must match y exactly; a broadcasting Add runs as its own step.
        conv_y = ctx.temp(y.shape, np.float32)
        _conv_step(ctx, op, conv_y, xt, packed, b, None, params, 0, 0.0, 0.0, workspace)
        if act:
            summed = ctx.temp(y.shape, np.float32)
            emit_binary(ctx, summed, conv_y, residual, Binary.ADD)
            emit_unary(ctx, y, summed, Unary(act), p0, p1)  # an epilogue activation is a unary op
        else:
            emit_binary(ctx, y, conv_y, residual, Binary.ADD)
    else:
        _conv_step(ctx, op, y, xt, packed, b, residual, params, act, p0, p1, workspace, io)
    _emit_image_out(ctx, y, one_d)


# aie_conv_lowp.h's AIE_CONV_BF16_X / _Y / _RES: which operands CONV_BF16_IO reads or writes in bf16
BF16_X, BF16_Y, BF16_RES = 1, 2, 4


def _conv_step(ctx, op, y, xt, packed, b, residual, params, act, p0, p1, conv_workspace, io=0) -> None:
    """A CONV, CONV_BF16 or CONV_BF16_IO step (the same operands)."""
    if y.size == 0:
        return
    ws_bytes = conv_workspace(params, ctx.planner.nthreads)
    words = (ConvBf16IoStep(conv=params, act=act, workspace_bytes=ws_bytes, io=io) if op == Op.CONV_BF16_IO
             else ConvStep(conv=params, act=act, workspace_bytes=ws_bytes)).words()
    ctx.step(op, [y, xt, packed, b, residual, ctx.scratch(ws_bytes)], words, [p0, p1])


# Pixels of the direct conv kernel's AVX-512 tile (14, conv_direct_avx512.c):
# CONV_DW_PW runs a stage only over rows at least this long (lower_conv_dw_pw).
FUSE_MIN_ROW = 14


def lower_conv_dw_pw(ctx: LoweringContext) -> None:
    """ConvDwPw (engine.passes.fuse_dw_pw): one CONV_DW_PW step, bitwise the
    [expand,] depthwise and project CONV steps it replaces."""
    x, wd, bd, wp, bp, residual, wx, bx = (ctx.input(i) for i in (0, 1, 2, 4, 5, 7, 8, 9))
    if wd is None or wp is None:
        raise ctx.unsupported("input W of the depthwise or the project conv is missing")
    for v, what in ((x, "input"), (wd, "weights"), (wp, "project weights"), (wx, "expand weights")):
        if v is not None:
            ctx.require_dtype(v, (np.float32,), what)
    if x.rank != 4 or wd.rank != 4 or wp.rank != 4 or (wx is not None and wx.rank != 4):
        raise ctx.unsupported(f"an input of rank {x.rank}: an NHWC image and 2-D kernels expected")
    N, H, W, C = x.shape
    ex = None
    if wx is not None:
        if wx.shape[1:] != (C, 1, 1):
            raise ctx.unsupported(f"expand weights {wx.shape}: not a 1x1 conv over {C} channels")
        ex = conv_params(N=N, H=H, W=W, C=C, K=wx.shape[0], R=1, S=1, stride_h=1, stride_w=1, dil_h=1, dil_w=1,
                         groups=1)
        C = wx.shape[0]
    begin, end, strides, dil = _spatial(ctx, (H, W), wd.shape[2:])
    G, K = ctx.attr("group", 1), wp.shape[0]
    if not (G == C == wd.shape[0] and wd.shape[1] == 1) or wp.shape[1:] != (C, 1, 1):
        raise ctx.unsupported(f"weights {wd.shape} and {wp.shape}: not a depthwise conv over {C} channels "
                              "and a 1x1 conv on its output")
    dw, P, Q = _window_params(ctx, (N, H, W, C), C, wd.shape[2:], begin, end, strides, dil, G)
    pw = conv_params(N=N, H=P, W=Q, C=C, K=K, R=1, S=1, stride_h=1, stride_w=1, dil_h=1, dil_w=1, groups=1)
    for b, n in ((bd, C), (bp, K), (bx, C)):
        if b is not None:
            ctx.require_dtype(b, (np.float32,))
            if b.shape != (n,):
                raise ctx.unsupported(f"bias of shape {b.shape}, expected ({n},)")
    packed_dw = _packed_weights(ctx, wd, dw, G, False)
    packed_pw = _packed_weights(ctx, wp, pw, 1, False, blob_input=6, isa_attr="_pw_packed_isa")
    packed_ex = None if ex is None else _packed_weights(ctx, wx, ex, 1, False, blob_input=10,
                                                         isa_attr="_ex_packed_isa")
    act, p0, p1 = ctx.attr("_act", 0), ctx.attr("_p0", 0.0), ctx.attr("_p1", 0.0)
    y = ctx.out(0, (N, P, Q, K), np.float32)
    if y.size == 0:
        return
    ex_act = (ctx.attr("_ex_act", 0), ctx.attr("_ex_p0", 0.0), ctx.attr("_ex_p1", 0.0))
    dw_act = (ctx.attr("_dw_act", 0), ctx.attr("_dw_p0", 0.0), ctx.attr("_dw_p1", 0.0))
    # Rows shorter than the direct kernel's tile (FUSE_MIN_ROW) would run its
    # half-height tiles, and stream the weights once per row instead of once
    # per tile of the flat 1x1 conv; tensors that small stay in L2 anyway, so
    # there the convs run as their own steps (the same bits).
    if ex is not None and min(W, Q) < FUSE_MIN_ROW:
        xe = ctx.temp((N, H, W, C), np.float32)
        _conv_step(ctx, Op.CONV, xe, x, packed_ex, bx, None, ex, *ex_act, conv_workspace)
        x, ex, packed_ex, bx = xe, None, None, None
    if Q < FUSE_MIN_ROW:
        mid = ctx.temp((N, P, Q, C), np.float32)
        _conv_step(ctx, Op.CONV, mid, x, packed_dw, bd, None, dw, *dw_act, conv_workspace)
        _conv_step(ctx, Op.CONV, y, mid, packed_pw, bp, residual, pw, act, p0, p1, conv_workspace)
        return
    # a residual of another shape is a broadcasting Add: its own step, as in lower_conv
    broadcast = residual is not None and residual.shape != y.shape
    conv_y = ctx.temp(y.shape, np.float32) if broadcast else y
    ws = dw_pw_workspace(ex, dw, pw, ctx.planner.nthreads)
    words = ConvDwPwStep(dw=dw, pw=pw, ex=ex if ex is not None else conv_params(), dw_act=dw_act[0],
                         pw_act=0 if broadcast else act, ex_act=ex_act[0], workspace_bytes=ws).words()
    ctx.step(Op.CONV_DW_PW, [conv_y, x, packed_dw, bd, packed_pw, bp, None if broadcast else residual,
                             ctx.scratch(ws), packed_ex, bx], words, [*dw_act[1:], p0, p1, *ex_act[1:]])
    if broadcast and act:
        summed = ctx.temp(y.shape, np.float32)
        emit_binary(ctx, summed, conv_y, residual, Binary.ADD)
        emit_unary(ctx, y, summed, Unary(act), p0, p1)
    elif broadcast:
        emit_binary(ctx, y, conv_y, residual, Binary.ADD)


def lower_conv_transpose(ctx: LoweringContext) -> None:
    x, w, b = ctx.input(0), ctx.input(1), ctx.input(2)
    for v in (x, w):
        ctx.require_dtype(v, (np.float32,))
    if x.rank != 4 or w.rank != 4:
        raise ctx.unsupported(f"input of rank {x.rank}: only 2-D transposed convolution")
    if ctx.attr("output_shape") is not None or ctx.attr("auto_pad", "NOTSET") != "NOTSET":
        raise ctx.unsupported("output_shape / auto_pad (give explicit pads)")
    xt, _ = _image(ctx, x)
    N, H, W, C = xt.shape
    G = ctx.attr("group", 1)
    kernel = list(w.shape[2:])
    strides = list(ctx.attr("strides", [1, 1]))
    dil = list(ctx.attr("dilations", [1, 1]))
    pads = list(ctx.attr("pads", [0, 0, 0, 0]))
    outpad = list(ctx.attr("output_padding", [0, 0]))
    K = w.shape[1] * G
    if G < 1 or w.shape[0] != C or C % G:
        raise ctx.unsupported(f"weights {w.shape} do not match {C} input channels in {G} groups")
    params = conv_params(N=N, H=H, W=W, C=C, K=K, R=kernel[0], S=kernel[1], stride_h=strides[0],
                         stride_w=strides[1], dil_h=dil[0], dil_w=dil[1], pad_top=pads[0], pad_left=pads[1],
                         pad_bottom=pads[2], pad_right=pads[3], groups=G, out_pad_h=outpad[0], out_pad_w=outpad[1])
    pq = conv_output_shape(params, transposed=True)
    if isinstance(pq, str):
        raise ctx.unsupported(pq)
    P, Q = pq
    if b is not None and b.shape != (K,):
        raise ctx.unsupported(f"bias of shape {b.shape}, expected ({K},)")
    packed = _packed_weights(ctx, w, params, G, True)
    act, p0, p1 = ctx.attr("_act", 0), ctx.attr("_p0", 0.0), ctx.attr("_p1", 0.0)
    y = _nhwc_result(ctx, (N, P, Q, K))
    if y.size:
        ws_bytes = conv_workspace(params, ctx.planner.nthreads, transposed=True)
        ctx.step(Op.CONV_TRANSPOSE, [y, xt, packed, b, ctx.scratch(ws_bytes)],
                 ConvStep(conv=params, act=act, workspace_bytes=ws_bytes).words(),
                 [p0, p1])
    _emit_image_out(ctx, y, False)


def _pool(ctx: LoweringContext, kind: int) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32,))
    if len(ctx.node.outputs) > 1 and ctx.node.outputs[1]:
        raise ctx.unsupported("the Indices output of MaxPool")
    if ctx.attr("storage_order", 0):
        raise ctx.unsupported("storage_order=1")
    kernel = list(ctx.attr("kernel_shape"))
    xt, one_d = _image(ctx, x)
    N, H, W, C = xt.shape
    if len(kernel) != (1 if one_d else 2):
        raise ctx.unsupported(f"kernel_shape {kernel} for an input of rank {x.rank}")
    begin, end, strides, dil = _spatial(ctx, (H, W)[2 - len(kernel):], kernel)
    kernel, begin, end = _lift(kernel, one_d, 1), _lift(begin, one_d, 0), _lift(end, one_d, 0)
    strides, dil = _lift(strides, one_d, 1), _lift(dil, one_d, 1)
    fields = dict(N=N, H=H, W=W, C=C, kh=kernel[0], kw=kernel[1], stride_h=strides[0], stride_w=strides[1],
                  dil_h=dil[0], dil_w=dil[1], pad_top=begin[0], pad_left=begin[1], pad_bottom=end[0],
                  pad_right=end[1])
    ceil_mode, incl = ctx.attr("ceil_mode", 0), ctx.attr("count_include_pad", 0)
    params = pool_params(ceil_mode, incl, **fields)
    pq = pool_output_shape(params)
    if isinstance(pq, str):
        raise ctx.unsupported(pq)
    y = _nhwc_result(ctx, (N, pq[0], pq[1], C))
    if y.size:
        ctx.step(Op.POOL, [y, xt], PoolStep(kind=kind, pool=params).words())
    _emit_image_out(ctx, y, one_d)


def lower_maxpool(ctx: LoweringContext) -> None:
    _pool(ctx, 0)


def lower_avgpool(ctx: LoweringContext) -> None:
    _pool(ctx, 1)


def lower_global_pool(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32,))
    if x.rank < 3:
        raise ctx.unsupported(f"input of rank {x.rank}")
    avg = ctx.node.op == "GlobalAveragePool"
    if ctx.attr("_nhwc", 0):
        N, H, W, C = x.shape
        out = ctx.out(0, (N, 1, 1, C), np.float32)
        if out.size:
            if H * W == 0:
                raise ctx.unsupported(f"global pooling of an empty image {x.shape}")
            ctx.step(Op.GLOBAL_POOL, [out, x], GlobalPoolStep(kind=1 if avg else 0, N=N, HW=H * W, C=C).words())
        return
    out = ctx.out(0, x.shape[:2] + (1,) * (x.rank - 2), np.float32)
    emit_reduce(ctx, out, x, Reduce.MEAN if avg else Reduce.MAX, [0, 0] + [1] * (x.rank - 2))


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
    if ctx.attr("_nhwc", 0):  # engine.passes.to_kernel_layout: channels last
        shape = (x.shape[-1],)
    sv = Value(shape, np.float32, const=s.astype(np.float32).reshape(shape))
    tv = Value(shape, np.float32, const=t.astype(np.float32).reshape(shape))
    tmp = ctx.temp(x.shape, np.float32)
    emit_binary(ctx, tmp, x, sv, Binary.MUL)
    emit_binary(ctx, ctx.out(0, x.shape, np.float32), tmp, tv, Binary.ADD)


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
    nhwc = ctx.attr("_nhwc", 0)
    # NHWC nodes (layout pass) resize dims 1 and 2 and keep N and C.
    hw = (1, 2) if nhwc else (2, 3)
    keep = [0, 3] if nhwc else [0, 1]
    if x.rank != 4 or [out_shape[d] for d in keep] != [x.shape[d] for d in keep]:
        raise ctx.unsupported(f"resizing {x.shape} -> {out_shape}: only the last two dims of a 4-D tensor")
    if coord == "tf_crop_and_resize":
        raise ctx.unsupported("tf_crop_and_resize")
    out = ctx.out(0, out_shape, np.float32)
    if out.size == 0:
        return
    outer = x.shape[0] if nhwc else x.shape[0] * x.shape[1]
    params = ResizeStep(outer=outer, ih=x.shape[hw[0]], iw=x.shape[hw[1]], oh=out_shape[hw[0]], ow=out_shape[hw[1]],
                        mode=0 if mode == "nearest" else 1, coord=COORD[coord], nearest=NEAREST[nearest],
                        channels=x.shape[3] if nhwc else 0)
    ctx.step(Op.RESIZE, [out, x], params.words(), [scales[hw[0]], scales[hw[1]], lengths[hw[0]], lengths[hw[1]]])


RULES = {
    "Conv": {1: lower_conv}, "ConvDwPw": {1: lower_conv_dw_pw}, "ConvTranspose": {1: lower_conv_transpose}, "MaxPool": {8: lower_maxpool}, "AveragePool": {7: lower_avgpool},
    "GlobalAveragePool": {1: lower_global_pool}, "GlobalMaxPool": {1: lower_global_pool},
    "BatchNormalization": {9: lower_batchnorm}, "Resize": {11: lower_resize},
}
_WINDOW = {"auto_pad", "pads", "strides", "dilations", "kernel_shape"}
# Internal attributes set by the passes: _nhwc (layout), _act/_p0/_p1 (fused
# activation), _packed_isa (input 3 holds weights packed for that aie_isa).
_FUSED = {"_nhwc", "_act", "_p0", "_p1", "_packed_isa"}
ATTRS = {
    "Conv": _WINDOW | {"group", "_precision", "_w_shape", "_y_bf16"} | _FUSED,
    "ConvDwPw": _WINDOW | {"group", "_dw_act", "_dw_p0", "_dw_p1", "_pw_packed_isa", "_ex_act", "_ex_p0", "_ex_p1",
                           "_ex_packed_isa"} | _FUSED,
    "ConvTranspose": _WINDOW | {"group", "output_padding", "output_shape"} | _FUSED,
    "MaxPool": _WINDOW | {"ceil_mode", "storage_order", "_nhwc"},
    "AveragePool": _WINDOW | {"ceil_mode", "count_include_pad", "_nhwc"},
    "GlobalAveragePool": {"_nhwc"}, "GlobalMaxPool": {"_nhwc"},
    "BatchNormalization": {"epsilon", "momentum", "training_mode", "spatial"},
    "Resize": {"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
               "extrapolation_value", "antialias", "axes", "keep_aspect_ratio_policy", "_nhwc"},
}
