"""The fused int8 nodes engine.passes.qdq_fuse writes, on the int8 kernels:
QConvU8S8 (CONV_U8S8, aie_conv_s8.h; with `group` == C == K the depthwise
CONV_U8S8_DW, weights R x S x C int8) and QGemmU8S8 (GEMM_U8S8_PACKED,
aie_gemm_lowp.h); and QLutU8 (LUT_U8), a uint8 -> uint8 table per channel.

Inputs: x (uint8), x_scale, x_zero (scalars), the packed int8 weights,
w_scale (float32, one per output channel), bias (int32 for a uint8 output,
float32 otherwise; optional), and for a uint8 output y_scale, y_zero, then for a dense QConvU8S8
optionally a uint8 table (K x 256) applied to each output byte per channel (a QLutU8
joined to the conv).
Attributes: `_out` ("uint8" | "float32" | "int32": the sums, for ConvInteger / MatMulInteger), `_act` (float32 output only),
`_w_shape` (OIHW for the conv, [K, N] for the GEMM), the conv's window.
QConvU8S8 is NCHW like Conv unless the layout pass made it NHWC (`_nhwc`).
QAddU8 (QADD_U8): the QDQ residual Add of two uint8 tensors, element-wise.
QSoftmaxU8 (QSOFTMAX_U8): uint8 softmax over the last axis, onnxruntime's
QLinearSoftmax arithmetic (see emit_qsoftmax_u8).
"""

from __future__ import annotations

import numpy as np

from engine.kernels.abi import Binary, ConvU8s8Step, GemmU8s8Step, LutStep, Op, QaddU8Step, QsoftmaxU8Step, Unary
from engine.kernels.conv_int8 import workspace_size as conv_workspace_size
from engine.kernels.conv_int8_depthwise import workspace_size as dw_workspace_size
from engine.kernels.gemm_lowp import OUT_KINDS, u8s8_workspace_size
from engine.lowering import LoweringContext, Value
from engine.ops.compose import const as const_value
from engine.ops.data import emit_copy
from engine.ops.elementwise import emit_binary, emit_unary
from engine.ops.nn import _image, _spatial
from engine.ops.quantize import _qcast
from engine.packing import conv_output_shape, conv_params


def _quant(ctx: LoweringContext):
    """(x, x_scale, x_zero, packed, w_scale, bias, out kind, y_scale, y_zero, act)."""
    x = ctx.input(0)
    ctx.require_dtype(x, (np.uint8,))
    out = ctx.attr("_out", "float32")
    if out not in ("uint8", "float32", "int32"):
        raise ctx.unsupported(f"_out={out!r} (expected uint8, float32 or int32)")
    x_scale, x_zero = float(ctx.const(1).reshape(())), int(ctx.const(2).reshape(()))
    y_scale, y_zero = (float(ctx.const(6).reshape(())), int(ctx.const(7).reshape(()))) if out == "uint8" else (1.0, 0)
    return (x, x_scale, x_zero, ctx.input(3), ctx.input(4), ctx.input(5), OUT_KINDS[out], y_scale, y_zero,
            int(ctx.attr("_act", Unary.IDENTITY)), {"uint8": np.uint8, "int32": np.int32}.get(out, np.float32))


def lower_qgemm(ctx: LoweringContext) -> None:
    x, xs, xz, packed, w_scale, bias, out, ys, yz, act, dtype = _quant(ctx)
    K, N = ctx.attr("_w_shape")
    if x.rank < 1 or x.shape[-1] != K:
        raise ctx.unsupported(f"input {x.shape} for weights of {K} rows")
    M = int(np.prod(x.shape[:-1], dtype=np.int64))
    y = ctx.out(0, x.shape[:-1] + (N,), dtype)
    if y.size == 0:
        return
    nt = ctx.planner.nthreads
    ws = max(u8s8_workspace_size(M, N, K, n) for n in {1, max(nt, 1)})
    params = GemmU8s8Step(M=M, N=N, K=K, a_zero=xz, out=out, y_zero=yz, act=act, workspace_bytes=ws)
    ctx.step(Op.GEMM_U8S8_PACKED, [y, x, packed, w_scale, bias, ctx.scratch(ws)], params.words(),
             [xs, ys, 0.0, 0.0])


