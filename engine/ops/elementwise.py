"""Element-wise ops: unary math and activations, broadcasting binary ops,
comparisons and logic, Cast, Where, Clip, variadic Sum/Mean/Max/Min."""

from __future__ import annotations

import numpy as np

from engine.ir import NUMPY_TO_ONNX, ONNX_TO_NUMPY
from engine.kernels.abi import Binary, BinaryStep, CastStep, Op, Unary, UnaryStep, WhereStep
from engine.lowering import LoweringContext, Value
from engine.ops.common import ALL, FLOATS, INTS, NUMERIC, broadcast_shape, broadcast_strides, collapse
from engine.ops.data import emit_copy, emit_fill

_SIGNED = (np.int8, np.int16, np.int32, np.int64)
# name -> (unary op, default alpha, default beta, allowed dtypes)
UNARY = {
    "Relu": (Unary.RELU, None, None, NUMERIC), "Sigmoid": (Unary.SIGMOID, None, None, FLOATS),
    "Tanh": (Unary.TANH, None, None, FLOATS), "Exp": (Unary.EXP, None, None, FLOATS),
    "Log": (Unary.LOG, None, None, FLOATS), "Sqrt": (Unary.SQRT, None, None, FLOATS),
    "Reciprocal": (Unary.RECIPROCAL, None, None, FLOATS), "Neg": (Unary.NEG, None, None, FLOATS + _SIGNED),
    "Abs": (Unary.ABS, None, None, NUMERIC), "Erf": (Unary.ERF, None, None, FLOATS),
    "Ceil": (Unary.CEIL, None, None, FLOATS), "Floor": (Unary.FLOOR, None, None, FLOATS),
    "Round": (Unary.ROUND, None, None, FLOATS), "Sin": (Unary.SIN, None, None, FLOATS),
    "Cos": (Unary.COS, None, None, FLOATS), "Tan": (Unary.TAN, None, None, FLOATS),
    "Asin": (Unary.ASIN, None, None, FLOATS), "Acos": (Unary.ACOS, None, None, FLOATS),
    "Atan": (Unary.ATAN, None, None, FLOATS), "Sinh": (Unary.SINH, None, None, FLOATS),
    "Cosh": (Unary.COSH, None, None, FLOATS), "Asinh": (Unary.ASINH, None, None, FLOATS),
    "Acosh": (Unary.ACOSH, None, None, FLOATS), "Atanh": (Unary.ATANH, None, None, FLOATS),
    "Sign": (Unary.SIGN, None, None, FLOATS + _SIGNED), "Not": (Unary.NOT, None, None, (np.bool_,)),
    "LeakyRelu": (Unary.LEAKY_RELU, ("alpha", 0.01), None, FLOATS), "Elu": (Unary.ELU, ("alpha", 1.0), None, FLOATS),
    "Selu": (Unary.SELU, ("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875), FLOATS),
    "HardSigmoid": (Unary.HARDSIGMOID, ("alpha", 0.2), ("beta", 0.5), FLOATS),
    "HardSwish": (Unary.HARDSWISH, None, None, FLOATS), "Softplus": (Unary.SOFTPLUS, None, None, FLOATS),
    "Softsign": (Unary.SOFTSIGN, None, None, FLOATS), "Celu": (Unary.CELU, ("alpha", 1.0), None, FLOATS),
    "ThresholdedRelu": (Unary.THRESHOLDED_RELU, ("alpha", 1.0), None, FLOATS),
    "Mish": (Unary.MISH, None, None, FLOATS),
}

# name -> (binary op, allowed dtypes, result is bool)
BINARY = {
    "Add": (Binary.ADD, NUMERIC, False), "Sub": (Binary.SUB, NUMERIC, False), "Mul": (Binary.MUL, NUMERIC, False),
    "Div": (Binary.DIV, NUMERIC, False), "Pow": (Binary.POW, FLOATS + (np.int32, np.int64), False),
    "PRelu": (Binary.PRELU, NUMERIC, False),
    "Equal": (Binary.EQUAL, NUMERIC + (np.bool_,), True), "Less": (Binary.LESS, NUMERIC, True),
    "LessOrEqual": (Binary.LESS_EQUAL, NUMERIC, True), "Greater": (Binary.GREATER, NUMERIC, True),
    "GreaterOrEqual": (Binary.GREATER_EQUAL, NUMERIC, True),
    "And": (Binary.AND, (np.bool_,), True), "Or": (Binary.OR, (np.bool_,), True),
    "Xor": (Binary.XOR, (np.bool_,), True),
    "BitwiseAnd": (Binary.BITAND, INTS, False), "BitwiseOr": (Binary.BITOR, INTS, False),
    "BitwiseXor": (Binary.BITXOR, INTS, False),
}


def emit_unary(ctx: LoweringContext, out: Value, x: Value, code: int, alpha=0.0, beta=0.0) -> None:
    if out.size:
        ctx.step(Op.UNARY, [out, x], UnaryStep(op=code, dtype=NUMPY_TO_ONNX[x.dtype], n=x.size).words(), [alpha, beta])


def emit_binary(ctx: LoweringContext, out: Value, a: Value, b: Value, code: int) -> None:
    if out.size == 0:
        return
    shape, (sa, sb) = collapse(out.shape, broadcast_strides(a.shape, out.shape), broadcast_strides(b.shape, out.shape))
    params = BinaryStep(op=code, dtype=NUMPY_TO_ONNX[a.dtype], rank=len(shape))
    ctx.step(Op.BINARY, [out, a, b], params.words(shape, sa, sb))


def lower_unary(ctx: LoweringContext) -> None:
    code, a_spec, b_spec, allowed = UNARY[ctx.node.op]
    x = ctx.input(0)
    ctx.require_dtype(x, allowed)
    alpha = ctx.attr(a_spec[0], a_spec[1]) if a_spec else 0.0
    beta = ctx.attr(b_spec[0], b_spec[1]) if b_spec else 0.0
    emit_unary(ctx, ctx.out(0, x.shape, x.dtype), x, code, alpha, beta)


def lower_gelu(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, FLOATS)
    approx = ctx.attr("approximate", "none")
    if approx not in ("none", "tanh"):
        raise ctx.unsupported(f"approximate={approx!r}")
    emit_unary(ctx, ctx.out(0, x.shape, x.dtype), x, Unary.GELU if approx == "none" else Unary.GELU_TANH)


def lower_isnan(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, FLOATS)
    emit_unary(ctx, ctx.out(0, x.shape, np.bool_), x, Unary.ISNAN)


def lower_isinf(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, FLOATS)
    pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    code = Unary.ISINF if pos and neg else Unary.ISINF_POS if pos else Unary.ISINF_NEG if neg else None
    out = ctx.out(0, x.shape, np.bool_)
    if code is None:
        emit_fill(ctx, out, False)
    else:
        emit_unary(ctx, out, x, code)


def lower_clip(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, NUMERIC)
    if ctx.opset < 11:
        lo, hi = ctx.attr("min", -np.inf), ctx.attr("max", np.inf)
    else:
        lo_v, hi_v = ctx.const(1, "min"), ctx.const(2, "max")
        info = np.finfo(x.dtype) if x.dtype.kind == "f" else np.iinfo(x.dtype)
        lo = float(lo_v.reshape(-1)[0]) if lo_v is not None and lo_v.size else float(info.min)
        hi = float(hi_v.reshape(-1)[0]) if hi_v is not None and hi_v.size else float(info.max)
        if x.dtype.kind == "f":
            lo = lo if lo_v is not None and lo_v.size else -np.inf
            hi = hi if hi_v is not None and hi_v.size else np.inf
    emit_unary(ctx, ctx.out(0, x.shape, x.dtype), x, Unary.CLIP, lo, hi)


def _binary_inputs(ctx, allowed):
    a, b = ctx.input(0), ctx.input(1)
    ctx.require_dtype(a, allowed)
    if a.dtype != b.dtype:
        if ctx.node.op == "Pow" and b.const is not None:
            b = Value(b.shape, a.dtype, const=b.const.astype(a.dtype))
        elif ctx.node.op == "Pow":
            b = cast_value(ctx, b, a.dtype)
        else:
            raise ctx.unsupported(f"input dtypes differ: {a.dtype.name} and {b.dtype.name}")
    try:
        shape = broadcast_shape(a.shape, b.shape)
    except ValueError as exc:
        raise ctx.unsupported(str(exc)) from None
    return a, b, shape


def lower_binary(ctx: LoweringContext) -> None:
    code, allowed, is_bool = BINARY[ctx.node.op]
    a, b, shape = _binary_inputs(ctx, allowed)
    if ctx.node.op == "Pow" and b.const is not None and b.size == 1 and float(b.const.reshape(-1)[0]) == 1.0:
        ctx.set_out(0, a)
        return
    emit_binary(ctx, ctx.out(0, shape, np.bool_ if is_bool else a.dtype), a, b, code)


def lower_not_equal_family(ctx: LoweringContext) -> None:
    lower_binary(ctx)


def lower_mod(ctx: LoweringContext) -> None:
    a, b, shape = _binary_inputs(ctx, NUMERIC)
    fmod = ctx.attr("fmod", 0)
    if a.dtype.kind == "f" and not fmod:
        raise ctx.unsupported("fmod=0 on floating-point inputs (ONNX requires fmod=1)")
    emit_binary(ctx, ctx.out(0, shape, a.dtype), a, b, Binary.FMOD if fmod else Binary.MOD)


def lower_variadic(ctx: LoweringContext) -> None:
    """Sum, Mean, Max, Min over any number of broadcasting inputs."""
    xs = [v for v in ctx.inputs if v is not None]
    for x in xs:
        ctx.require_dtype(x, NUMERIC if ctx.node.op in ("Max", "Min") else FLOATS + (np.int32, np.int64))
        if x.dtype != xs[0].dtype:
            raise ctx.unsupported("input dtypes differ")
    code = {"Sum": Binary.ADD, "Mean": Binary.ADD, "Max": Binary.MAX, "Min": Binary.MIN}[ctx.node.op]
    shape = broadcast_shape(*[x.shape for x in xs])
    if len(xs) == 1:
        acc = xs[0]
    else:
        acc = xs[0]
        for i, x in enumerate(xs[1:]):
            part = broadcast_shape(acc.shape, x.shape)
            nxt = ctx.out(0, part, acc.dtype) if i == len(xs) - 2 and ctx.node.op != "Mean" else ctx.temp(part, acc.dtype)
            emit_binary(ctx, nxt, acc, x, code)
            acc = nxt
    if ctx.node.op == "Mean":
        n = Value((), acc.dtype, const=np.array(len(xs), acc.dtype))
        emit_binary(ctx, ctx.out(0, shape, acc.dtype), acc, n, Binary.DIV)
    elif len(xs) == 1:
        emit_copy(ctx, ctx.out(0, shape, acc.dtype), acc, shape, broadcast_strides(acc.shape, shape))


def cast_value(ctx: LoweringContext, x: Value, dtype) -> Value:
    out = ctx.temp(x.shape, dtype)
    if x.size:
        ctx.step(Op.CAST, [out, x], CastStep(to_dtype=NUMPY_TO_ONNX[np.dtype(dtype)], from_dtype=NUMPY_TO_ONNX[x.dtype],
                                              n=x.size).words())
    return out


def lower_cast(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    to = ctx.attr("to")
    if to not in ONNX_TO_NUMPY:
        raise ctx.unsupported(f"cast to element type {to} (supported: {sorted(ONNX_TO_NUMPY)})")
    ctx.require_dtype(x, ALL)
    if ctx.attr("saturate", 1) != 1 and False:
        raise ctx.unsupported("saturate")
    dtype = ONNX_TO_NUMPY[to]
    if dtype == x.dtype:
        ctx.alias(0, x, x.shape)
        return
    out = ctx.out(0, x.shape, dtype)
    if x.size:
        ctx.step(Op.CAST, [out, x], CastStep(to_dtype=to, from_dtype=NUMPY_TO_ONNX[x.dtype], n=x.size).words())


def lower_cast_like(ctx: LoweringContext) -> None:
    ctx.node.attrs["to"] = NUMPY_TO_ONNX[ctx.input(1).dtype]
    try:
        lower_cast(ctx)
    finally:
        ctx.node.attrs.pop("to")


def lower_where(ctx: LoweringContext) -> None:
    c, x, y = ctx.input(0), ctx.input(1), ctx.input(2)
    ctx.require_dtype(c, (np.bool_,), "condition")
    if x.dtype != y.dtype:
        raise ctx.unsupported(f"X and Y dtypes differ: {x.dtype.name} and {y.dtype.name}")
    try:
        shape = broadcast_shape(c.shape, x.shape, y.shape)
    except ValueError as exc:
        raise ctx.unsupported(str(exc)) from None
    out = ctx.out(0, shape, x.dtype)
    if out.size == 0:
        return
    cshape, strides = collapse(shape, *(broadcast_strides(v.shape, shape) for v in (c, x, y)))
    ctx.step(Op.WHERE, [out, c, x, y], WhereStep(esize=x.dtype.itemsize, rank=len(cshape)).words(cshape, *strides))


RULES = {name: {1: lower_unary} for name in UNARY}
RULES.update({name: {1: lower_binary} for name in BINARY})
RULES.update({
    "Gelu": {20: lower_gelu}, "IsNaN": {9: lower_isnan}, "IsInf": {10: lower_isinf},
    "Clip": {6: lower_clip, 11: lower_clip}, "Mod": {10: lower_mod},
    "Sum": {1: lower_variadic}, "Mean": {1: lower_variadic}, "Max": {1: lower_variadic}, "Min": {1: lower_variadic},
    "Cast": {1: lower_cast}, "CastLike": {15: lower_cast_like}, "Where": {9: lower_where},
})
ATTRS = {name: {spec[0] for spec in (a, b) if spec} for name, (_, a, b, _) in UNARY.items()}
ATTRS.update({"Gelu": {"approximate"}, "IsInf": {"detect_positive", "detect_negative"}, "Clip": {"min", "max"},
              "Mod": {"fmod"}, "Cast": {"to", "saturate"}, "CastLike": {"saturate"}})
