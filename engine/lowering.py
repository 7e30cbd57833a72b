"""What a lowering rule (engine.ops) works with: Values (a tensor during
planning: concrete shape and dtype, where it lives and/or its plan-time
value), the Steps it emits, and the LoweringContext that hands it its node,
inputs and the emitter. The planner that drives the rules (engine.plan)
sits above both: it resolves rules from the registry and folds constants
through the executor, which the rules reach through ctx.planner."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import ConversionError, UnsupportedOperatorError
from engine.ir import Graph, Node
from engine.kernels.abi import Loc

ALIGN = 64  # bytes: one cache line, and the alignment every kernel assumes

LOC_NONE, LOC_ARENA, LOC_BLOB, LOC_INPUT, LOC_OUTPUT = Loc.NONE, Loc.ARENA, Loc.BLOB, Loc.INPUT, Loc.OUTPUT
BLOB_WEIGHTS, BLOB_PLAN = 0, 1  # the two blobs a run gets: the model's weights, the plan's constants


class NeedsValue(Exception):
    """A lowering needs the value of a graph input (e.g. a Reshape target)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class RuntimeValueNeeded(UnsupportedOperatorError):
    """A lowering needs the value of a tensor computed at run time (TopK's K
    from a Shape/ReduceMax chain over data, a Reshape target computed from
    data). The top-level planner catches it and ends the plan's segment
    before the node (engine.plan_segments); elsewhere it is unsupported."""


class BoundedOutputs:
    """A data-dependent node's outputs (NonZero, Unique, NMS, ...): Values
    sized for the most the input allows, the int64 [1] count the step
    writes, and shape_of(count) -> the concrete shape of each output, whose
    elements the kernel wrote packed at the start of its Value. capacity:
    None when the Values hold the most the input allows; else the count they
    have room for (a Loop's scan outputs): a run that counts more is planned
    again with more room and run again (engine.plan_segments), the room
    kept per node under `key` (Planner.capacities). trip: where the count's
    upper bound is read before the run, when the segment receives it as an
    input (a Loop's run-time trip count): (input index, byte offset) of an
    int64; a run then gets the room it needs before it starts."""

    __slots__ = ("values", "count", "shape_of", "capacity", "key", "trip")

    def __init__(self, values: list, count, shape_of, capacity: int | None = None, key: tuple = (),
                 trip: tuple | None = None):
        self.values, self.count, self.shape_of = values, count, shape_of
        self.capacity, self.key, self.trip = capacity, key, trip


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Buffer:
    """A region a Value lives in. Arena buffers get an offset at the end."""

    __slots__ = ("kind", "index", "nbytes", "first", "last", "offset")

    def __init__(self, kind: int, nbytes: int, index: int = 0, offset: int = 0):
        self.kind, self.index, self.nbytes, self.offset = kind, index, nbytes, offset
        self.first = self.last = -1


class Value:
    """A tensor during planning: concrete shape, dtype, and where it lives
    (buf + byte offset) and/or its value when known at plan time."""

    __slots__ = ("shape", "dtype", "const", "buf", "offset", "origin")

    def __init__(self, shape, dtype, const=None, buf=None, offset=0, origin=None):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.const = const
        self.buf = buf
        self.offset = offset
        self.origin = origin  # graph-input name when the value is that input
        if const is not None and tuple(const.shape) != self.shape:
            raise ConversionError(f"internal: constant of shape {const.shape} for a value of shape {self.shape}")

    @property
    def size(self) -> int:
        return math.prod(self.shape)  # not np.prod: called ~1,000 times per plan build

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Value({self.shape}, {self.dtype}, const={self.const is not None})"


@dataclass
class Step:
    op: int
    tensors: list[Value | None]
    ints: list[int]
    floats: list[float]


