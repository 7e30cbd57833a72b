"""A served model: its sessions (one per instance), its tensor signature in
KServe terms, and the validation of a request's inputs against it.

Warm plans: before a model is handed to the scheduler (so before it reports
ready, at start-up and after every reload), each session runs once on zeros
of every shape the model declares -- its inputs' shapes when all are static,
and the input shapes of its recorded smoke reference (<model>.smoke.json
beside the model file, written by the deployer from the spec's sample or
shapes), padded to their shape bucket, and every bucket size at the batch
sizes the batcher aims at when the model has buckets (engine.server.buckets;
at most engine.plan_cache_size shapes) -- so the plan for those shapes is
built and the weights and arena pages are touched before the first request.
A second run of each measures the compute time the scheduler starts from.
`plan_report()` says what was built.

Sessions come from `engine.InferenceSession(path, threads=...)`. The variable
AIE_SERVE_SESSION_FACTORY="module:callable" substitutes another factory with
the same signature and the same three methods (run, get_inputs, get_outputs):
the test suite uses it for a model whose run time it controls.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.arena import ArenaPolicy
from engine.errors import EngineError
from engine.server.buckets import ServedBuckets
from engine.server.config import ModelConfig
from engine.server.errors import ServeError
from engine.server.placement import place
from engine.session import InferenceSession


# KServe v2 datatype <-> numpy, and the ONNX-style type strings sessions report.
KSERVE_TO_NUMPY = {
    "BOOL": np.dtype(np.bool_), "UINT8": np.dtype(np.uint8), "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32), "UINT64": np.dtype(np.uint64), "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16), "INT32": np.dtype(np.int32), "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16), "FP32": np.dtype(np.float32), "FP64": np.dtype(np.float64),
}
NUMPY_TO_KSERVE = {v: k for k, v in KSERVE_TO_NUMPY.items()}
_ONNX_TO_KSERVE = {
    "tensor(bool)": "BOOL", "tensor(uint8)": "UINT8", "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32", "tensor(uint64)": "UINT64", "tensor(int8)": "INT8",
    "tensor(int16)": "INT16", "tensor(int32)": "INT32", "tensor(int64)": "INT64",
    "tensor(float16)": "FP16", "tensor(float)": "FP32", "tensor(double)": "FP64",
}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str             # KServe name: FP32, INT64, ...
    shape: tuple[int, ...]    # -1 for a dynamic dimension

    @property
    def dtype(self) -> np.dtype:
        return KSERVE_TO_NUMPY[self.datatype]

    def as_json(self) -> dict:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


def _spec(node, where: str) -> TensorSpec:
    datatype = _ONNX_TO_KSERVE.get(str(node.type))
    if datatype is None:
        raise ServeError(f"tensor {node.name!r} has type {node.type!r}, which the server cannot carry",
                             where=where)
    shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in (node.shape or ()))
    return TensorSpec(node.name, datatype, shape)


def _factory():
    spec = os.environ.get("AIE_SERVE_SESSION_FACTORY")
    if not spec:
        return InferenceSession
    module, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ServeError(f"AIE_SERVE_SESSION_FACTORY={spec!r}: {exc}") from None


def accepts(factory, keyword: str) -> bool:
    """Whether the session class takes `keyword` (a substituted one may not)."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return keyword in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def open_session(path: str, threads: int | None, plan_cache_size: int | None = None, arena=None):
    """One session over the model file at `path` (re-opened by path: a file
    replaced by atomic rename is the new file). `plan_cache_size` and `arena`
    (an engine.arena.ArenaPolicy) are passed when the session class takes them."""
    try:
        factory = _factory()
    except ImportError as exc:
        raise ServeError(f"the runtime is not available: {exc}", where=path) from None
    kwargs = {"threads": threads or None}
    if plan_cache_size and accepts(factory, "plan_cache_size"):
        kwargs["plan_cache_size"] = plan_cache_size
    if arena is not None and accepts(factory, "arena"):
        kwargs["arena"] = arena
    try:
        return factory(path, **kwargs)
    except EngineError as exc:
        raise ServeError(str(exc), where=path) from None
    except FileNotFoundError:
        raise ServeError("model file not found", where=path) from None
    except Exception as exc:  # noqa: BLE001 - any loader failure must keep the old model serving
        raise ServeError(f"{type(exc).__name__}: {exc}", where=path) from None


@dataclass
class WarmPlans:
    """What warm-up built: the shapes, from where, how many plans, how long."""
    shapes: list = field(default_factory=list)   # [{input: [dims]}]
    sources: list = field(default_factory=list)  # "static inputs", "smoke reference"
    builds: int = 0                              # plans built, over every instance
    ns: int = 0                                  # wall time of the building runs
    error: str | None = None                     # a smoke reference that could not be used
    requests: int = 0                            # requests run through the serving path (engine.server.warmpath)
    request_ns: int = 0                          # their wall time
    capped: str | None = None                    # the shapes left out to fit the plan cache (buckets)

    def as_json(self) -> dict:
        return {"warm": self.builds, "warm_ns": self.ns, "shapes": self.shapes, "sources": self.sources,
                "warm_requests": self.requests, "warm_request_ns": self.request_ns,
                **({"error": self.error} if self.error else {}), **({"capped": self.capped} if self.capped else {})}


