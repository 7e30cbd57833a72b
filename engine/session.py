"""InferenceSession: the onnxruntime-shaped API over converted models.

    sess = engine.InferenceSession("model.aie")   # or "model.onnx"
    [probs] = sess.run(None, {"input": x})

A run validates its inputs, looks the plan for their shapes up in a bounded
LRU (building it on first use) and executes it in C with one foreign call
(GIL released). Concurrent runs are safe: each takes its own arena from the
plan's pool of arenas (grown to the peak concurrency, then reused).
"""

from __future__ import annotations

import ctypes
import operator
import os
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine import aie_format, kernels
from engine.arena import PLAN_ARENAS, ArenaPolicy
from engine.errors import ConversionError, InvalidArgument, KernelError, UnsupportedOperatorError, missing_package
from engine.ir import Graph, type_string
from engine.kernels._lib import lib
from engine.kernels.conv_lowp import conv_bf16_path
from engine.kernels.gemm_lowp import paths as lowp_paths
from engine.passes import run_passes
from engine.passes.precision import precision_of
from engine.plan import ExecPlan, NeedsValue, PlanCache
from engine.plan_segments import OUT_REFUSED, plan_graph
from engine.shape_buckets import ShapeBuckets, bucket_axes, cut_from_bucket, pad_to_bucket

DEFAULT_PLAN_CACHE_SIZE = 16  # the Python API's; a server reads engine.plan_cache_size (default 8)
# Inputs whose values shape the plan (e.g. a Reshape target fed as an input)
# are part of the cache key; larger ones would make keys unbounded.
MAX_VALUE_KEY_ELEMENTS = 4096
# (op, _precision) -> the kernel family that runs it, and how to name the
# path that family takes at the selected level (for kernel_paths).
LOWP_KERNELS = {("MatMul", "bf16"): "gemm_bf16", ("Gemm", "bf16"): "gemm_bf16", ("Conv", "bf16"): "conv_bf16",
                ("FusedAttention", "bf16"): "attention_bf16",
                ("QGemmU8S8", None): "gemm_u8s8", ("QConvU8S8", None): "conv_u8s8"}
KERNEL_PATHS = {"gemm_bf16": lambda: lowp_paths()["bf16"], "conv_bf16": conv_bf16_path,
                # the bf16 attention's products run on the bf16 GEMM
                "attention_bf16": lambda: lowp_paths()["bf16"],
                # the int8 convolution runs the int8 GEMM's micro-kernels
                "gemm_u8s8": lambda: lowp_paths()["int8"], "conv_u8s8": lambda: lowp_paths()["int8"],
                # the int8 depthwise rows: the level's vector ISA (kernels/core/conv_s8_depthwise_body.h)
                "conv_u8s8_dw": lambda: f"{kernels.isa()}_dw_s8"}


@dataclass(frozen=True)
class NodeArg:
    """What get_inputs()/get_outputs() return (onnxruntime's NodeArg)."""

    name: str
    shape: list
    type: str


def build_plan_for_graph(graph: Graph, feeds: dict[str, np.ndarray], *, nthreads: int = 1,
                         value_inputs: frozenset = frozenset(), weights: np.ndarray | None = None) -> ExecPlan:
    # an ExecPlan, or a SegmentedPlan where shapes depend on values (engine.plan_segments)
    return plan_graph(graph, feeds, nthreads=nthreads, value_inputs=value_inputs, weights=weights)


def describe_shapes(model: str, shapes: dict) -> str:
    """What an arena-size error names, e.g. `model 'mlp', input [64, 784]`."""
    inputs = ", ".join(f"{name} {list(shape)}" for name, shape in shapes.items())
    return f"model {model!r}, {inputs}" if model else inputs


