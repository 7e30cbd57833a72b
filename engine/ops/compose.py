"""Lowering by composition: a rule builds its op out of other registered ops,
the way ONNX function bodies define RMSNormalization, Attention or the
losses. The parts are lowered by their own rules, so a composed op runs on
exactly the executor steps (and kernels) of the ops it is made of, and adds
no C of its own.

Parts are resolved at a fixed opset (COMPOSE_OPSET), not the model's, so a
composed rule always speaks one dialect: reduction axes and Split sizes as
inputs, Softmax over one axis.
"""

from __future__ import annotations

import numpy as np

from engine.ir import NUMPY_TO_ONNX, Node
from engine.lowering import LoweringContext, Value

# 18: the first opset where every Reduce* takes axes as an input.
COMPOSE_OPSET = 18


def const(array, dtype=None) -> Value:
    """A plan-time constant Value."""
    arr = np.array(array, dtype=dtype, order="C")  # a copy: 0-d stays 0-d
    return Value(arr.shape, arr.dtype, const=arr)


def ints(values) -> Value:
    return const(np.asarray(values, np.int64).reshape(-1))


class Composer:
    """Emits registered ops on behalf of the node `ctx` lowers."""

    def __init__(self, ctx: LoweringContext):
        self.ctx = ctx
        self._count = 0

    def op(self, op_type: str, *inputs: Value | None, n_out: int = 1, **attrs):
        """Lower one `op_type` node over `inputs`; its output Value (a list
        when n_out > 1). Inputs all known at plan time are folded."""
        self._count += 1
        base = f"{self.ctx.node.name}/{op_type}_{self._count}"
        node = Node(op_type, base, [f"{base}:in{i}" if v is not None else "" for i, v in enumerate(inputs)],
                    [f"{base}:out{i}" for i in range(n_out)], dict(attrs))
        planner = self.ctx.planner
        rule = planner.resolve(node, COMPOSE_OPSET)
        if planner.fold and all(v is None or v.const is not None for v in inputs):
            outs = planner.fold_node(node, list(inputs), COMPOSE_OPSET)
        else:
            sub = LoweringContext(planner, node, list(inputs))
            sub.opset = COMPOSE_OPSET
            rule(sub)
            outs = sub.outputs
        if any(o is None for o in outs):
            raise self.ctx.unsupported(f"internal: part {op_type} produced no output")
        return outs[0] if n_out == 1 else outs

    # -- shorthands for the parts used most --
    def add(self, a, b):
        return self.op("Add", a, b)

    def sub(self, a, b):
        return self.op("Sub", a, b)

    def mul(self, a, b):
        return self.op("Mul", a, b)

    def div(self, a, b):
        return self.op("Div", a, b)

    def scalar(self, value, dtype) -> Value:
        return const(np.asarray(value, dtype=dtype))

    def reduce(self, op_type: str, x: Value, axes, keepdims: int = 1) -> Value:
        return self.op(op_type, x, ints(axes), keepdims=keepdims)

    def reshape(self, x: Value, shape) -> Value:
        return self.op("Reshape", x, ints(shape))

    def transpose(self, x: Value, perm) -> Value:
        return self.op("Transpose", x, perm=list(perm))

    def cast(self, x: Value, dtype) -> Value:
        if x.dtype == np.dtype(dtype):
            return x
        return self.op("Cast", x, to=NUMPY_TO_ONNX[np.dtype(dtype)])

    def where(self, cond, x, y):
        return self.op("Where", cond, x, y)

    def out(self, i: int, value: Value) -> None:
        """Make `value` output i of the node being lowered."""
        self.ctx.set_out(i, value)


def wanted(ctx: LoweringContext, i: int) -> bool:
    """Whether the node's optional output i is consumed (named)."""
    return i < len(ctx.node.outputs) and bool(ctx.node.outputs[i])
