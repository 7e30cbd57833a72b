"""InferenceSession: the onnxruntime-shaped API over converted models.

    sess = engine.InferenceSession("model.aie")   # or "model.onnx"
    [probs] = sess.run(None, {"input": x})

A run validates its inputs, looks the plan for their shapes up in a bounded
LRU (building it on first use) and executes it in C with one foreign call
(GIL released). Concurrent runs are safe: each takes its own arena from the
plan's pool of arenas (grown to the peak concurrency, then reused).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine import aie_format
from engine.arena import PLAN_ARENAS, ArenaPolicy
from engine.errors import InvalidArgument, UnsupportedOperatorError
from engine.ir import Graph, type_string
from engine.kernels._lib import lib
from engine.kernels.conv_lowp import conv_bf16_path
from engine.kernels.gemm_lowp import paths as lowp_paths
from engine.onnx_import import import_file
from engine.passes import run_passes
from engine.passes.precision import precision_of
from engine.plan import BLOB_WEIGHTS, LOC_BLOB, LOC_INPUT, Buffer, ExecPlan, NeedsValue, PlanCache, Planner, Value

DEFAULT_PLAN_CACHE_SIZE = 16  # engine.plan_cache_size default (sysconfig schema)
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
                "gemm_u8s8": lambda: lowp_paths()["int8"], "conv_u8s8": lambda: lowp_paths()["int8"]}


@dataclass(frozen=True)
class NodeArg:
    """What get_inputs()/get_outputs() return (onnxruntime's NodeArg)."""

    name: str
    shape: list
    type: str


def build_plan_for_graph(graph: Graph, feeds: dict[str, np.ndarray], *, nthreads: int = 1,
                         value_inputs: frozenset = frozenset(), weights: np.ndarray | None = None) -> ExecPlan:
    planner = Planner(graph.opset, nthreads=nthreads)
    base = weights.ctypes.data if weights is not None and weights.size else None
    for name, arr in graph.initializers.items():
        v = Value(arr.shape, arr.dtype, const=arr)
        if base is not None and arr.nbytes:
            # Initializers are views into the weights blob: address them in place.
            v.buf = Buffer(LOC_BLOB, arr.nbytes, index=BLOB_WEIGHTS, offset=arr.ctypes.data - base)
        planner.define(name, v)
    for i, t in enumerate(graph.inputs):
        arr = feeds[t.name]
        v = Value(arr.shape, arr.dtype, buf=Buffer(LOC_INPUT, arr.nbytes, index=i), origin=t.name)
        if t.name in value_inputs:
            v.const = arr.copy()
        planner.define(t.name, v)
    planner.lower_nodes(graph.nodes)
    return planner.finish([planner.lookup(t.name) for t in graph.outputs])


def describe_shapes(model: str, shapes: dict) -> str:
    """What an arena-size error names, e.g. `model 'mlp', input [64, 784]`."""
    inputs = ", ".join(f"{name} {list(shape)}" for name, shape in shapes.items())
    return f"model {model!r}, {inputs}" if model else inputs


class InferenceSession:
    def __init__(self, path, threads: int | None = None, plan_cache_size: int = DEFAULT_PLAN_CACHE_SIZE,
                 arena: ArenaPolicy | None = None):
        """arena: how plan arenas are backed (engine.arena of engine.yaml;
        default: hugepages when free, no mlock); their total is bounded by
        engine.arena.PLAN_ARENAS.limit, checked here against the shapes
        planned at conversion and again for every new arena."""
        path = Path(path)
        if path.suffix == ".onnx":
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
        self._plans = PlanCache(plan_cache_size)
        self._value_inputs: frozenset = frozenset()
        self._lock = threading.Lock()
        self._input_index = {t.name: i for i, t in enumerate(self.graph.inputs)}
        # (name, dtype, rank or None, [(dim, required size)]) per input
        self._specs = [(t.name, t.dtype, None if t.shape is None else len(t.shape),
                        [(i, d) for i, d in enumerate(t.shape or ()) if isinstance(d, int) and d > 0])
                       for t in self.graph.inputs]
        self._output_names = [t.name for t in self.graph.outputs]
        # fp32 or bf16: what the converter chose (ai-engine convert --precision)
        self.precision = self._model.meta.get("precision") or precision_of(self.graph)
        self._weights_ptr = self._model.weights_ptr
        self.arena_policy = arena or ArenaPolicy(owner=Path(path).stem)
        for planned in self._model.meta.get("planned", []):
            what = describe_shapes(self.arena_policy.owner, planned["inputs"]) + " (planned at conversion)"
            PLAN_ARENAS.check_fits(int(planned["arena_bytes"]), self.arena_policy, what)

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
        families = {LOWP_KERNELS.get((n.op, n.attrs.get("_precision"))) for n in self.graph.nodes} - {None}
        return {f: KERNEL_PATHS[f]() for f in sorted(families)}

    @property
    def plan_count(self) -> int:
        return len(self._plans)

    def plans(self) -> list[ExecPlan]:
        return self._plans.plans()

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
        for name, dtype, rank, fixed in self._specs:
            a = feeds.get(name)
            if a is None:
                self._unknown_or_missing(feeds)
            if type(a) is not np.ndarray:
                a = np.asarray(a)
            if a.dtype != dtype:
                raise InvalidArgument(f"input {name!r} has dtype {type_string(a.dtype) if a.dtype in _KNOWN else a.dtype}"
                                      f", expected {type_string(dtype)}")
            if rank is not None:
                shape = a.shape
                if len(shape) != rank or any(shape[i] != d for i, d in fixed):
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
        while True:
            value_inputs = self._value_inputs
            # dtypes are fixed per input (checked in _check_feeds): shapes key the plan.
            key = tuple([a.shape for a in arrays])
            if value_inputs:
                key += tuple(arrays[self._input_index[n]].tobytes() for n in sorted(value_inputs))
            plan = self._plans.get(key)
            if plan is not None:
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
            return plan

    def run(self, output_names, input_feed: dict, run_options=None) -> list[np.ndarray]:
        arrays = self._check_feeds(input_feed)
        names = self._output_names
        if output_names:
            missing = [n for n in output_names if n not in names]
            if missing:
                raise InvalidArgument(f"unknown output name(s) {missing}; model outputs: {names}")
        plan = self._plan(arrays)
        outs = plan.run(self._weights_ptr, arrays, self.threads)
        if not output_names:
            return outs
        return [outs[names.index(n)] for n in output_names]

    def bind(self, input_feed: dict):
        """Validate the feeds and bind a run of all outputs without running it
        (engine.plan.BoundRun): for servers that run plans on their own C
        thread (engine.runtime.ExecThread). Raises what run() raises for bad feeds."""
        arrays = self._check_feeds(input_feed)
        return self._plan(arrays).bind(self._weights_ptr, arrays)

    def profile(self, input_feed: dict, repeats: int = 5) -> list[dict]:
        """Per-step times of the plan for these feeds (ExecPlan.profile): a
        diagnostic path, separate from run(), which carries no timing code."""
        arrays = self._check_feeds(input_feed)
        return self._plan(arrays).profile(self._weights_ptr, arrays, self.threads, repeats)


_KNOWN = set(np.dtype(d) for d in (np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
                                   np.uint8, np.uint16, np.uint32, np.uint64, np.bool_))
