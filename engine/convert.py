"""ONNX -> .aie conversion: import, passes, plan the default shapes, write."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from engine import aie_format
from engine.ir import Graph
from engine.onnx_import import import_file
from engine.passes import run_passes
from engine.session import build_plan_for_graph


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


def weights_bytes(graph: Graph) -> int:
    total = sum(aie_format._align(a.nbytes) for a in graph.initializers.values())
    for node in graph.nodes:
        for v in node.attrs.values():
            if isinstance(v, Graph):
                total += weights_bytes(v)
    return total


def plan_default_shapes(graph: Graph, weights_blob=None) -> list[dict]:
    """Plan the batch-1 shape to report (and record) the arena peak."""
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
    graph, passes = run_passes(graph)
    say("planning default shapes")
    planned = plan_default_shapes(graph)
    say(f"writing {dst}")
    size = aie_format.write(dst, graph, {"planned": planned, "passes": passes})
    return ConversionSummary(
        source=str(src), destination=str(dst), op_counts=dict(Counter(n.op for n in graph.nodes)),
        weights_bytes=weights_bytes(graph), arena_bytes=max((p["arena_bytes"] for p in planned), default=0),
        planned_shapes=planned, passes=passes, seconds=time.perf_counter() - t0, file_bytes=size)

