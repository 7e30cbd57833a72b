"""Element-wise ops: unary math and activations, broadcasting binary ops,
comparisons and logic, Cast, Where, Clip, variadic Sum/Mean/Max/Min."""

from __future__ import annotations

import numpy as np

from engine.ir import NUMPY_TO_ONNX
from engine.ops.common import (ALL, FLOATS, INTS, NUMERIC, X_BINARY, X_CAST, X_UNARY, X_WHERE, broadcast_shape,
                               broadcast_strides, collapse)
from engine.plan import LoweringContext, Value

# name -> (aie unary code, default alpha, default beta, allowed dtypes)
UNARY = {
    "Relu": (1, None, None, NUMERIC), "Sigmoid": (2, None, None, FLOATS), "Tanh": (3, None, None, FLOATS),
    "Exp": (4, None, None, FLOATS), "Log": (5, None, None, FLOATS), "Sqrt": (6, None, None, FLOATS),
    "Reciprocal": (7, None, None, FLOATS), "Neg": (8, None, None, FLOATS + (np.int8, np.int16, np.int32, np.int64)),
    "Abs": (9, None, None, NUMERIC), "Erf": (10, None, None, FLOATS), "Ceil": (11, None, None, FLOATS),
    "Floor": (12, None, None, FLOATS), "Round": (13, None, None, FLOATS), "Sin": (14, None, None, FLOATS),
    "Cos": (15, None, None, FLOATS), "Tan": (16, None, None, FLOATS), "Asin": (17, None, None, FLOATS),
    "Acos": (18, None, None, FLOATS), "Atan": (19, None, None, FLOATS), "Sinh": (20, None, None, FLOATS),
    "Cosh": (21, None, None, FLOATS), "Asinh": (22, None, None, FLOATS), "Acosh": (23, None, None, FLOATS),
    "Atanh": (24, None, None, FLOATS), "Sign": (25, None, None, FLOATS + (np.int8, np.int16, np.int32, np.int64)),
    "Not": (26, None, None, (np.bool_,)),
    "LeakyRelu": (28, ("alpha", 0.01), None, FLOATS), "Elu": (29, ("alpha", 1.0), None, FLOATS),
    "Selu": (30, ("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875), FLOATS),
    "HardSigmoid": (31, ("alpha", 0.2), ("beta", 0.5), FLOATS), "HardSwish": (32, None, None, FLOATS),
    "Softplus": (33, None, None, FLOATS), "Softsign": (34, None, None, FLOATS),
    "Celu": (37, ("alpha", 1.0), None, FLOATS), "ThresholdedRelu": (38, ("alpha", 1.0), None, FLOATS),
    "Mish": (39, None, None, FLOATS),
}
U_CLIP, U_GELU, U_GELU_TANH = 27, 35, 36
U_ISNAN, U_ISINF_POS, U_ISINF_NEG, U_ISINF = 40, 41, 42, 43

# name -> (aie binary code, allowed dtypes, result is bool)
BINARY = {
    "Add": (0, NUMERIC, False), "Sub": (1, NUMERIC, False), "Mul": (2, NUMERIC, False), "Div": (3, NUMERIC, False),
    "Pow": (4, FLOATS + (np.int32, np.int64), False), "PRelu": (9, NUMERIC, False),
    "Equal": (10, NUMERIC + (np.bool_,), True), "Less": (11, NUMERIC, True), "LessOrEqual": (12, NUMERIC, True),
    "Greater": (13, NUMERIC, True), "GreaterOrEqual": (14, NUMERIC, True),
    "And": (15, (np.bool_,), True), "Or": (16, (np.bool_,), True), "Xor": (17, (np.bool_,), True),
    "BitwiseAnd": (18, INTS, False), "BitwiseOr": (19, INTS, False), "BitwiseXor": (20, INTS, False),
}
B_MAX, B_MIN, B_MOD, B_FMOD = 5, 6, 7, 8


def emit_unary(ctx: LoweringContext, out: Value, x: Value, code: int, alpha=0.0, beta=0.0) -> None:
    if out.size:
        ctx.step(X_UNARY, [out, x], [code, NUMPY_TO_ONNX[x.dtype], x.size], [alpha, beta])


def emit_binary(ctx: LoweringContext, out: Value, a: Value, b: Value, code: int) -> None:
    if out.size == 0:
        return
    shape, (sa, sb) = collapse(out.shape, broadcast_strides(a.shape, out.shape), broadcast_strides(b.shape, out.shape))
    ctx.step(X_BINARY, [out, a, b], [code, NUMPY_TO_ONNX[a.dtype], len(shape), *shape, *sa, *sb])


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
    emit_unary(ctx, ctx.out(0, x.shape, x.dtype), x, U_GELU if approx == "none" else U_GELU_TANH)


def lower_isnan(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, FLOATS)
    emit_unary(ctx, ctx.out(0, x.shape, np.bool_), x, U_ISNAN)


def lower_isinf(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, FLOATS)
    pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    code = U_ISINF if pos and neg else U_ISINF_POS if pos else U_ISINF_NEG if neg else None
    out = ctx.out(0, x.shape, np.bool_)
    if code is None:
        from engine.ops.data import emit_fill

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
    emit_unary(ctx, ctx.out(0, x.shape, x.dtype), x, U_CLIP, lo, hi)


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
    emit_binary(ctx, ctx.out(0, shape, a.dtype), a, b, B_FMOD if fmod else B_MOD)


def lower_variadic(ctx: LoweringContext) -> None:
    """Sum, Mean, Max, Min over any number of broadcasting inputs."""
    xs = [v for v in ctx.inputs if v is not None]
    for x in xs:
        ctx.require_dtype(x, NUMERIC if ctx.node.op in ("Max", "Min") else FLOATS + (np.int32, np.int64))
        if x.dtype != xs[0].dtype:
            raise ctx.unsupported("input dtypes differ")
    code = {"Sum": 0, "Mean": 0, "Max": B_MAX, "Min": B_MIN}[ctx.node.op]
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
        emit_binary(ctx, ctx.out(0, shape, acc.dtype), acc, n, 3)
    elif len(xs) == 1:
        from engine.ops.data import emit_copy

        emit_copy(ctx, ctx.out(0, shape, acc.dtype), acc, shape, broadcast_strides(acc.shape, shape))


def cast_value(ctx: LoweringContext, x: Value, dtype) -> Value:
    out = ctx.temp(x.shape, dtype)
    if x.size:
        ctx.step(X_CAST, [out, x], [NUMPY_TO_ONNX[np.dtype(dtype)], NUMPY_TO_ONNX[x.dtype], x.size])
    return out


def lower_cast(ctx: LoweringContext) -> None:
    from engine.ir import ONNX_TO_NUMPY

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
        ctx.step(X_CAST, [out, x], [to, NUMPY_TO_ONNX[x.dtype], x.size])


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
    ctx.step(X_WHERE, [out, c, x, y], [x.dtype.itemsize, len(cshape), *cshape, *strides[0], *strides[1], *strides[2]])


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
