"""The QOperator-format integer ops (what onnxruntime.quantization writes with
QuantFormat.QOperator and quantize_dynamic): QLinearConv, QLinearMatMul,
ConvInteger, MatMulInteger, and QLinearAdd / QLinearMul / QGemm /
QLinearSoftmax / QLinearGlobalAveragePool (com.microsoft).

Where the weights are int8 constants with zero point 0 and the activation is
uint8 per tensor, engine.passes.qdq_fuse has already turned QLinearConv /
QLinearMatMul / ConvInteger / MatMulInteger into QConvU8S8 / QGemmU8S8 (the
int8 kernels). What reaches these rules is the general case — run-time
weights, int8 activations, uint8 weights, non-zero weight zero points,
grouped convolutions — composed exactly:

- the zero-point-shifted operands are small integers (|v| <= 255) carried in
  float32, and every float32 product-sum below covers at most 258 products
  (258 * 255 * 255 < 2**24), so each partial sum is an exact integer whatever
  the summation order; the partial sums are then cast to int32 and added in
  int32, which is the exact int32 result the spec defines;
- a convolution is the sum over its kernel taps of 1x1 convolutions of
  strided slices of the padded input (a 1x1 convolution is a plain
  product-sum, never a Winograd transform, so it stays exact);
- requantisation (QLinear*) is float32: (acc [+ bias]) * (s_x * s_w / s_y),
  rounded half to even, plus the output zero point, saturated — onnxruntime's
  arithmetic; the ONNX reference does the multiply in float64, which differs
  only where float32 rounding meets a tie.

Scales are float32 or float16 (then the scale arithmetic rounds to float16).
"""

from __future__ import annotations

import numpy as np

from engine.kernels.abi import Op, QmatmulU8Step
from engine.lowering import LoweringContext
from engine.ops.compose import Composer, ints
from engine.ops.nn import _spatial
from engine.ops.qlinear import emit_qadd_u8, emit_qsoftmax_u8

_EXACT = 258  # products per float32 partial sum: 258 * 255**2 < 2**24
_INT8 = (np.uint8, np.int8)


def _shifted(c: Composer, v, zp, what: str, axis_len: int | None = None, axis_shape=None):
    """float32(v) - float32(zp), zp a scalar or (when axis_shape) a vector reshaped to broadcast."""
    ctx = c.ctx
    ctx.require_dtype(v, _INT8, what)
    f = c.cast(v, np.float32)
    if zp is None:
        return f
    if zp.dtype != v.dtype:
        raise ctx.unsupported(f"{what} zero point dtype {zp.dtype.name} differs from {what} {v.dtype.name}")
    if zp.size == 1:
        return c.sub(f, c.reshape(c.cast(zp, np.float32), []))
    if axis_shape is None or zp.rank != 1 or zp.size != axis_len:
        raise ctx.unsupported(f"{what} zero point of shape {zp.shape} for {what} {v.shape}")
    return c.sub(f, c.reshape(c.cast(zp, np.float32), axis_shape))


def _scale(c: Composer, s, what: str, axis_len: int | None = None, axis_shape=None):
    ctx = c.ctx
    ctx.require_dtype(s, (np.float32, np.float16), f"{what} scale")
    if s.dtype == np.float16:
        s = c.cast(s, np.float32)
    if s.size == 1:
        return c.reshape(s, [])
    if axis_shape is None or s.rank != 1 or s.size != axis_len:
        raise ctx.unsupported(f"{what} scale of shape {s.shape}")
    return c.reshape(s, axis_shape)


def _int_sum(c: Composer, parts):
    """The int32 sum of exact float32 partial sums."""
    total = None
    for p in parts:
        q = c.cast(p, np.int32)
        total = q if total is None else c.add(total, q)
    return total


def _slice(c: Composer, v, axis: int, start: int, end: int, step: int = 1):
    return c.op("Slice", v, ints([start]), ints([end]), ints([axis]), ints([step]))