class LoweringContext:
    """What a lowering rule sees: its node, inputs and the step emitter."""

    def __init__(self, planner, node: Node, inputs: list[Value | None]):
        self.planner = planner
        self.node = node
        self.inputs = inputs
        self.opset = planner.opset
        self.outputs: list[Value | None] = [None] * len(node.outputs)

    # -- inputs and attributes --
    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def attr(self, name: str, default: Any = None) -> Any:
        return self.node.attrs.get(name, default)

    def const(self, i: int, what: str = "") -> np.ndarray | None:
        """Value of input i, which must be known at plan time."""
        v = self.input(i)
        if v is None:
            return None
        if v.const is not None:
            return v.const
        if v.origin is not None:
            raise NeedsValue(v.origin)
        raise RuntimeValueNeeded(
            f"{self.node.op} (node {self.node.name!r}, opset {self.opset}): input {i} "
            f"({what or self.node.inputs[i]}) is computed at run time; it must be a constant or derived from shapes")

    def unsupported(self, message: str) -> UnsupportedOperatorError:
        """The rule cannot lower this node (its shapes, dtypes or attributes):
        the op, node and opset and what is wrong; Planner.lower_nodes adds
        the node's input shapes and the model input shapes that led there."""
        domain = f"domain {self.node.domain}, " if self.node.domain not in ("", "ai.onnx") else ""
        return UnsupportedOperatorError(f"{self.node.op} (node {self.node.name!r}, {domain}opset {self.opset}): {message}")

    def require_dtype(self, v: Value, allowed: tuple, what: str = "input") -> None:
        if v.dtype not in [np.dtype(a) for a in allowed]:
            names = ", ".join(np.dtype(a).name for a in allowed)
            raise self.unsupported(f"{what} dtype {v.dtype.name} not supported (supported: {names})")

    # -- outputs --
    def out(self, i: int, shape, dtype) -> Value:
        v = self.planner.new_value(shape, dtype)
        self.outputs[i] = v
        return v

    def bounded(self, values: list, count: Value, shape_of, capacity: int | None = None,
                trip: tuple | None = None) -> None:
        """Outputs whose shapes depend on values (see BoundedOutputs): the
        planner ends its segment after this node and plans what follows
        once the count is known."""
        if self.planner.owners:
            raise self.nested("an output shape that only a run tells")
        self.planner.bounded = BoundedOutputs(values, count, shape_of, capacity, self.capacity_key(), trip)
        self.outputs = list(values)

    def capacity_key(self) -> tuple:
        """Names this node's learned capacity (output names are unique in a graph)."""
        return tuple(self.node.outputs)

    def set_out(self, i: int, value: Value) -> None:
        self.outputs[i] = value

    def const_out(self, i: int, array) -> None:
        self.outputs[i] = Value(np.shape(array), np.asarray(array).dtype, const=np.asarray(array, order="C"))

    def alias(self, i: int, src: Value, shape) -> Value:
        """Output i is src's memory with another shape (Reshape and friends)."""
        shape = tuple(int(d) for d in shape)
        if src.const is not None and src.buf is None:
            v = Value(shape, src.dtype, const=src.const.reshape(shape))
        else:
            v = Value(shape, src.dtype, buf=src.buf, offset=src.offset, origin=None)
            if src.const is not None:
                v.const = src.const.reshape(shape)
        self.outputs[i] = v
        return v

    def scratch(self, nbytes: int) -> Value | None:
        if nbytes <= 0:
            return None
        return self.planner.new_value((nbytes,), np.uint8)

    def temp(self, shape, dtype) -> Value:
        return self.planner.new_value(shape, dtype)

    def step(self, op: int, tensors: list, ints=(), floats=()) -> None:
        self.planner.emit(Step(op, list(tensors), [int(i) for i in ints], [float(f) for f in floats]))

    def lower_subgraph(self, graph: Graph) -> list[Value]:
        owners = self.planner.owners
        owners.append(self.node)
        try:
            return self.planner.lower_subgraph(graph)
        finally:
            owners.pop()

    def nested(self, what: str) -> UnsupportedOperatorError:
        """The refusal of a node whose output shapes only a run tells inside
        a subgraph: only the graph's top level can cut the plan after it (a
        run-time-length Loop, an If whose branches differ in shape). Names
        this node and the If/Loop/Scan nodes whose bodies hold it, and marks
        the top-level node for running on the host (Planner.lower_segment)."""
        self.planner.nested_refused = True
        chain = " inside ".join(f"{n.op} (node {n.name!r})" for n in reversed(self.planner.owners))
        return self.unsupported(f"{what}, inside a subgraph of {chain}: only the graph's top level can plan what "
                                "follows for the shapes a run produces")