def lower_qconv(ctx: LoweringContext) -> None:
    """group 1: CONV_U8S8 (packed for the int8 GEMM); group == C == K (depthwise,
    weights R x S x C): CONV_U8S8_DW, uint8 or int32 output."""
    x, xs, xz, packed, w_scale, bias, out, ys, yz, act, dtype = _quant(ctx)
    Kout, Cg, R, S = ctx.attr("_w_shape")
    group = ctx.attr("group", 1)
    if x.rank != 4:
        raise ctx.unsupported(f"input of rank {x.rank}: the int8 convolution is 2-D")
    xt, _ = _image(ctx, x)
    N, H, W, Cx = xt.shape
    C = Cg * group
    if Cx != C or (group != 1 and (group != Kout or Cg != 1)):
        raise ctx.unsupported(f"weights {Kout}x{Cg}x{R}x{S} in {group} groups for an input of {Cx} channels")
    if group != 1 and out == OUT_KINDS["float32"]:
        raise ctx.unsupported("a float32 output of the depthwise int8 convolution")
    begin, end, strides, dil = _spatial(ctx, (H, W), (R, S))
    params = conv_params(N=N, H=H, W=W, C=C, K=Kout, R=R, S=S, stride_h=strides[0], stride_w=strides[1],
                         dil_h=dil[0], dil_w=dil[1], pad_top=begin[0], pad_left=begin[1], pad_bottom=end[0],
                         pad_right=end[1], groups=group)
    pq = conv_output_shape(params)
    if isinstance(pq, str):
        raise ctx.unsupported(pq)
    P, Q = pq
    nhwc = bool(ctx.attr("_nhwc", 0))
    y = ctx.out(0, (N, P, Q, Kout), dtype) if nhwc else ctx.temp((N, P, Q, Kout), dtype)
    if y.size:
        op = Op.CONV_U8S8 if group == 1 else Op.CONV_U8S8_DW
        ws = dw_workspace_size(params) if group != 1 else \
            max(conv_workspace_size(params, n) for n in {1, max(ctx.planner.nthreads, 1)})
        lut = ctx.input(8)
        if lut is not None and (group != 1 or out != OUT_KINDS["uint8"] or lut.shape != (Kout, 256)
                                or lut.dtype != np.uint8):
            raise ctx.unsupported(f"table {lut.shape} {lut.dtype} after a conv with {Kout} uint8 output channels")
        ctx.step(op, [y, xt, packed, w_scale, bias, ctx.scratch(ws)] + ([lut] if lut is not None else []),
                 ConvU8s8Step(conv=params, x_zero=xz, out=out, y_zero=yz, act=act, workspace_bytes=ws).words(),
                 [xs, ys, 0.0, 0.0])
    if not nhwc:
        nchw: Value = ctx.out(0, (N, Kout, P, Q), dtype)
        if nchw.size:
            emit_copy(ctx, nchw, y, (N, Kout, P, Q), (P * Q * Kout, 1, Q * Kout, Kout))


def lower_qlut(ctx: LoweringContext) -> None:
    """QLutU8 (x uint8, lut channels x 256): y = lut[channel][x], channel axis 1 (last when NHWC)."""
    x, lut = ctx.input(0), ctx.input(1)
    ctx.require_dtype(x, (np.uint8,))
    nhwc = bool(ctx.attr("_nhwc", 0))
    if x.rank < 2 or lut.rank != 2 or lut.shape != (x.shape[-1 if nhwc else 1], 256):
        raise ctx.unsupported(f"table {lut.shape} for an input {x.shape}")
    y = ctx.out(0, x.shape, np.uint8)
    if y.size:
        inner = 1 if nhwc else int(np.prod(x.shape[2:], dtype=np.int64))
        ctx.step(Op.LUT_U8, [y, x, lut], LutStep(n=y.size, channels=lut.shape[0], inner=inner).words())


def _period(shape: tuple, out: tuple) -> int | None:
    """How QADD_U8 reads an operand of `shape` broadcast to `out`: every element (the size),
    a trailing block repeated (its size), one byte (1); None for any other broadcast."""
    size = int(np.prod(shape, dtype=np.int64))
    core = tuple(shape)
    while core and core[0] == 1:
        core = core[1:]
    if size in (1, int(np.prod(out, dtype=np.int64))) or core == tuple(out[len(out) - len(core):]):
        return size
    return None


def emit_qadd_u8(ctx: LoweringContext, y: Value, a: Value, b: Value, qa, qb, qy, relu: int, form: int) -> bool:
    """One QADD_U8 pass (form 0: the steps' arithmetic, 1: onnxruntime's QLinearAdd, 2: QLinearMul); False
    when the broadcast is not one it reads."""
    pa, pb = _period(a.shape, y.shape), _period(b.shape, y.shape)
    if pa is None or pb is None or (form == 0 and (pa, pb) != (y.size, y.size)) or (form and relu):
        return False
    (sa, za), (sb, zb), (sy, zy) = qa, qb, qy
    ctx.step(Op.QADD_U8, [y, a, b], QaddU8Step(n=y.size, a_zero=int(za), b_zero=int(zb), y_zero=int(zy), relu=relu,
                                               form=form, a_period=pa, b_period=pb).words(),
             [float(sa), float(sb), float(sy)])
    return True