def smoke_reference_path(model_path: str) -> Path:
    """The deployer's layout: models/<name>.aie beside models/<name>.smoke.json."""
    return Path(model_path).with_suffix(".smoke.json")


def declared_shapes(inputs: tuple[TensorSpec, ...], model_path: str) -> tuple[list, list, str | None]:
    """([{input: shape}], [source], error): the static input shapes, then the
    smoke reference's (when it exists and matches the inputs)."""
    shapes, sources, error = [], [], None
    if inputs and all(-1 not in t.shape for t in inputs):
        shapes.append({t.name: list(t.shape) for t in inputs})
        sources.append("static inputs")
    ref = smoke_reference_path(model_path)
    if ref.is_file():
        try:
            doc = json.loads(ref.read_text())
            given = {i["name"]: [int(d) for d in i["shape"]] for i in doc["inputs"]}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return shapes, sources, f"{ref}: not a smoke reference ({type(exc).__name__}: {exc})"
        fits = set(given) == {t.name for t in inputs} and all(
            len(given[t.name]) == len(t.shape) and all(w in (-1, g) for w, g in zip(t.shape, given[t.name]))
            for t in inputs)
        if not fits:
            wanted = ", ".join(f"{t.name} {list(t.shape)}" for t in inputs)
            error = f"{ref}: input shapes {given} do not fit the model's inputs ({wanted})"
        elif given not in shapes:
            shapes.append(given)
            sources.append("smoke reference")
    return shapes, sources, error


