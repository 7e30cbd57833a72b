"""Static execution plans: lowering a Graph for concrete input shapes into
the flat step list the C executor runs (kernels/include/aie_exec.h).

Planning walks the nodes in order. Each node's lowering rule (engine.ops)
sees its inputs as Values: a concrete shape and dtype, plus the array when
the value is known at plan time. Nodes whose inputs are all known are
evaluated right away (constant folding, including Shape-derived arithmetic,
which is constant per concrete shape) by running the node itself through the
executor, so folding and inference share one implementation. Everything else
becomes steps. Finally every arena tensor gets an offset in one block,
reusing memory between tensors whose lifetimes (first to last step touching
them) do not overlap.
"""

from __future__ import annotations

import numpy as np

from engine.errors import ConversionError, UnsupportedOperatorError
from engine.ir import NUMPY_TO_ONNX, Graph, Node
from engine.kernels.abi import ExecPlan as _CPlan  # noqa: F401  (engine.server.runner)
# What lowering rules see lives below the rules (engine.lowering); packing
# and running a plan have modules of their own (engine.plan_pack,
# engine.plan_run). The names stay importable from here for the planner's
# callers.
from engine.lowering import (ALIGN, BLOB_PLAN, BLOB_WEIGHTS, LOC_ARENA, LOC_BLOB, LOC_INPUT,  # noqa: F401
                             LOC_NONE, LOC_OUTPUT, BoundedOutputs, Buffer, LoweringContext, NeedsValue,
                             RuntimeValueNeeded, Step, Value, align)
from engine.ops import resolve, supported_ops
from engine.ops.data import emit_copy
from engine.plan_copies import fold_binary_into_copy, fold_copy_chains
from engine.plan_pack import (PARALLEL_MIN_BYTES, PARALLEL_MIN_FLOPS, assign_offsets, pack_plan,  # noqa: F401
                              step_threads, step_work)
from engine.plan_run import BoundRun, ExecPlan, PlanCache  # noqa: F401


# Control-flow nodes a segmented plan can run on the host, a subgraph at a
# time, when their subgraphs cannot be planned inline (engine.plan_segments).
HOST_RUN_OPS = frozenset({"If", "Loop"})


class RunsOnHost(Exception):
    """The node a segment would start with runs on the host (HOST_RUN_OPS);
    `error` is why it could not be planned inline."""

    def __init__(self, error: UnsupportedOperatorError):
        super().__init__(error.message)
        self.error = error