def _int_matmul(c: Composer, a, b):
    """int32 matmul of float32 integer-valued a (..., M, K) and b (..., K, N)."""
    k = a.shape[-1]
    if b.rank < 2 or b.shape[-2] != k:
        raise c.ctx.unsupported(f"operands {a.shape} and {b.shape} do not multiply")
    parts = []
    for lo in range(0, k, _EXACT):
        hi = min(k, lo + _EXACT)
        aa = a if (lo, hi) == (0, k) else _slice(c, a, a.rank - 1, lo, hi)
        bb = b if (lo, hi) == (0, k) else _slice(c, b, b.rank - 2, lo, hi)
        parts.append(c.op("MatMul", aa, bb))
    return _int_sum(c, parts)


def _requant(c: Composer, acc, multiplier, y_zp, out_dtype):
    """saturate(rint(float32(acc) * multiplier) + y_zp) as out_dtype."""
    r = c.op("Round", c.mul(c.cast(acc, np.float32), multiplier))
    if y_zp is not None:
        r = c.add(r, c.reshape(c.cast(y_zp, np.float32), []))
    info = np.iinfo(out_dtype)
    r = c.op("Clip", r, c.scalar(info.min, np.float32), c.scalar(info.max, np.float32))
    return c.cast(r, out_dtype)


def _multiplier(c: Composer, s1, s2, sy, half: bool):
    """s1 * s2 / sy; with float16 scales each operation rounded to float16, as the
    spec's arithmetic in the scales' type does (a float32 product of two float16 is exact)."""
    def f16(v):
        return c.cast(c.cast(v, np.float16), np.float32) if half else v
    return f16(c.div(f16(c.mul(s1, s2)), sy))


def _matmul_operands(c: Composer, a, a_zp, b, b_zp):
    if a.rank < 1 or b.rank < 1:
        raise c.ctx.unsupported(f"operands of shapes {a.shape} and {b.shape}")
    if a.rank < 2 or b.rank < 2:
        raise c.ctx.unsupported(f"1-D operands {a.shape}, {b.shape} (2-D and above only)")
    m, n = a.shape[-2], b.shape[-1]
    af = _shifted(c, a, a_zp, "A", m, [m, 1])
    bf = _shifted(c, b, b_zp, "B", n, [n])
    return af, bf, m, n


def lower_matmul_integer(ctx: LoweringContext) -> None:
    c = Composer(ctx)
    af, bf, _, _ = _matmul_operands(c, ctx.input(0), ctx.input(2), ctx.input(1), ctx.input(3))
    c.out(0, _int_matmul(c, af, bf))


def _scalar_const(v, dtype):
    """A per-tensor constant of dtype as a Python number; None when v is not one (absent: 0)."""
    if v is None:
        return 0
    if v.const is None or v.size != 1 or v.dtype != dtype:
        return None
    return v.const.reshape(()).item()


def _qmatmul_u8(ctx: LoweringContext, a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp) -> bool:
    """uint8 x uint8 -> uint8 with per-tensor constant parameters, B 2-D or with A's batch: one
    QMATMUL_U8 step (exact int32 sums, the requantisation below); False for anything else."""
    if a.dtype != np.uint8 or b.dtype != np.uint8 or a.rank < 2 or b.rank < 2 \
            or (b.rank > 2 and b.shape[:-2] != a.shape[:-2]) or a.shape[-1] != b.shape[-2] or a.shape[-1] > 33025:
        return False
    sa, sb, sy = (_scalar_const(v, np.float32) for v in (a_s, b_s, y_s))
    za, zb, zy = (_scalar_const(v, np.uint8) for v in (a_zp, b_zp, y_zp))
    if None in (sa, sb, sy, za, zb, zy):
        return False
    (m, k), n = a.shape[-2:], b.shape[-1]
    batch = int(np.prod(a.shape[:-2], dtype=np.int64))
    y = ctx.out(0, a.shape[:-1] + (n,), np.uint8)
    if y.size:
        ws = 4 * n * max(ctx.planner.nthreads, 1)
        mult = np.float32(np.float32(sa) * np.float32(sb)) / np.float32(sy)
        ctx.step(Op.QMATMUL_U8, [y, a, b, ctx.scratch(ws)],
                 QmatmulU8Step(batch=batch, m=m, n=n, k=k, a_zero=za, b_zero=zb, y_zero=zy,
                               b_stride=k * n if b.rank > 2 else 0, workspace_bytes=ws).words(), [float(mult)])
    return True