class LoadedModel:
    """Sessions for one model version plus its signature. Immutable once built;
    a reload builds a new one beside it."""

    def __init__(self, config: ModelConfig, threads: int, plan_cache_size: int | None = None,
                 arena: ArenaPolicy | None = None):
        self.config = config
        # instances/threads of 0 are "auto": engine.server.placement says how they resolve.
        self.placement = place(config.instances, config.threads, threads)
        policy = dataclasses.replace(arena, owner=config.name) if arena is not None else None
        self.sessions = []
        try:
            for _ in range(self.placement.instances):
                self.sessions.append(open_session(config.path, self.placement.threads, plan_cache_size, policy))
        except BaseException:
            self.close()  # a half-built version must not keep the instances it did open
            raise
        # What the sessions were given (None: the session class takes no plan cache size).
        self.plan_cache_size = plan_cache_size if plan_cache_size and accepts(_factory(), "plan_cache_size") else None
        first = self.sessions[0]
        where = f"model {config.name!r} ({config.path})"
        self.inputs = tuple(_spec(n, where) for n in first.get_inputs())
        self.outputs = tuple(_spec(n, where) for n in first.get_outputs())
        self._inputs_by_name = {t.name: t for t in self.inputs}
        # What /health and the model config report (a session class without them computes in fp32).
        self.precision = getattr(first, "precision", "fp32")
        self.kernel_paths = dict(getattr(first, "kernel_paths", {}))
        # Batching joins requests along dimension 0, so every input and
        # output must have a dynamic first dimension ...
        self.follows_batch = all(t.shape and t.shape[0] == -1 for t in self.inputs + self.outputs)
        # ... and the same one: an output whose first dimension is another
        # symbol (a detector's detections [K, 4], K known at run time) does
        # not follow the batch.
        firsts = {a.shape[0] for a in first.get_inputs() + first.get_outputs() if a.shape and isinstance(a.shape[0], str)}
        self.follows_batch = self.follows_batch and len(firsts) <= 1
        self.batchable = config.max_batch_size > 1 and self.follows_batch
        self.max_batch = config.max_batch_size if self.batchable else 1
        try:
            self.buckets = ServedBuckets(config.buckets, first, self.batchable) if config.buckets else None
        except BaseException:
            self.close()
            raise
        self.warm_compute: list[tuple[int, float]] = []   # (batch items, seconds) measured by warm-up
        self.warm = self._warm_plans()

    def _warm_plans(self) -> WarmPlans:
        shapes, sources, error = declared_shapes(self.inputs, self.config.path)
        capped = None
        if self.buckets is not None:
            shapes, capped = self.buckets.warm_shapes(shapes, self.inputs, self.warm_batches(), self.plan_cache_size)
            sources = sources + ["buckets"]
        warm = WarmPlans(shapes=shapes, sources=sources, error=error, capped=capped)
        for shape in shapes:
            feeds = {t.name: np.zeros(shape[t.name], t.dtype) for t in self.inputs}
            if not self.schedulable(shape):
                continue  # the scheduler never forms this batch
            items = shape[self.inputs[0].name][0] if self.batchable else 1
            for session in self.sessions:
                before = getattr(session, "plan_count", None)
                t0 = time.perf_counter_ns()
                try:
                    session.run(None, feeds)
                except Exception as exc:  # noqa: BLE001 - a shape the model refuses must not stop it serving
                    warm.error = f"warm-up of {shape} failed: {type(exc).__name__}: {exc}"
                    break
                t1 = time.perf_counter_ns()
                session.run(None, feeds)
                self.warm_compute.append((items, (time.perf_counter_ns() - t1) / 1e9))
                warm.ns += t1 - t0
                after = getattr(session, "plan_count", None)
                warm.builds += after - before if after is not None else 1
        return warm

    def warm_batches(self) -> list[int]:
        """The batch sizes warm-up builds each shape bucket's plans at, most
        wanted first: 1 (a request alone), max_batch_size (the batcher under
        load), then the preferred sizes it aims at, largest first. Other
        sizes it forms from what is queued build their plan on first use."""
        if not self.batchable:
            return []
        wanted = [1, self.max_batch, *sorted(self.config.preferred_batch_sizes, reverse=True)]
        return [b for i, b in enumerate(wanted) if b <= self.max_batch and b not in wanted[:i]]

    def schedulable(self, shape: dict) -> bool:
        """Whether a request of this {input: dims} fits one batch."""
        return not self.batchable or 1 <= shape[self.inputs[0].name][0] <= self.max_batch

    def plan_report(self) -> dict:
        """Warm-up builds and the plans the sessions hold now (a request of a
        new shape builds one more)."""
        cached = [getattr(s, "plan_count", None) for s in self.sessions]
        built = [getattr(s, "plan_stats", {}).get("builds") for s in self.sessions]
        return {**self.warm.as_json(),
                "cached": sum(cached) if cached and None not in cached else None,
                "built": sum(built) if built and None not in built else None}

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def version(self) -> str:
        return self.config.version

    def output(self, name: str) -> TensorSpec | None:
        return next((t for t in self.outputs if t.name == name), None)

    def expects(self) -> str:
        return ", ".join(f"{t.name} {t.datatype}{list(t.shape)}" for t in self.inputs)

    def input_spec(self, name: str) -> TensorSpec:
        spec = self._inputs_by_name.get(name)
        if spec is None:
            raise ServeError(f"model {self.name!r} has no input {name!r}; it expects: {self.expects()}")
        return spec

    def validate(self, inputs: dict[str, np.ndarray]) -> int:
        """Check names, dtypes and shapes; return the request's batch size
        (its dimension 0 when the model batches, else 1)."""
        missing = [t.name for t in self.inputs if t.name not in inputs]
        if missing:
            raise ServeError(f"missing input {missing[0]!r}; model {self.name!r} expects: {self.expects()}")
        batch = None
        for name, arr in inputs.items():
            spec = self.input_spec(name)
            if arr.dtype != spec.dtype:
                raise ServeError(f"input {name!r} has datatype {NUMPY_TO_KSERVE.get(arr.dtype, str(arr.dtype))}, "
                                   f"model {self.name!r} expects {spec.datatype}")
            shape_ok = len(arr.shape) == len(spec.shape) and all(
                want == -1 or want == got for want, got in zip(spec.shape, arr.shape))
            if not shape_ok:
                raise ServeError(f"input {name!r} has shape {list(arr.shape)}, model {self.name!r} expects "
                                   f"{list(spec.shape)} (-1: any size)")
            if self.batchable:
                if batch is None:
                    batch = arr.shape[0]
                elif arr.shape[0] != batch:
                    raise ServeError(f"input {name!r} has batch size {arr.shape[0]}, other inputs {batch}")
        batch = batch if batch is not None else 1
        if self.batchable and not 1 <= batch <= self.max_batch:
            raise ServeError(f"batch size {batch} outside 1..{self.max_batch} (max_batch_size of {self.name!r})")
        return batch

    def pad(self, inputs: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], int | None]:
        """A validated request's inputs as they are queued: padded to their
        shape bucket when the model has buckets (engine.server.buckets), and
        the size to cut its outputs back to (None: nothing to cut)."""
        return (inputs, None) if self.buckets is None else self.buckets.pad(inputs)

    def cut(self, outputs: dict[str, np.ndarray], n: int | None) -> dict[str, np.ndarray]:
        """A request's outputs cut back to the size `pad` returned."""
        return outputs if n is None else self.buckets.cut(outputs, n)

    def close(self) -> None:
        for s in self.sessions:
            close = getattr(s, "close", None)
            if close:
                close()
        self.sessions = []


def element_count(shape) -> int:
    return math.prod(shape)