class InferenceSession:
    def __init__(self, path, threads: int | None = None, plan_cache_size: int = DEFAULT_PLAN_CACHE_SIZE,
                 arena: ArenaPolicy | None = None, *, loaded: aie_format.LoadedModel | None = None,
                 buckets: ShapeBuckets | None = None):
        """arena: how plan arenas are backed (engine.arena of engine.yaml;
        default: hugepages when free, no mlock); their total is bounded by
        engine.arena.PLAN_ARENAS.limit, checked here against the shapes
        planned at conversion and again for every new arena. loaded: a model
        already in memory (engine.convert executes one before writing it);
        `path` then only names it. buckets: pad a dimension that changes
        every call to a few sizes (ShapeBuckets; opt-in, see there)."""
        path = Path(path)
        if loaded is not None:
            self._model = loaded
        elif path.suffix == ".onnx":
            try:  # onnx is a build-machine package: a host's venv serves .aie files without it
                from engine.onnx_import import import_file
            except ModuleNotFoundError as exc:
                raise missing_package(exc, f"reading {path.name} (an ONNX model)", ConversionError) from None
            graph, passes = run_passes(import_file(path))
            self._model = aie_format.parse(aie_format.serialize(graph, {"passes": passes}), str(path))
        else:
            self._model = aie_format.load(path)
        self.path = str(path)
        self.graph = self._model.graph
        lib()  # load the kernels now: a missing library fails here, not mid-request
        self.threads = int(threads) if threads else (os.cpu_count() or 1)
        if self.threads < 1:
            raise InvalidArgument(f"threads must be >= 1, got {threads}")
        # The eviction hook holds the session weakly: a bound method would make
        # session -> cache -> session a cycle, and a reloaded model's arenas
        # would then wait for the cyclic GC instead of going with the session.
        self._plans = PlanCache(plan_cache_size, on_evict=_forget_memo(weakref.ref(self)))
        self._last: tuple = (None, None)  # (shapes, plan) of the last run, see _plan
        self._value_inputs: frozenset = frozenset()
        self._lock = threading.Lock()
        self._input_index = {t.name: i for i, t in enumerate(self.graph.inputs)}
        self._specs = [_input_spec(t) for t in self.graph.inputs]
        self._output_names = [t.name for t in self.graph.outputs]
        # fp32 or bf16: what the converter chose (ai-engine convert --precision)
        self.precision = self._model.meta.get("precision") or precision_of(self.graph)
        self._weights_ptr = self._model.weights_ptr
        self.arena_policy = arena or ArenaPolicy(owner=Path(path).stem)
        for planned in self._model.meta.get("planned", []):
            what = describe_shapes(self.arena_policy.owner, planned["inputs"]) + " (planned at conversion)"
            PLAN_ARENAS.check_fits(int(planned["arena_bytes"]), self.arena_policy, what)
        self.buckets = buckets
        if buckets is not None:
            self._bucket_inputs, self._bucket_outputs = bucket_axes(self.graph, buckets)

    # -- onnxruntime-compatible metadata --
    def get_inputs(self) -> list[NodeArg]:
        return [NodeArg(t.name, list(t.shape or []), type_string(t.dtype)) for t in self.graph.inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [NodeArg(t.name, list(t.shape or []), type_string(t.dtype)) for t in self.graph.outputs]

    def get_providers(self) -> list[str]:
        return ["AIECPUExecutionProvider"]

    @property
    def kernel_paths(self) -> dict[str, str]:
        """The low-precision kernels this model runs, by family, at the
        selected level, e.g. {"gemm_bf16": "amx_bf16_32x32"}; {} when all is fp32."""
        families = {"conv_u8s8_dw" if n.op == "QConvU8S8" and n.attrs.get("group", 1) != 1
                    else LOWP_KERNELS.get((n.op, n.attrs.get("_precision"))) for n in self.graph.nodes} - {None}
        return {f: KERNEL_PATHS[f]() for f in sorted(families)}

    @property
    def plan_count(self) -> int:
        return len(self._plans)

    def plans(self) -> list[ExecPlan]:
        return self._plans.plans()

    @property
    def plan_stats(self) -> dict:
        """The plan cache (engine.plan_cache_size): plans held, its bound,
        plans built and evicted since load, and arenas of evicted plans that
        new plans took over."""
        cache = self._plans
        return {"plans": len(cache), "capacity": cache.capacity, "builds": cache.builds, "evictions": cache.evictions,
                "arenas_reused": cache.donors.reused}

    # -- inference --
    def _check_feeds(self, feeds: dict) -> list[np.ndarray]:
        # The common case (exact names, ndarray of the right dtype and rank)
        # is checked against specs prepared at load: a small model's whole
        # inference is ~10 us of C, so validation must cost less than that.
        if not isinstance(feeds, dict):
            raise InvalidArgument(f"input feed must be a dict {{name: ndarray}}, got {type(feeds).__name__}")
        if len(feeds) != len(self._specs):
            self._unknown_or_missing(feeds)
        arrays = []
        for name, dtype, rank, fixed_dims, fixed_sizes in self._specs:
            a = feeds.get(name)
            if a is None:
                self._unknown_or_missing(feeds)
            if type(a) is not np.ndarray:
                a = np.asarray(a)
            if a.dtype is not dtype and a.dtype != dtype:
                raise InvalidArgument(f"input {name!r} has dtype {type_string(a.dtype) if a.dtype in _KNOWN else a.dtype}"
                                      f", expected {type_string(dtype)}")
            if rank is not None:
                shape = a.shape
                if len(shape) != rank or (fixed_dims is not None and fixed_dims(shape) != fixed_sizes):
                    t = self.graph.inputs[self._input_index[name]]
                    raise InvalidArgument(f"input {name!r} has shape {list(shape)}, expected {list(t.shape)}")
            arrays.append(a if a.flags.c_contiguous else np.ascontiguousarray(a))
        return arrays

    def _unknown_or_missing(self, feeds: dict) -> None:
        unknown = sorted(set(feeds) - set(self._input_index))
        if unknown:
            raise InvalidArgument(f"unknown input name(s) {unknown}; expected inputs: "
                                  + ", ".join(f"{t.name} {list(t.shape or [])} {type_string(t.dtype)}"
                                              for t in self.graph.inputs))
        for t in self.graph.inputs:
            if t.name not in feeds or feeds[t.name] is None:
                raise InvalidArgument(f"missing input {t.name!r} (shape {list(t.shape or [])}, {type_string(t.dtype)})")

    def _plan(self, arrays: list[np.ndarray]) -> ExecPlan:
        # The last plan used, looked up without the cache's lock: consecutive
        # runs of one shape (the common case) skip the LRU bookkeeping. Its
        # recency is refreshed when another shape takes its place, which is
        # exactly when the LRU order could tell the difference.
        last_key, last_plan = self._last
        if not self._value_inputs:
            key = tuple([a.shape for a in arrays])
            if key == last_key:
                return last_plan
        if last_key is not None:
            self._plans.get(last_key)
        return self._plan_slow(arrays)

    def _plan_slow(self, arrays: list[np.ndarray]) -> ExecPlan:
        while True:
            value_inputs = self._value_inputs
            # dtypes are fixed per input (checked in _check_feeds): shapes key the plan.
            key = tuple([a.shape for a in arrays])
            if value_inputs:
                key += tuple(arrays[self._input_index[n]].tobytes() for n in sorted(value_inputs))
            plan = self._plans.get(key)
            if plan is not None:
                self._remember(key, plan, value_inputs)
                return plan
            feeds = {t.name: a for t, a in zip(self.graph.inputs, arrays)}
            try:
                plan = build_plan_for_graph(self.graph, feeds, nthreads=self.threads, value_inputs=value_inputs,
                                            weights=self._model.weights)
            except NeedsValue as need:
                arr = feeds[need.name]
                if arr.size > MAX_VALUE_KEY_ELEMENTS or need.name in value_inputs:
                    raise UnsupportedOperatorError(
                        f"input {need.name!r} determines tensor shapes and has {arr.size} elements "
                        f"(at most {MAX_VALUE_KEY_ELEMENTS} supported)") from None
                with self._lock:
                    self._value_inputs = self._value_inputs | {need.name}
                continue
            plan.arena_policy = self.arena_policy
            shapes = {t.name: a.shape for t, a in zip(self.graph.inputs, arrays)}
            plan.label = describe_shapes(self.arena_policy.owner, shapes)
            self._plans.put(key, plan)
            self._remember(key, plan, value_inputs)
            return plan

    def _remember(self, key, plan: ExecPlan, value_inputs: frozenset) -> None:
        # Plans keyed by input values too are never the memo (_plan compares shapes only).
        self._last = (None, None) if value_inputs else (key, plan)

    def run(self, output_names, input_feed: dict, run_options=None, *, out=None) -> list[np.ndarray]:
        """onnxruntime's run(); `out`, when given, is a list of arrays (one per
        requested output, C-contiguous, of its shape and dtype) the outputs
        are written into and which is returned: no allocation per call."""
        if self.buckets is not None:
            return self._run_bucketed(output_names, input_feed, out)
        arrays = self._check_feeds(input_feed)
        plan = self._plan(arrays)
        index = self._output_indices(output_names) if output_names else None
        if out is None:
            outs = plan.run(self._weights_ptr, arrays, self.threads, None)
            return outs if index is None else [outs[k] for k in index]
        return self._run_into(plan, arrays, out, index)

    def _run_bucketed(self, output_names, input_feed: dict, out) -> list[np.ndarray]:
        """run() through the buckets: pad, run the bucket's plan, cut back."""
        if out is not None:
            raise InvalidArgument("out= is not supported with shape buckets: outputs are cut from a padded run")
        arrays, n = pad_to_bucket(self.buckets, self._bucket_inputs, self._check_feeds(input_feed))
        outs = self._plan(arrays).run(self._weights_ptr, arrays, self.threads, None)
        index = self._output_indices(output_names) if output_names else range(len(outs))
        if n is None:
            return [outs[k] for k in index]
        return [cut_from_bucket(outs[k], self._bucket_outputs[k], n) for k in index]

    def _output_indices(self, output_names) -> list[int]:
        names = self._output_names
        missing = [n for n in output_names if n not in names]
        if missing:
            raise InvalidArgument(f"unknown output name(s) {missing}; model outputs: {names}")
        return [names.index(n) for n in output_names]

    def _run_into(self, plan, arrays: list[np.ndarray], out, index: list[int] | None) -> list[np.ndarray]:
        """run(out=...): the outputs written into `out`, which is returned.
        An ExecPlan knows every output's shape and dtype before it runs, so
        they are checked here; a segmented plan (engine.plan_segments) learns
        them as it runs and checks them itself."""
        n = len(self._output_names)
        index = list(range(n)) if index is None else index
        planned = isinstance(plan, ExecPlan)
        self._check_out(out, index, plan.outputs if planned else None)
        if index == list(range(n)):
            full = list(out)
        else:  # outputs not asked for still need somewhere to go
            full = plan.new_outputs() if planned else [None] * n
            for k, o in zip(index, out):
                full[k] = o
        plan.run(self._weights_ptr, arrays, self.threads, full)
        return out

    def _check_out(self, out, index: list[int], outputs) -> None:
        """One writable C-contiguous numpy array per requested output, of the
        output's shape and dtype where `outputs` (the plan's) says them."""
        _check_out_list(out, index)
        for k, o in zip(index, out):
            spec = None if outputs is None else outputs[k]
            if (type(o) is np.ndarray and o.flags.c_contiguous and o.flags.writeable
                    and (spec is None or (o.dtype == spec[1] and o.shape == tuple(spec[0])))):
                continue
            got = (f"{type_string(o.dtype) if o.dtype in _KNOWN else o.dtype} {list(o.shape)}"
                   f"{'' if o.flags.c_contiguous else ' non-contiguous'}{'' if o.flags.writeable else ' read-only'}"
                   if isinstance(o, np.ndarray) else type(o).__name__)
            expected = ("numpy array" if spec is None
                        else f"{type_string(spec[1])} array of shape {list(spec[0])}")
            raise InvalidArgument(f"out array for output {self._output_names[k]!r} is {got}, expected a "
                                  f"writable C-contiguous {expected}")

    def io_binding(self) -> "IOBinding":
        return IOBinding(self)

    def run_with_iobinding(self, binding: "IOBinding", run_options=None) -> None:
        """Run with the binding's inputs and outputs (IOBinding): the
        outputs are written into the bound arrays."""
        binding._run()

    def bind(self, input_feed: dict, out: dict | None = None):
        """Validate the feeds and bind a run of all outputs without running it
        (engine.plan.BoundRun): for servers that run plans on their own C
        thread (engine.runtime.ExecThread). Raises what run() raises for bad feeds.
        `out` ({output name: array}) are where outputs go when the plan is
        one segment and an array is exactly the output (shape, dtype,
        C-contiguous, writable); the others get new arrays: see BoundRun.outs."""
        arrays = self._check_feeds(input_feed)
        plan = self._plan(arrays)
        if out and isinstance(plan, ExecPlan):
            into = {k: out[n] for k, n in enumerate(self._output_names) if n in out}
            return plan.bind(self._weights_ptr, arrays, into)
        return plan.bind(self._weights_ptr, arrays)

    def profile(self, input_feed: dict, repeats: int = 5) -> list[dict]:
        """Per-step times of the plan for these feeds (ExecPlan.profile): a
        diagnostic path, separate from run(), which carries no timing code."""
        arrays = self._check_feeds(input_feed)
        return self._plan(arrays).profile(self._weights_ptr, arrays, self.threads, repeats)


def _check_out_list(out, index: list[int]) -> None:
    if not isinstance(out, (list, tuple)) or len(out) != len(index):
        got = type(out).__name__ + (f" of {len(out)}" if isinstance(out, (list, tuple)) else "")
        raise InvalidArgument(f"out must be a list of {len(index)} arrays (one per requested output), got {got}")


def _forget_memo(session_ref):
    """The plan cache's eviction hook: an evicted plan is no longer the
    session's memo of its last plan (InferenceSession._plan)."""
    def evicted(key) -> None:
        session = session_ref()
        if session is not None and session._last[0] == key:
            session._last = (None, None)
    return evicted


def _input_spec(t) -> tuple:
    """(name, dtype, rank or None, getter of the fixed dims or None, their
    sizes) for _check_feeds: one C-level itemgetter call checks every fixed
    dim of a shape."""
    fixed = [(i, d) for i, d in enumerate(t.shape or ()) if isinstance(d, int) and d > 0]
    getter = operator.itemgetter(*[i for i, _ in fixed]) if fixed else None
    sizes = (fixed[0][1] if len(fixed) == 1 else tuple(d for _, d in fixed)) if fixed else None
    return t.name, np.dtype(t.dtype), None if t.shape is None else len(t.shape), getter, sizes


_KNOWN = set(np.dtype(d) for d in (np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
                                   np.uint8, np.uint16, np.uint32, np.uint64, np.bool_))


class IOBinding:
    """onnxruntime's IOBinding in spirit: inputs and outputs bound once to
    arrays the caller owns, so a run is one foreign call with pointers
    prepared when the binding last changed.

        b = sess.io_binding()
        b.bind_cpu_input("x", x)            # C-contiguous; refilled in place by the caller
        b.bind_output("y", y)               # or bind_output("y"): allocated once, reused
        sess.run_with_iobinding(b)          # y now holds the result
        [y] = b.get_outputs()

    Bound arrays are checked (name, dtype, shape, contiguity) when the
    binding is prepared, at the first run after a bind_* call; a binding is
    for one thread at a time."""

    def __init__(self, session: "InferenceSession"):
        self._session = session
        self._inputs: dict[str, np.ndarray] = {}
        self._outputs: dict[str, np.ndarray | None] = {}
        self._prepared = None  # (plan, args without the arena, outs, const copies)

    def bind_cpu_input(self, name: str, array: np.ndarray) -> None:
        if type(array) is not np.ndarray or not array.flags.c_contiguous:
            raise InvalidArgument(f"bound input {name!r} must be a C-contiguous numpy array "
                                  "(the binding reads it in place)")
        self._inputs[name] = array
        self._prepared = None

    bind_input = bind_cpu_input

    def bind_output(self, name: str, array: np.ndarray | None = None) -> None:
        """Bind output `name` to `array`, or to one the binding allocates at
        preparation and reuses (get_outputs returns it)."""
        if name not in self._session._output_names:
            raise InvalidArgument(f"unknown output name {name!r}; model outputs: {self._session._output_names}")
        self._outputs[name] = array
        self._prepared = None

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()
        self._prepared = None

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._prepared = None

    def get_outputs(self) -> list[np.ndarray]:
        """The bound outputs in bind order, after a run."""
        if self._prepared is None:
            raise InvalidArgument("no run with this binding since it last changed")
        return self._prepared[2]

    def _prepare(self):
        s = self._session
        arrays = s._check_feeds(self._inputs)
        if any(a is not self._inputs[t.name] for a, t in zip(arrays, s.graph.inputs)):
            raise InvalidArgument("bound inputs must be C-contiguous arrays of the model's input dtypes")
        if not self._outputs:
            raise InvalidArgument("no output bound (bind_output)")
        plan = s._plan(arrays)
        if not isinstance(plan, ExecPlan):
            raise InvalidArgument(OUT_REFUSED)
        index = s._output_indices(list(self._outputs))
        given = [self._outputs[n] for n in self._outputs]
        for pos, (k, o) in enumerate(zip(index, given)):
            if o is None:
                shape, dtype, _ = plan.outputs[k]
                given[pos] = np.empty(shape, dtype)
        s._check_out(given, index, plan.outputs)
        full = plan.new_outputs()
        for k, o in zip(index, given):
            full[k] = o
        consts = [(full[k], c) for k, (_, _, c) in enumerate(plan.outputs) if c is not None]
        in_ptrs = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        out_ptrs = plan._out_type(*[o.ctypes.data for o in full])
        # `full` keeps the unbound outputs' buffers alive as long as the pointers
        self._prepared = (plan, (plan.blobs_for(s._weights_ptr), in_ptrs, out_ptrs), given, consts, full)
        return self._prepared

    def _run(self) -> None:
        plan, (blobs, in_ptrs, out_ptrs), _, consts, _ = self._prepared or self._prepare()
        for o, c in consts:
            np.copyto(o, c)
        arena = plan.acquire_arena()
        try:
            rc = plan._call(plan._cplan_ref, arena, blobs, in_ptrs, out_ptrs, self._session.threads)
        finally:
            plan.release_arena(arena)
        if rc != 0:
            raise KernelError(f"inference failed: {lib().aie_last_error().decode()}")