def lower_qlinear_matmul(ctx: LoweringContext) -> None:
    """QLinearMatMul: two uint8 run-time tensors (attention's products) in one QMATMUL_U8 step;
    otherwise composed (see the module's docstring). Both: exact int32 sums, then
    rint(float32(acc) * float32(s_a * s_b) / s_y) + z_y, saturated (onnxruntime's requantisation)."""
    c = Composer(ctx)
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = (ctx.input(i) for i in range(8))
    if _qmatmul_u8(ctx, a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp):
        return
    af, bf, m, n = _matmul_operands(c, a, a_zp, b, b_zp)
    out_dtype = y_zp.dtype if y_zp is not None else a.dtype
    ctx.require_dtype(y_zp if y_zp is not None else a, _INT8, "y zero point")
    multiplier = _multiplier(c, _scale(c, a_s, "a", m, [m, 1]), _scale(c, b_s, "b", n, [n]), _scale(c, y_s, "y"),
                             a_s.dtype == b_s.dtype == y_s.dtype == np.float16)
    c.out(0, _requant(c, _int_matmul(c, af, bf), multiplier, y_zp, out_dtype))


def lower_qgemm(ctx: LoweringContext) -> None:
    """com.microsoft QGemm: op(A) x op(B) (+ C, int32 at scale s_a * s_b) requantised to
    (y_scale, y_zero_point), or, without y_scale, float32 (acc + C) * s_a * s_b."""
    c = Composer(ctx)
    a, a_s, a_zp, b, b_s, b_zp, bias, y_s, y_zp = (ctx.input(i) for i in range(9))
    if ctx.attr("alpha", 1.0) != 1.0:
        raise ctx.unsupported(f"alpha={ctx.attr('alpha')} (only 1)")
    if a.rank != 2 or b.rank != 2:
        raise ctx.unsupported(f"operands of shapes {a.shape} and {b.shape} (2-D only)")
    if ctx.attr("transA", 0):
        a = c.transpose(a, [1, 0])
    if ctx.attr("transB", 0):
        b = c.transpose(b, [1, 0])
    af, bf, m, n = _matmul_operands(c, a, a_zp, b, b_zp)
    acc = _int_matmul(c, af, bf)
    if bias is not None:
        ctx.require_dtype(bias, (np.int32,), "C")
        acc = c.add(acc, bias)
    scale = c.mul(_scale(c, a_s, "a"), _scale(c, b_s, "b", n, [n]))
    if y_s is None:
        c.out(0, c.mul(c.cast(acc, np.float32), scale))
        return
    out_dtype = y_zp.dtype if y_zp is not None else a.dtype
    c.out(0, _requant(c, acc, c.div(scale, _scale(c, y_s, "y")), y_zp, out_dtype))