class Planner:
    """Lowers nodes for concrete shapes into steps and assigns arena offsets."""

    def __init__(self, opset: int, *, fold: bool = True, nthreads: int = 1, capacities: dict | None = None):
        self.opset = opset
        self.fold = fold
        self.nthreads = nthreads
        self.steps: list[Step] = []
        self.env: list[dict[str, Value]] = [{}]
        self.plan_consts: list[tuple[Buffer, np.ndarray]] = []
        self.model_inputs: dict[str, tuple] = {}  # the shapes planned for, named in lowering errors
        # set by a data-dependent node's rule (LoweringContext.bounded)
        self.bounded: BoundedOutputs | None = None
        # room a bounded node's outputs get, by LoweringContext.capacity_key,
        # as runs have taught it (engine.plan_segments)
        self.capacities: dict[tuple, int] = capacities or {}
        # the If/Loop/Scan nodes whose subgraphs are being lowered, outermost first
        self.owners: list[Node] = []
        # set by LoweringContext.nested: the node being lowered holds run-time shapes in a subgraph
        self.nested_refused = False

    # -- what lowering rules reach through ctx.planner --
    def supported_ops(self) -> list[str]:
        return supported_ops()

    def resolve(self, node: Node, opset: int):
        return resolve(node, opset)

    def fold_node(self, node: Node, inputs: list[Value | None], opset: int) -> list[Value | None]:
        return fold_node(node, inputs, opset)

    # -- values --
    def new_value(self, shape, dtype) -> Value:
        v = Value(shape, dtype)
        v.buf = Buffer(LOC_ARENA, align(max(v.nbytes, 1)))
        return v

    def lookup(self, name: str) -> Value:
        for scope in reversed(self.env):
            if name in scope:
                return scope[name]
        raise ConversionError(f"value {name!r} is used before it is defined")

    def define(self, name: str, value: Value) -> None:
        self.env[-1][name] = value

    def materialize(self, v: Value) -> Value:
        """Give a plan-time constant a place in the plan's constant blob."""
        if v.buf is None:
            data = np.asarray(v.const, order="C")
            buf = Buffer(LOC_BLOB, align(max(data.nbytes, 1)), index=BLOB_PLAN)
            self.plan_consts.append((buf, data))
            v.buf = buf
        return v

    def emit(self, step: Step) -> None:
        idx = len(self.steps)
        for i, t in enumerate(step.tensors):
            if t is None:
                continue
            self.materialize(t)
            b = t.buf
            b.first = idx if b.first < 0 else min(b.first, idx)
            b.last = max(b.last, idx)
        self.steps.append(step)

    # -- lowering --
    def lower_nodes(self, nodes: list[Node]) -> None:
        for node in nodes:
            self.lower_node(node)
            if self.bounded is not None:
                raise UnsupportedOperatorError(f"{node.op} (node {node.name!r}): a data-dependent output shape "
                                               "where the plan cannot be split")

    def lower_node(self, node: Node) -> None:
        inputs = [self.lookup(n) if n else None for n in node.inputs]
        rule = resolve(node, self.opset)
        try:
            if self.fold and node.op not in NO_FOLD and all(v is None or v.const is not None for v in inputs) \
                    and not any(isinstance(a, Graph) for a in node.attrs.values()):
                outs = fold_node(node, inputs, self.opset)
            else:
                ctx = LoweringContext(self, node, inputs)
                rule(ctx)
                outs = ctx.outputs
                if self.bounded is not None:
                    return  # its outputs are defined once the count is known
        except RuntimeValueNeeded:
            raise  # not an error: lower_segment cuts the plan before this node
        except ConversionError as exc:
            raise self._with_shapes(exc, node, inputs) from None
        for name, value in zip(node.outputs, outs):
            if name:
                if value is None:
                    raise UnsupportedOperatorError(
                        f"{node.op} (node {node.name!r}): optional output {name!r} is not supported")
                self.define(name, value)

    def lower_segment(self, nodes: list[Node], start: int) -> int:
        """Lower nodes[start:] until one needs what only a run can tell:
        returns the index of the first node not in this segment. The segment
        ends after a data-dependent node (self.bounded is set) or before a
        node that needs a computed tensor's value (engine.plan_segments)."""
        for i in range(start, len(nodes)):
            mark = len(self.steps)
            self.nested_refused = False
            try:
                self.lower_node(nodes[i])
            except RuntimeValueNeeded:
                if i == start:
                    raise
                del self.steps[mark:]  # whatever the rule emitted before it asked
                return i
            except UnsupportedOperatorError as exc:
                # an If/Loop whose subgraph holds shapes only a run tells: it
                # runs on the host, as a segment of its own (engine.plan_segments)
                if not (self.nested_refused and nodes[i].op in HOST_RUN_OPS):
                    raise
                if i == start:
                    raise RunsOnHost(exc) from None
                del self.steps[mark:]
                return i
            if self.bounded is not None:
                return i + 1
        return len(nodes)

    def _with_shapes(self, exc: ConversionError, node: Node, inputs: list) -> ConversionError:
        """exc with the node's input shapes and the model input shapes this
        plan is for: a shape error then says which input size led there
        (said once, by the innermost node: subgraphs lower through here too)."""
        if getattr(exc, "shapes_said", False):
            return exc
        ins = ", ".join(f"{name} {list(v.shape)}" for name, v in zip(node.inputs, inputs) if v is not None)
        text = exc.message + (f"; node inputs {ins}" if ins else "")
        if self.model_inputs:
            text += "; model inputs " + ", ".join(f"{k} {list(v)}" for k, v in self.model_inputs.items())
        new = type(exc)(text, where=exc.where, hint=exc.hint)
        new.shapes_said = True
        return new

    def lower_subgraph(self, graph: Graph) -> list[Value]:
        self.env.append({})
        try:
            for name, arr in graph.initializers.items():
                self.define(name, Value(arr.shape, arr.dtype, const=arr))
            self.lower_nodes(graph.nodes)
            return [self.lookup(t.name) for t in graph.outputs]
        finally:
            self.env.pop()

    def finish(self, outputs: list[Value]) -> "ExecPlan":
        """Bind graph outputs to output buffers, assign arena offsets, pack."""
        out_specs = []
        bound: set[int] = set()
        for k, v in enumerate(outputs):
            if v.const is not None and v.buf is None:
                out_specs.append((v.shape, v.dtype, np.array(v.const)))
                continue
            out_specs.append((v.shape, v.dtype, None))
            b = v.buf
            # The producing steps write straight into the caller's output when
            # the output is a whole arena buffer nobody else claimed.
            if b.kind == LOC_ARENA and v.offset == 0 and id(b) not in bound and v.nbytes > 0:
                bound.add(id(b))
                b.kind, b.index, b.offset = LOC_OUTPUT, k, 0
                continue
            dst = Value(v.shape, v.dtype, buf=Buffer(LOC_OUTPUT, v.nbytes, index=k))
            if v.size:
                emit_copy(self, dst, v)
        self.steps = fold_binary_into_copy(fold_copy_chains(self.steps))
        return pack_plan(self, out_specs)


NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


def fold_node(node: Node, inputs: list[Value | None], opset: int) -> list[Value | None]:
    """Evaluate a node whose inputs are all known, with the executor itself."""
    # Fresh const-only values: the folded plan carries its own copies of the
    # inputs instead of pointing into the model's weights blob.
    inputs = [None if v is None else Value(v.shape, v.dtype, const=v.const) for v in inputs]
    sub = Planner(opset, fold=False)
    ctx = LoweringContext(sub, node, inputs)
    resolve(node, opset)(ctx)
    outs = ctx.outputs
    if sub.bounded is not None:
        return fold_bounded(sub, sub.bounded)
    if all(o is None or (o.const is not None) for o in outs):
        return outs
    live = [o for o in outs if o is not None]
    plan = sub.finish(live)
    arrays = plan.run(0, [], 1)
    it = iter(arrays)
    return [None if o is None else Value(o.shape, o.dtype, const=next(it)) for o in outs]


def fold_bounded(sub: Planner, bounded: BoundedOutputs) -> list[Value | None]:
    """A data-dependent node over constants: run it, then cut its outputs."""
    live = [v for v in bounded.values if v is not None]
    arrays = sub.finish(live + [bounded.count]).run(0, [], 1)
    trimmed = trim_bounded(bounded, arrays[:-1], int(arrays[-1][0]))
    it = iter(trimmed)
    return [None if v is None else Value(a.shape, a.dtype, const=a)
            for v, a in ((v, next(it) if v is not None else None) for v in bounded.values)]


def trim_bounded(bounded: BoundedOutputs, arrays: list[np.ndarray], count: int) -> list[np.ndarray]:
    """The live outputs' packed prefixes as arrays of their concrete shapes."""
    shapes = [s for v, s in zip(bounded.values, bounded.shape_of(count)) if v is not None]
    out = []
    for arr, shape in zip(arrays, shapes):
        n = int(np.prod(shape, dtype=np.int64))
        out.append(arr.reshape(-1)[:n].reshape(shape))
    return out


def onnx_dtype(dtype: np.dtype) -> int:
    return NUMPY_TO_ONNX[np.dtype(dtype)]
