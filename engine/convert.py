"""ONNX -> .aie conversion: import, passes, plan the default shapes, write."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from engine import aie_format
from engine.errors import ConversionError
from engine.ir import Graph
from engine.onnx_import import import_file
from engine.passes import run_passes


@dataclass
class ConversionSummary:
    source: str
    destination: str
    op_counts: dict[str, int]
    weights_bytes: int
    arena_bytes: int  # largest arena peak among the planned shapes
    planned_shapes: list[dict] = field(default_factory=list)
    passes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    file_bytes: int = 0

    @property
    def planned_memory(self) -> int:
        return self.weights_bytes + self.arena_bytes

    def lines(self) -> list[str]:
        ops = ", ".join(f"{k} x{v}" for k, v in sorted(self.op_counts.items(), key=lambda kv: (-kv[1], kv[0])))
        return [
            f"converted {self.source} -> {self.destination} in {self.seconds:.2f} s",
            f"  ops:            {sum(self.op_counts.values())} ({ops})",
            f"  passes:         {', '.join(self.passes) or 'none'}",
            f"  weights:        {self.weights_bytes} bytes",
            f"  arena peak:     {self.arena_bytes} bytes "
            + "; ".join(f"{p['inputs']}: {p['arena_bytes']}" for p in self.planned_shapes),
            f"  planned memory: {self.planned_memory} bytes (weights + arena peak)",
        ]


def default_shapes(graph: Graph, batch: int = 1) -> dict[str, tuple[int, ...]] | None:
    """Concrete shapes for planning at conversion: symbolic dims become
    `batch` in front and 1 elsewhere... unless a dim cannot be guessed."""
    shapes = {}
    for t in graph.inputs:
        if t.shape is None:
            return None
        shapes[t.name] = tuple(d if isinstance(d, int) and d > 0 else (batch if i == 0 else 1)
                               for i, d in enumerate(t.shape))
    return shapes


def convert_graph(graph: Graph) -> tuple[Graph, list[str]]:
    return run_passes(graph)


def weights_bytes(graph: Graph) -> int:
    total = sum(aie_format._align(a.nbytes) for a in graph.initializers.values())
    for node in graph.nodes:
        for v in node.attrs.values():
            if isinstance(v, Graph):
                total += weights_bytes(v)
    return total


def plan_default_shapes(graph: Graph, weights_blob=None) -> list[dict]:
    """Plan the batch-1 shape to report (and record) the arena peak."""
    from engine.session import build_plan_for_graph

    shapes = default_shapes(graph)
    if shapes is None:
        return []
    feeds = {t.name: np.zeros(shapes[t.name], t.dtype) for t in graph.inputs}
    try:
        plan = build_plan_for_graph(graph, feeds, nthreads=1)
    except Exception:  # noqa: BLE001 - shapes that need input values plan at run time
        return []
    return [{"inputs": {k: list(v) for k, v in shapes.items()}, "arena_bytes": int(plan.arena_bytes)}]


def convert_file(src: str | Path, dst: str | Path, *, progress: Callable[[str], None] | None = None) -> ConversionSummary:
    say = progress or (lambda msg: None)
    t0 = time.perf_counter()
    say(f"importing {src}")
    graph = import_file(src)
    say("running graph passes")
    graph, passes = convert_graph(graph)
    say("planning default shapes")
    planned = plan_default_shapes(graph)
    say(f"writing {dst}")
    size = aie_format.write(dst, graph, {"planned": planned, "passes": passes})
    return ConversionSummary(
        source=str(src), destination=str(dst), op_counts=dict(Counter(n.op for n in graph.nodes)),
        weights_bytes=weights_bytes(graph), arena_bytes=max((p["arena_bytes"] for p in planned), default=0),
        planned_shapes=planned, passes=passes, seconds=time.perf_counter() - t0, file_bytes=size)


def convert_spec_models(spec_paths, out_dir: str | Path, *, progress: Callable[[str], None] | None = None
                        ) -> list[ConversionSummary]:
    """Convert every model in the spec's engine.models to out_dir/<name>.aie.
    A missing source is an error, never a stand-in: build zoo models first
    (`invoke zoo`, which `make deploy` runs for the default spec)."""
    from hostspec.loader import load_spec

    spec = load_spec(spec_paths or None)
    models = spec.data["engine"]["models"]
    for model in models:
        src = Path(model["source"])  # absolute: the spec loader resolved it
        if not src.is_file():
            raise ConversionError(f"model {model['name']!r}: source file not found", where=str(src),
                                  hint=f"fix engine.models[{model['name']}].source in the spec; for a zoo model "
                                       f"run `invoke zoo --name {model['name']}`")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return [convert_file(Path(m["source"]), out_dir / f"{m['name']}.aie", progress=progress) for m in models]