def _int_conv(c: Composer, xf, wf):
    """int32 convolution (NCHW, 2-D) of float32 integer-valued xf and wf, with the node's window attributes."""
    ctx = c.ctx
    if xf.rank != 4 or wf.rank != 4:
        raise ctx.unsupported(f"input of rank {xf.rank}: only 2-D integer convolution")
    n, ch, h, w = xf.shape
    kout, cg, r, s = wf.shape
    g = ctx.attr("group", 1)
    if ctx.attr("kernel_shape") is not None and list(ctx.attr("kernel_shape")) != [r, s]:
        raise ctx.unsupported(f"kernel_shape {ctx.attr('kernel_shape')} disagrees with weights {wf.shape}")
    if g < 1 or ch % g or kout % g or cg != ch // g:
        raise ctx.unsupported(f"weights {wf.shape} do not match {ch} input channels in {g} groups")
    if cg > _EXACT and g != 1:
        raise ctx.unsupported(f"{cg} input channels per group (at most {_EXACT} in a grouped integer convolution)")
    begin, end, strides, dil = _spatial(ctx, (h, w), (r, s))
    if any(p < 0 for p in begin + end) or min(strides + dil) < 1:
        raise ctx.unsupported(f"pads {begin + end}, strides {strides}, dilations {dil}")
    hp, wp = h + begin[0] + end[0], w + begin[1] + end[1]
    p = (hp - dil[0] * (r - 1) - 1) // strides[0] + 1
    q = (wp - dil[1] * (s - 1) - 1) // strides[1] + 1
    if p < 1 or q < 1:
        raise ctx.unsupported(f"window {r}x{s} larger than the padded input {hp}x{wp}")
    xp = xf if not any(begin + end) else c.op("Pad", xf, ints([0, 0, begin[0], begin[1], 0, 0, end[0], end[1]]))
    # Units of at most _EXACT products per output: (tap, channel range); grouped
    # greedily into float32 partial sums of at most _EXACT products.
    chunks = [(lo, min(cg, lo + _EXACT)) for lo in range(0, cg, _EXACT)]
    parts, acc, used = [], None, 0
    for i in range(r):
        for j in range(s):
            tap = c.op("Slice", xp, ints([i * dil[0], j * dil[1]]),
                       ints([i * dil[0] + (p - 1) * strides[0] + 1, j * dil[1] + (q - 1) * strides[1] + 1]),
                       ints([2, 3]), ints(strides))
            wt = c.op("Slice", wf, ints([i, j]), ints([i + 1, j + 1]), ints([2, 3]))
            for lo, hi in chunks:
                xt = tap if (lo, hi) == (0, cg) else _slice(c, tap, 1, lo, hi)
                wc = wt if (lo, hi) == (0, cg) else _slice(c, wt, 1, lo, hi)
                y = c.op("Conv", xt, wc, group=g)
                if acc is not None and used + (hi - lo) <= _EXACT:
                    acc, used = c.add(acc, y), used + (hi - lo)
                else:
                    if acc is not None:
                        parts.append(acc)
                    acc, used = y, hi - lo
    parts.append(acc)
    return _int_sum(c, parts)


def _conv_operands(c: Composer, x, x_zp, w, w_zp):
    ctx = c.ctx
    if x_zp is not None and x_zp.size != 1:
        raise ctx.unsupported(f"x zero point of shape {x_zp.shape} (per tensor only)")
    xf = _shifted(c, x, x_zp, "x")
    kout = w.shape[0] if w.rank else 0
    wf = _shifted(c, w, w_zp, "w", kout, [kout, 1, 1, 1])
    return xf, wf, kout


def lower_conv_integer(ctx: LoweringContext) -> None:
    c = Composer(ctx)
    xf, wf, _ = _conv_operands(c, ctx.input(0), ctx.input(2), ctx.input(1), ctx.input(3))
    c.out(0, _int_conv(c, xf, wf))


def lower_qlinear_conv(ctx: LoweringContext) -> None:
    c = Composer(ctx)
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, bias = (ctx.input(i) for i in range(9))
    xf, wf, kout = _conv_operands(c, x, x_zp, w, w_zp)
    acc = _int_conv(c, xf, wf)
    if bias is not None:
        ctx.require_dtype(bias, (np.int32,), "bias")
        if bias.shape != (kout,):
            raise ctx.unsupported(f"bias of shape {bias.shape}, expected ({kout},)")
        acc = c.add(acc, c.reshape(bias, [kout, 1, 1]))
    out_dtype = y_zp.dtype if y_zp is not None else x.dtype
    ctx.require_dtype(y_zp if y_zp is not None else x, _INT8, "y zero point")
    multiplier = _multiplier(c, _scale(c, x_s, "x"), _scale(c, w_s, "w", kout, [kout, 1, 1]), _scale(c, y_s, "y"),
                             x_s.dtype == w_s.dtype == y_s.dtype == np.float16)
    c.out(0, _requant(c, acc, multiplier, y_zp, out_dtype))


