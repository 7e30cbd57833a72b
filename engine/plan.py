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

import ctypes
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.arena import PLAN_ARENAS, ArenaPolicy
from engine.errors import ConversionError, KernelError, UnsupportedOperatorError
from engine.ir import NUMPY_TO_ONNX, Graph, Node

ALIGN = 64  # bytes: one cache line, and the alignment every kernel assumes

# Location kinds and opcodes: mirror kernels/include/aie_exec.h.
LOC_NONE, LOC_ARENA, LOC_BLOB, LOC_INPUT, LOC_OUTPUT = 0, 1, 2, 3, 4
BLOB_WEIGHTS, BLOB_PLAN = 0, 1


class NeedsValue(Exception):
    """A lowering needs the value of a graph input (e.g. a Reshape target)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


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
        return int(np.prod(self.shape, dtype=np.int64))

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

    def __init__(self, planner: "Planner", node: Node, inputs: list[Value | None]):
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
        raise self.unsupported(f"input {i} ({what or self.node.inputs[i]}) is computed at run time; "
                               "it must be a constant or derived from shapes")

    def unsupported(self, message: str) -> UnsupportedOperatorError:
        from engine.ops import supported_ops

        return UnsupportedOperatorError(
            f"{self.node.op} (node {self.node.name!r}, opset {self.opset}): {message}",
            hint=f"supported ops: {', '.join(supported_ops())}")

    def require_dtype(self, v: Value, allowed: tuple, what: str = "input") -> None:
        if v.dtype not in [np.dtype(a) for a in allowed]:
            names = ", ".join(np.dtype(a).name for a in allowed)
            raise self.unsupported(f"{what} dtype {v.dtype.name} not supported (supported: {names})")

    # -- outputs --
    def out(self, i: int, shape, dtype) -> Value:
        v = self.planner.new_value(shape, dtype)
        self.outputs[i] = v
        return v

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
        return self.planner.lower_subgraph(graph)


class Planner:
    """Lowers nodes for concrete shapes into steps and assigns arena offsets."""

    def __init__(self, opset: int, *, fold: bool = True, nthreads: int = 1):
        self.opset = opset
        self.fold = fold
        self.nthreads = nthreads
        self.steps: list[Step] = []
        self.env: list[dict[str, Value]] = [{}]
        self.plan_consts: list[tuple[Buffer, np.ndarray]] = []

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
        from engine.ops import resolve

        for node in nodes:
            inputs = [self.lookup(n) if n else None for n in node.inputs]
            rule = resolve(node, self.opset)
            if self.fold and node.op not in NO_FOLD and all(v is None or v.const is not None for v in inputs) \
                    and not any(isinstance(a, Graph) for a in node.attrs.values()):
                outs = fold_node(node, inputs, self.opset)
            else:
                ctx = LoweringContext(self, node, inputs)
                rule(ctx)
                outs = ctx.outputs
            for name, value in zip(node.outputs, outs):
                if name:
                    if value is None:
                        raise UnsupportedOperatorError(
                            f"{node.op} (node {node.name!r}): optional output {name!r} is not supported")
                    self.define(name, value)

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
        from engine.ops.data import emit_copy

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
        return pack_plan(self, out_specs)


NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


# ---------------------------------------------------------------------------
# arena assignment and packing


def assign_offsets(buffers: list[Buffer]) -> int:
    """Greedy by size (largest first), lowest offset whose interval is free
    for the buffer's lifetime. Returns the arena size in bytes."""
    placed: list[Buffer] = []
    peak = 0
    for b in sorted(buffers, key=lambda b: (-b.nbytes, b.first)):
        live = sorted((p for p in placed if not (p.last < b.first or b.last < p.first)), key=lambda p: p.offset)
        off = 0
        for p in live:
            if off + b.nbytes <= p.offset:
                break
            off = max(off, p.offset + p.nbytes)
        b.offset = off
        placed.append(b)
        peak = max(peak, off + b.nbytes)
    return peak


# Below these sizes a step runs on the calling thread alone (step record word
# AIE_STEP_THREADS = 1): waking the pool costs ~5-20 us on this class of
# machine (more when the other core is busy), which is what a 2 MFLOP GEMM or
# a 256 KiB element-wise pass takes on one core, so splitting smaller steps
# makes 2 threads slower than 1. Re-measured (bench_models.py, 2 threads,
# batch 1 and 64, five models): 2 MFLOP / 256 KiB beat 10 MFLOP / 1 MiB and
# 50 MFLOP / 4 MiB on every cell but one (digits batch 64); higher bars only
# looked better while onnxruntime's spinning workers held the second CPU.
PARALLEL_MIN_FLOPS = 2_000_000
PARALLEL_MIN_BYTES = 256 << 10
_COMPUTE_OPS = {10, 11, 22, 25}  # matmul, conv, conv_transpose, gemm_packed