def lower_qadd(ctx: LoweringContext) -> None:
    """QAddU8 (a, b uint8; `_a`, `_b`, `_y`: [scale, zero point]; `_relu`; `_form`): QuantizeLinear(
    Relu?(DequantizeLinear(a) + DequantizeLinear(b))). `_form` 1 (what engine.passes.qdq_fuse
    writes without a Relu): onnxruntime's QLinearAdd arithmetic, which onnxruntime runs for this
    group and which rounds once where the steps round three times (one step apart on ties; see
    kernels/exec/qadd_u8.c). `_form` 0 (with a Relu): the steps' arithmetic, one QADD_U8 pass for
    same shapes; broadcasts QADD_U8 does not read (neither whole, a trailing block nor one
    element): the steps (DEQUANTIZE, BINARY, UNARY, QUANTIZE), whatever the form."""
    a, b = ctx.input(0), ctx.input(1)
    ctx.require_dtype(a, (np.uint8,))
    ctx.require_dtype(b, (np.uint8,))
    (sa, za), (sb, zb), (sy, zy) = (ctx.attr(k) for k in ("_a", "_b", "_y"))
    relu = int(ctx.attr("_relu", 0))
    shape = tuple(np.broadcast_shapes(a.shape, b.shape))
    y = ctx.out(0, shape, np.uint8)
    if y.size == 0:
        return
    form = int(ctx.attr("_form", 0))
    if emit_qadd_u8(ctx, y, a, b, (sa, za), (sb, zb), (sy, zy), relu, form):
        return
    da, db = ctx.temp(a.shape, np.float32), ctx.temp(b.shape, np.float32)
    _qcast(ctx, Op.DEQUANTIZE, da, a, np.uint8, float(sa), int(za))
    _qcast(ctx, Op.DEQUANTIZE, db, b, np.uint8, float(sb), int(zb))
    s = ctx.temp(shape, np.float32)
    emit_binary(ctx, s, da, db, Binary.ADD)
    if relu:
        emit_unary(ctx, s, s, Unary.RELU)
    _qcast(ctx, Op.QUANTIZE, y, s, np.uint8, float(sy), int(zy))


def qsoftmax_table(x_scale: float, d: int) -> np.ndarray:
    """onnxruntime's QLinearSoftmax table: float32(exp((i - 255 + shift) * x_scale)), i = 0..255, in
    float64, where shift (in input steps) keeps a row's sum of d entries below float32's max."""
    xs = float(np.float32(x_scale))
    shift = max(0.0, float(np.log(np.float64(np.finfo(np.float32).max) / d)) - 5.0) / xs
    return np.exp((np.arange(256, dtype=np.float64) - 255.0 + shift) * xs).astype(np.float32)


def emit_qsoftmax_u8(ctx: LoweringContext, y: Value, x: Value, x_scale: float, y_scale: float, y_zero: int,
                     d: int) -> None:
    """One QSOFTMAX_U8 pass over rows of d bytes. The output multiplier is float32 floor(1 / y_scale),
    not 1 / y_scale: onnxruntime's, which differs from QuantizeLinear's division when 1 / y_scale is
    not an integer (y_scale = float32(1/255): 254 instead of 255, every probability 0.4% low; a
    quantize_static QDQ softmax has that scale). onnxruntime runs a QDQ softmax this way too, so
    following it keeps a quantised transformer within one output step of onnxruntime int8; the
    DequantizeLinear -> Softmax -> QuantizeLinear steps (the ONNX definition) differ from it in
    about 1% of the bytes, by one step, at that scale (engine/passes/qdq_fuse.py)."""
    if not 0 <= y_zero <= 255 or d < 1 or x.size % d:
        raise ctx.unsupported(f"softmax rows of {d} in {x.shape}, output zero point {y_zero}")
    table = qsoftmax_table(x_scale, d)
    m = float(np.floor(np.float32(1.0) / np.float32(y_scale)))
    ctx.step(Op.QSOFTMAX_U8, [y, x, const_value(table)],
             QsoftmaxU8Step(rows=x.size // d, d=d, y_zero=int(y_zero)).words(), [m])


def lower_qsoftmax(ctx: LoweringContext) -> None:
    """QSoftmaxU8 (x uint8; `_x`, `_y`: [scale, zero point]; `_flatten`: rows flattened from `axis`
    (Softmax before opset 13), else the last axis)."""
    x = ctx.input(0)
    ctx.require_dtype(x, (np.uint8,))
    (sx, _), (sy, zy) = ctx.attr("_x"), ctx.attr("_y")
    axis = int(ctx.attr("axis", -1))
    if not -x.rank <= axis < max(x.rank, 1):
        raise ctx.unsupported(f"axis {axis} of an input of rank {x.rank}")
    axis %= max(x.rank, 1)
    if not ctx.attr("_flatten", 0) and axis != x.rank - 1:
        raise ctx.unsupported(f"axis {axis} is not the last of {x.shape}")
    y = ctx.out(0, x.shape, np.uint8)
    if y.size:
        emit_qsoftmax_u8(ctx, y, x, float(sx), float(sy), int(zy), int(np.prod(x.shape[axis:], dtype=np.int64)))


RULES = {"QConvU8S8": {1: lower_qconv}, "QGemmU8S8": {1: lower_qgemm}, "QLutU8": {1: lower_qlut},
         "QAddU8": {1: lower_qadd}, "QSoftmaxU8": {1: lower_qsoftmax}}
_COMMON = {"_out", "_act", "_w_shape"}
ATTRS = {"QConvU8S8": _COMMON | {"auto_pad", "pads", "strides", "dilations", "group"}, "QGemmU8S8": _COMMON,
         "QLutU8": set(), "QAddU8": {"_a", "_b", "_y", "_relu", "_form"},
         "QSoftmaxU8": {"_x", "_y", "axis", "_flatten"}}