def _lower_qlinear_binary(ctx: LoweringContext, op: str) -> None:
    """com.microsoft QLinearAdd / QLinearMul. A uint8 QLinearAdd with constant scales and zero
    points whose broadcast QADD_U8 reads: one pass in onnxruntime's arithmetic (MLAS: ratios
    s_a / s_c and s_b / s_c in fused multiply-adds, one rounding; kernels/exec/qadd_u8.c),
    byte for byte; a uint8 QLinearMul likewise, in the float32 operations below (QADD_U8 form 2).
    Otherwise in float32:
    Add: rint((s_a * (a - z_a) + s_b * (b - z_b)) / s_c) + z_c (the DequantizeLinear -> Add ->
    QuantizeLinear it stands for); Mul: rint((a - z_a) * (b - z_b) * (s_a * s_b / s_c)) + z_c;
    saturated, one step from onnxruntime where the two roundings straddle a tie."""
    c = Composer(ctx)
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = (ctx.input(i) for i in range(8))
    for v, what in ((a, "A"), (b, "B")):
        ctx.require_dtype(v, _INT8, what)
    if b.dtype != a.dtype or (y_zp is not None and y_zp.dtype != a.dtype):
        raise ctx.unsupported(f"mixed integer types {a.dtype.name}, {b.dtype.name}")
    for s, z, what in ((a_s, a_zp, "A"), (b_s, b_zp, "B"), (y_s, y_zp, "C")):
        if s is None or s.size != 1 or (z is not None and z.size != 1):
            raise ctx.unsupported(f"{what} scale and zero point must be per-tensor scalars")
    if a.dtype == np.uint8:
        params = [(p.const, None if z is None else z.const) for p, z in ((a_s, a_zp), (b_s, b_zp), (y_s, y_zp))]
        if all(s.dtype == np.float32 and sc is not None and (z is None or zc is not None)
               for s, (sc, zc) in zip((a_s, b_s, y_s), params)):
            q = [(float(sc.reshape(())), 0 if zc is None else int(zc.reshape(()))) for sc, zc in params]
            y = ctx.out(0, tuple(np.broadcast_shapes(a.shape, b.shape)), np.uint8)
            if y.size == 0 or emit_qadd_u8(ctx, y, a, b, q[0], q[1], q[2], relu=0, form=1 if op == "Add" else 2):
                return
    sa, sb, sy = (_scale(c, s, w) for s, w in ((a_s, "A"), (b_s, "B"), (y_s, "C")))
    da, db = _shifted(c, a, a_zp, "A"), _shifted(c, b, b_zp, "B")
    zc = c.reshape(c.cast(y_zp, np.float32), []) if y_zp is not None else c.scalar(0, np.float32)
    if op == "Add":
        y = c.add(c.div(c.add(c.mul(da, sa), c.mul(db, sb)), sy), zc)
    else:
        y = c.add(c.mul(c.mul(da, db), c.div(c.mul(sa, sb), sy)), zc)
    info = np.iinfo(a.dtype)
    y = c.op("Clip", c.op("Round", y), c.scalar(info.min, np.float32), c.scalar(info.max, np.float32))
    c.out(0, c.cast(y, a.dtype))


def lower_qlinear_softmax(ctx: LoweringContext) -> None:
    """com.microsoft QLinearSoftmax. uint8 with constant scales: one QSOFTMAX_U8 pass, onnxruntime's
    arithmetic byte for byte (its 256-entry exp table, float32 row sums, floor(1 / y_scale); the
    operator has no definition but that implementation). Otherwise dequantise, Softmax along axis,
    quantise: the same values up to float32 rounding and that floor."""
    c = Composer(ctx)
    x, x_s, x_zp, y_s, y_zp = (ctx.input(i) for i in range(5))
    ctx.require_dtype(x, _INT8, "X")
    axis = ctx.attr("axis", -1)
    if ctx.attr("opset", 13) < 13 and axis % max(x.rank, 1) != x.rank - 1:
        raise ctx.unsupported(f"opset {ctx.attr('opset')} softmax (rows flattened from axis {axis}) off the last axis")
    for s, what in ((x_s, "X"), (y_s, "Y")):
        if s is None or s.size != 1:
            raise ctx.unsupported(f"{what} scale must be a per-tensor scalar")
    if x.dtype == np.uint8 and x.rank and axis % x.rank == x.rank - 1 and x_s.const is not None \
            and y_s.const is not None and x_s.dtype == y_s.dtype == np.float32 \
            and (y_zp is None or y_zp.const is not None):
        y = ctx.out(0, x.shape, np.uint8)
        if y.size:
            zy = 0 if y_zp is None else int(y_zp.const.reshape(()))
            emit_qsoftmax_u8(ctx, y, x, float(x_s.const.reshape(())), float(y_s.const.reshape(())), zy, x.shape[-1])
        return
    dx = c.op("DequantizeLinear", x, c.reshape(x_s, []), None if x_zp is None else c.reshape(x_zp, []))
    y = c.op("Softmax", dx, axis=axis)
    zp = c.reshape(y_zp, []) if y_zp is not None else c.scalar(0, x.dtype)
    c.out(0, c.op("QuantizeLinear", y, c.reshape(y_s, []), zp))