def step_work(st: Step) -> tuple[int, int]:
    """(flops, bytes touched) estimate of a step, from its operands."""
    nbytes = sum(t.nbytes for t in st.tensors if t is not None)
    if st.op in (10, 25):  # M, N, K lead both records
        M, N, K = st.ints[:3]
        batch = 1
        if st.op == 10:
            br = st.ints[9]
            batch = int(np.prod(st.ints[10:10 + br], dtype=np.int64)) if br else 1
        return 2 * M * N * K * batch, nbytes
    if st.op in (11, 22):  # conv params: N H W C K R S ... groups at 15
        N, H, W, C, K, R, S = st.ints[:7]
        groups = max(st.ints[15], 1)
        out = st.tensors[0].size
        taps = R * S * (C // groups) if st.op == 11 else R * S * (K // groups)
        return 2 * (out if st.op == 11 else N * H * W * C) * taps, nbytes
    return 0, nbytes


def step_threads(st: Step) -> int:
    """1 for steps too small to split; 0 (the run's thread count) otherwise."""
    flops, nbytes = step_work(st)
    if st.op in _COMPUTE_OPS:
        # Few flops over many bytes (a GEMV over a weight matrix) is
        # bandwidth-bound: two cores' caches and load ports still pay.
        return 0 if flops >= PARALLEL_MIN_FLOPS or nbytes >= 2 * PARALLEL_MIN_BYTES else 1
    return 0 if nbytes >= PARALLEL_MIN_BYTES else 1


class _CPlan(ctypes.Structure):
    _fields_ = [
        ("n_steps", ctypes.c_int64), ("steps", ctypes.c_void_p),
        ("n_tensors", ctypes.c_int64), ("tensors", ctypes.c_void_p),
        ("step_tensors", ctypes.c_void_p), ("iparams", ctypes.c_void_p), ("fparams", ctypes.c_void_p),
    ]


def pack_plan(planner: Planner, out_specs) -> "ExecPlan":
    buffers: dict[int, Buffer] = {}
    for st in planner.steps:
        for t in st.tensors:
            if t is not None and t.buf.kind == LOC_ARENA:
                buffers[id(t.buf)] = t.buf
    arena_bytes = assign_offsets(list(buffers.values()))

    # plan-constant blob
    blob_size = 0
    for buf, data in planner.plan_consts:
        buf.offset = blob_size
        blob_size += buf.nbytes
    consts = np.zeros(max(blob_size, ALIGN) + ALIGN, np.uint8)
    base = (-consts.ctypes.data) % ALIGN
    consts = consts[base:base + max(blob_size, ALIGN)]
    for buf, data in planner.plan_consts:
        consts[buf.offset:buf.offset + data.nbytes] = np.frombuffer(data.tobytes(), np.uint8)

    tensor_ids: dict[tuple, int] = {}
    tensors, step_tensors, iparams, fparams, steps = [], [], [], [], []
    for st in planner.steps:
        t0 = len(step_tensors)
        for t in st.tensors:
            if t is None:
                step_tensors.append(-1)
                continue
            b = t.buf
            key = (b.kind, b.index, b.offset + t.offset)
            if key not in tensor_ids:
                tensor_ids[key] = len(tensors)
                tensors.append(key)
            step_tensors.append(tensor_ids[key])
        steps.append((st.op, t0, len(st.tensors), len(iparams), len(st.ints), len(fparams), len(st.floats),
                      step_threads(st)))
        iparams.extend(st.ints)
        fparams.extend(st.floats)
    return ExecPlan(
        steps=np.array(steps, np.int64).reshape(-1, 8),
        tensors=np.array(tensors, np.int64).reshape(-1, 3),
        step_tensors=np.array(step_tensors + [0], np.int64),
        iparams=np.array(iparams + [0], np.int64),
        fparams=np.array(fparams + [0.0], np.float64),
        consts=consts,
        arena_bytes=arena_bytes,
        outputs=out_specs,
    )


@dataclass
class ExecPlan:
    """A packed plan plus the arenas its concurrent runs use."""

    steps: np.ndarray
    tensors: np.ndarray
    step_tensors: np.ndarray
    iparams: np.ndarray
    fparams: np.ndarray
    consts: np.ndarray
    arena_bytes: int
    outputs: list  # (shape, dtype, const array or None)
    _free: list = field(default_factory=list)
    _keep: list = field(default_factory=list)  # owners of the arena blocks
    _lock: threading.Lock = field(default_factory=threading.Lock)
    arenas_created: int = 0
    arena_backing: str = "numpy"
    # Set by the session that owns the plan: how its arenas are backed, and
    # the model and input shapes, named when engine.arena.size refuses one.
    arena_policy: ArenaPolicy = field(default_factory=ArenaPolicy)
    label: str = "plan"

    def __post_init__(self):
        self.cplan = _CPlan(len(self.steps), self.steps.ctypes.data, len(self.tensors), self.tensors.ctypes.data,
                            self.step_tensors.ctypes.data, self.iparams.ctypes.data, self.fparams.ctypes.data)
        # Per-run ctypes objects prepared once: a small model's whole
        # inference is ~10 us, so the Python side must stay in that range.
        self._cplan_ref = ctypes.byref(self.cplan)
        self._call = _exec_fn()
        self._out_type = ctypes.c_void_p * max(len(self.outputs), 1)
        self._blobs: dict = {}

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    def acquire_arena(self) -> int:
        """Address of a free arena block for one run. Each concurrent run
        needs its own; blocks are kept and reused, so their number is
        bounded by the peak concurrency and steady state allocates nothing."""
        try:
            return self._free.pop()  # atomic under the GIL: no lock on the hot path
        except IndexError:
            pass
        with self._lock:
            address = self._new_arena()
            self.arenas_created += 1
            return address

    def _new_arena(self) -> int:
        # From the process's plan-arena ledger (engine.arena.PLAN_ARENAS):
        # large ones from the kernels' allocator (2 MiB hugepages when the
        # policy asks and the pool has them, else THP/normal pages; prefaulted
        # either way, so the first run takes no page faults), small ones as
        # numpy buffers; the backing it got and why is kept in arena_backing.
        address, keep, self.arena_backing = PLAN_ARENAS.allocate(self, self.arena_bytes, self.arena_policy,
                                                                  self.label)
        self._keep.append(keep)
        return address

    def release_arena(self, address: int) -> None:
        self._free.append(address)

    def bind(self, weights_ptr: int, inputs: list[np.ndarray]) -> "BoundRun":
        """Everything one run needs, with an arena taken from the pool: for
        run() below and for callers that run plans on their own thread
        (engine.server.runner). release() gives the arena back."""
        outs = [np.empty(shape, dtype) if const is None else const.copy() for shape, dtype, const in self.outputs]
        in_ptrs = (ctypes.c_void_p * max(len(inputs), 1))(*[a.ctypes.data for a in inputs])
        out_ptrs = self._out_type(*[o.ctypes.data for o in outs])
        blobs = self._blobs.get(weights_ptr)
        if blobs is None:
            blobs = self._blobs[weights_ptr] = (ctypes.c_void_p * 2)(weights_ptr, self.consts.ctypes.data)
        arena = self.acquire_arena()
        return BoundRun(self, outs, (self._cplan_ref, arena, blobs, in_ptrs, out_ptrs), inputs)

    def run(self, weights_ptr: int, inputs: list[np.ndarray], nthreads: int) -> list[np.ndarray]:
        bound = self.bind(weights_ptr, inputs)
        try:
            rc = self._call(*bound.args, nthreads)
        finally:
            bound.release()
        if rc != 0:
            from engine.kernels._lib import lib

            raise KernelError(f"inference failed: {lib().aie_last_error().decode()}")
        return bound.outs

    def profile(self, weights_ptr: int, inputs: list[np.ndarray], nthreads: int, repeats: int = 5) -> list[dict]:
        """Per-step times: each step runs as a one-step plan sharing this
        plan's tables and one arena (so the normal run path has no timing
        code at all). Returns, in step order, {index, op, op_name, ints,
        threads, ns} with ns the best of `repeats` whole-plan passes; a
        pass includes one ctypes call per step (~1-3 us, listed as such by
        benchmarks/profile_model.py). Plans with jumps (If) are timed
        whole-step by whole-step too, which is only right for the branch
        the inputs take."""
        from engine.kernels._lib import lib

        outs = [np.empty(shape, dtype) if const is None else const.copy() for shape, dtype, const in self.outputs]
        in_ptrs = (ctypes.c_void_p * max(len(inputs), 1))(*[a.ctypes.data for a in inputs])
        out_ptrs = self._out_type(*[o.ctypes.data for o in outs])
        blobs = (ctypes.c_void_p * 2)(weights_ptr, self.consts.ctypes.data)
        rec = self.steps.itemsize * self.steps.shape[1]
        one = [_CPlan(1, self.steps.ctypes.data + i * rec, len(self.tensors), self.tensors.ctypes.data,
                      self.step_tensors.ctypes.data, self.iparams.ctypes.data, self.fparams.ctypes.data)
               for i in range(self.n_steps)]
        best = [float("inf")] * self.n_steps
        arena = self.acquire_arena()
        try:
            for _ in range(max(repeats, 1)):
                for i, cp in enumerate(one):
                    t = time.perf_counter_ns()
                    rc = self._call(ctypes.byref(cp), arena, blobs, in_ptrs, out_ptrs, nthreads)
                    dt = time.perf_counter_ns() - t
                    if rc != 0:
                        raise KernelError(f"step {i} failed: {lib().aie_last_error().decode()}")
                    best[i] = min(best[i], dt)
        finally:
            self.release_arena(arena)
        name_fn = lib().aie_exec_op_name
        name_fn.restype = ctypes.c_char_p
        name_fn.argtypes = [ctypes.c_int64]
        rows = []
        for i, (op, _t0, _nt, i0, ni, _f0, _nf, thr) in enumerate(self.steps.tolist()):
            rows.append({"index": i, "op": op, "op_name": name_fn(op).decode(),
                         "ints": self.iparams[i0:i0 + ni].tolist(), "threads": thr, "ns": best[i]})
        return rows


class BoundRun:
    """One run's arguments for aie_exec_run (plan, arena, blobs, input and
    output pointer arrays) and the objects they point into, kept alive
    together until release()."""

    __slots__ = ("plan", "outs", "args", "inputs", "_released")

    def __init__(self, plan: ExecPlan, outs: list[np.ndarray], args: tuple, inputs: list[np.ndarray]):
        self.plan, self.outs, self.args, self.inputs = plan, outs, args, inputs
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.plan.release_arena(self.args[1])


_EXEC_FN = None


def _exec_fn():
    global _EXEC_FN
    if _EXEC_FN is None:
        from engine.kernels._lib import lib

        fn = lib().aie_exec_run
        fn.argtypes = [ctypes.POINTER(_CPlan), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.c_int]
        fn.restype = ctypes.c_int
        _EXEC_FN = fn
    return _EXEC_FN


def fold_node(node: Node, inputs: list[Value | None], opset: int) -> list[Value | None]:
    """Evaluate a node whose inputs are all known, with the executor itself."""
    from engine.ops import resolve

    # Fresh const-only values: the folded plan carries its own copies of the
    # inputs instead of pointing into the model's weights blob.
    inputs = [None if v is None else Value(v.shape, v.dtype, const=v.const) for v in inputs]
    sub = Planner(opset, fold=False)
    ctx = LoweringContext(sub, node, inputs)
    resolve(node, opset)(ctx)
    outs = ctx.outputs
    if all(o is None or (o.const is not None) for o in outs):
        return outs
    live = [o for o in outs if o is not None]
    plan = sub.finish(live)
    arrays = plan.run(0, [], 1)
    it = iter(arrays)
    return [None if o is None else Value(o.shape, o.dtype, const=next(it)) for o in outs]


def onnx_dtype(dtype: np.dtype) -> int:
    return NUMPY_TO_ONNX[np.dtype(dtype)]


class PlanCache:
    """Bounded LRU of plans per input signature (shapes, plus values of inputs
    a lowering needed at plan time). Evicted plans free their arenas."""

    def __init__(self, capacity: int):
        self.capacity = max(1, int(capacity))
        self._plans: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
            return plan

    def put(self, key, plan) -> None:
        with self._lock:
            self._plans[key] = plan
            self._plans.move_to_end(key)
            while len(self._plans) > self.capacity:
                self._plans.popitem(last=False)

    def __len__(self) -> int:
        return len(self._plans)

    def plans(self) -> list:
        with self._lock:
            return list(self._plans.values())