def lower_qlinear_add(ctx: LoweringContext) -> None:
    _lower_qlinear_binary(ctx, "Add")


def lower_qlinear_mul(ctx: LoweringContext) -> None:
    _lower_qlinear_binary(ctx, "Mul")


def lower_qlinear_global_average_pool(ctx: LoweringContext) -> None:
    """com.microsoft QLinearGlobalAveragePool (onnxruntime's quantiser writes it for a
    GlobalAveragePool between quantised tensors): onnxruntime's arithmetic (MLAS
    qlgavgpool): the window's integer sum, less x_zp * size, times float32
    x_scale / (y_scale * size), rounded half to even, plus y_zp, saturated. The sum is
    an exact integer in float32 while size * 255 < 2**24 (larger windows are refused,
    as onnxruntime refuses sizes >= 2**24)."""
    c = Composer(ctx)
    x, x_s, x_zp, y_s, y_zp = (ctx.input(i) for i in range(5))
    ctx.require_dtype(x, _INT8, "X")
    for s, z, what in ((x_s, x_zp, "X"), (y_s, y_zp, "Y")):
        if s is None or s.size != 1 or (z is not None and z.size != 1):
            raise ctx.unsupported(f"{what} scale and zero point must be per-tensor scalars")
    if x.rank < 3:
        raise ctx.unsupported(f"input of rank {x.rank}: expected [N, C, spatial...] (or channels last)")
    axes = list(range(1, x.rank - 1)) if ctx.attr("channels_last", 0) else list(range(2, x.rank))
    size = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    if size == 0 or size * 255 >= 1 << 24:
        raise ctx.unsupported(f"a window of {size} elements (1 to {((1 << 24) - 1) // 255} are exact)")
    acc = c.reduce("ReduceSum", c.cast(x, np.float32), axes)
    if x_zp is not None:
        acc = c.sub(acc, c.mul(c.reshape(c.cast(x_zp, np.float32), []), c.scalar(size, np.float32)))
    scale = c.div(_scale(c, x_s, "X"), c.mul(_scale(c, y_s, "Y"), c.scalar(size, np.float32)))
    c.out(0, _requant(c, acc, scale, y_zp, x.dtype))


_WINDOW = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}
RULES = {"QLinearConv": {10: lower_qlinear_conv}, "QLinearMatMul": {10: lower_qlinear_matmul},
         "ConvInteger": {10: lower_conv_integer}, "MatMulInteger": {10: lower_matmul_integer},
         "QLinearAdd": {1: lower_qlinear_add}, "QLinearMul": {1: lower_qlinear_mul}, "QGemm": {1: lower_qgemm},
         "QLinearSoftmax": {1: lower_qlinear_softmax},
         "QLinearGlobalAveragePool": {1: lower_qlinear_global_average_pool}}
ATTRS = {"QLinearConv": _WINDOW, "ConvInteger": _WINDOW, "QGemm": {"alpha", "transA", "transB"},
         "QLinearSoftmax": {"axis", "opset"}, "QLinearGlobalAveragePool": {"channels_last"}}
