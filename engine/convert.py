"""ONNX -> .aie conversion: import, passes, plan the default shapes, write.

Precision (engine.models[].precision, `ai-engine convert --precision`):
fp32 (the default) converts as always. bf16 also converts the model with
engine.passes.precision's bf16 marks, runs both on the samples (the spec's
sample / --sample; seeded random inputs only when there are none, and the
summary says so), prints the error against fp32 and refuses, writing
nothing, when it exceeds max_rel_err / min_top1_agreement. auto takes bf16
when the host has bf16 hardware (level amx or avx512_bf16: elsewhere bf16
runs on the portable path, slower than fp32) and the error is within the
limit (AUTO_MAX_REL_ERR unless one is given), else fp32, and says why (auto
never picks int8). int8 quantises the model with engine.quantize (per-channel
int8 weights, per-tensor uint8 activations, min-max ranges on the samples:
the same samples, or the seeded random ones, said) into a QDQ model, which
the passes fuse onto the int8 kernels; the quantiser measures it against
fp32 on those samples and refuses, writing nothing, past the limits.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from engine import aie_format
from engine.errors import ConversionError
from engine.ir import Graph
from engine.kernels.levels import level
from engine.onnx_import import import_file
from engine.passes import passes_for, run_passes
from engine.passes.precision import precision_of
from engine.quantize.accuracy import AccuracyReport, compare_outputs, limit_problems
from engine.quantize.calibration import load_calibration
from engine.quantize.quantizer import QuantizeOptions, quantize_file
from engine.session import InferenceSession, build_plan_for_graph

PRECISION_CHOICES = ("fp32", "bf16", "int8", "auto")
BF16_LEVELS = ("avx512_bf16", "amx")  # levels with bf16 dot-product hardware
# auto's limit when none is given: bf16 rounds each GEMM input to 8
# significant bits (2^-9 relative); over the 10-20 layers of the zoo's CNNs
# and encoders that measures 2e-3..1.5e-2 (OpenVINO's bf16: 1.2e-2 on
# ResNet-18). 3e-2 passes those and refuses a model that amplifies it.
AUTO_MAX_REL_ERR = 3e-2
RANDOM_BATCHES = 4  # seeded random inputs when a model has no samples


@dataclass
class PrecisionOptions:
    precision: str = "fp32"                 # fp32 | bf16 | auto
    sample: str | Path | None = None         # .npy/.npz (or a directory of them): the inputs compared on
    max_rel_err: float | None = None
    min_top1_agreement: float | None = None
    threads: int = 1
    shapes: dict[str, list[int]] | None = None  # random inputs' shapes by input name (else batch 1, symbolic dims 1)


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
    precision: str = "fp32"
    accuracy: AccuracyReport | None = None
    notes: list[str] = field(default_factory=list)  # how the precision was chosen, what was compared on

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
            f"  precision:      {self.precision}",
        ] + [f"  {n}" for n in self.notes] + (["  " + x for x in self.accuracy.lines()] if self.accuracy else [])


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


def _converted(src, precision: str, say) -> tuple[Graph, list[str]]:
    say(f"importing {src}")
    graph = import_file(src)
    say(f"running graph passes ({precision})")
    return run_passes(graph, passes_for(precision))


def _samples(graph: Graph, opts: PrecisionOptions, notes: list[str]) -> list[dict[str, np.ndarray]]:
    if opts.sample is not None:
        cal = load_calibration(opts.sample, graph.inputs)
        notes.append(f"compared on {cal.samples} samples from {cal.source}")
        return cal.batches
    shapes = default_shapes(graph)
    if opts.shapes:
        shapes = {**(shapes or {}), **{k: tuple(v) for k, v in opts.shapes.items()}}
        if set(shapes) != {t.name for t in graph.inputs}:
            raise ConversionError(f"shapes name inputs {sorted(opts.shapes)}, the model's inputs are "
                                  f"{sorted(t.name for t in graph.inputs)}")
    if shapes is None:
        raise ConversionError("the model has inputs of unknown rank and no sample to compare bf16 against fp32 on",
                              hint="give --sample (the spec's sample): a .npy or .npz of the model's inputs")
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(RANDOM_BATCHES):
        feeds = {}
        for t in graph.inputs:
            dt = np.dtype(t.dtype)
            if dt.kind == "f":
                feeds[t.name] = rng.standard_normal(shapes[t.name]).astype(dt)
            else:  # ids, masks, flags: 0 and 1 are valid for every table
                feeds[t.name] = rng.integers(0, 2, shapes[t.name]).astype(dt)
        batches.append(feeds)
    notes.append(f"no samples: compared on {RANDOM_BATCHES} seeded random inputs at "
                 + ", ".join(f"{k} {list(v)}" for k, v in shapes.items())
                 + " (give --sample / the spec's sample for a meaningful figure)")
    return batches


def _measure(fp32: Graph, bf16: Graph, batches, threads: int) -> AccuracyReport:
    with tempfile.TemporaryDirectory(prefix="aie-precision-") as tmp:
        runs = []
        for name, graph in (("fp32", fp32), ("bf16", bf16)):
            path = Path(tmp) / f"{name}.aie"
            aie_format.write(path, graph)
            session = InferenceSession(path, threads=threads)
            runs.append([session.run(None, feeds) for feeds in batches])
    return compare_outputs(runs[1], runs[0])


def _int8(src, fp32: Graph, opts: PrecisionOptions, say, notes: list[str]):
    with tempfile.TemporaryDirectory(prefix="aie-int8-") as tmp:
        calibration = opts.sample
        if calibration is None:  # the seeded random inputs, one .npz per batch (and noted)
            calibration = Path(tmp) / "calibration"
            calibration.mkdir()
            for i, feeds in enumerate(_samples(fp32, opts, notes)):
                np.savez(calibration / f"{i:03d}.npz", **feeds)
        quantised = Path(tmp) / "model.int8.onnx"
        say("quantising to int8 (engine.quantize) and measuring it against fp32")
        result = quantize_file(src, calibration, quantised,
                               QuantizeOptions(max_rel_err=opts.max_rel_err,
                                               min_top1_agreement=opts.min_top1_agreement, threads=opts.threads),
                               progress=say)
        if opts.sample is not None:
            notes.append(f"int8 calibrated and compared on {result.samples} samples from {result.calibration}")
        notes.extend(result.notes)
        graph, passes = _converted(quantised, "fp32", say)
    if precision_of(graph) != "int8":
        raise ConversionError("int8: the quantised model runs no int8 kernel (no Conv/MatMul/Gemm fused)",
                              where=str(src), hint="use precision fp32 or bf16")
    return graph, passes, "int8", result.accuracy


def _choose(src, opts: PrecisionOptions, say, notes: list[str]) -> tuple[Graph, list[str], str, AccuracyReport | None]:
    """The graph to write, its passes, its precision and the measured error."""
    if opts.precision not in PRECISION_CHOICES:
        raise ConversionError(f"precision {opts.precision!r} is not one of {', '.join(PRECISION_CHOICES)}")
    fp32, passes = _converted(src, "fp32", say)
    if opts.precision == "fp32":
        return fp32, passes, "fp32", None
    if opts.precision == "int8":
        return _int8(src, fp32, opts, say, notes)
    if opts.precision == "auto" and level() not in BF16_LEVELS:
        notes.append(f"auto chose fp32: level {level()} has no bf16 hardware (needs {' or '.join(BF16_LEVELS)}); "
                     "bf16 would run on the portable path, slower than fp32")
        return fp32, passes, "fp32", None
    bf16, passes16 = _converted(src, "bf16", say)
    if precision_of(bf16) == "fp32":
        notes.append("fp32: no node can compute in bf16 (no MatMul, Gemm or Conv with constant weights)")
        return fp32, passes, "fp32", None
    say("measuring bf16 against fp32")
    acc = _measure(fp32, bf16, _samples(fp32, opts, notes), opts.threads)
    limit = opts.max_rel_err
    if opts.precision == "auto" and limit is None and opts.min_top1_agreement is None:
        limit = AUTO_MAX_REL_ERR
    problems = limit_problems(acc, limit, opts.min_top1_agreement)
    if not problems:
        if opts.precision == "auto":
            notes.append(f"auto chose bf16: level {level()} has bf16 hardware and the error is within the limit "
                         f"(max rel err {acc.max_rel_err:.3e} <= {limit if limit is not None else 'none'}"
                         + (f", top-1 >= {opts.min_top1_agreement}" if opts.min_top1_agreement is not None else "")
                         + ")")
        return bf16, passes16, "bf16", acc
    if opts.precision == "auto":
        notes.append("auto chose fp32: bf16 " + "; ".join(problems))
        return fp32, passes, "fp32", acc
    raise ConversionError("bf16 model refused, nothing written: " + "; ".join(problems)
                          + f" (measured on {acc.samples} samples: max abs {acc.max_abs_err:.3e}, "
                          f"min cosine {acc.cosine:.6f}"
                          + (f", top-1 agreement {acc.top1_agreement:.4f}" if acc.top1_agreement is not None else "")
                          + ")", where=str(src), hint="use precision fp32 or auto, or a looser limit")


def convert_file(src: str | Path, dst: str | Path, *, progress: Callable[[str], None] | None = None,
                 precision: PrecisionOptions | None = None) -> ConversionSummary:
    say = progress or (lambda msg: None)
    opts = precision or PrecisionOptions()
    t0 = time.perf_counter()
    notes: list[str] = []
    graph, passes, chosen, acc = _choose(src, opts, say, notes)
    say("planning default shapes")
    planned = plan_default_shapes(graph)
    say(f"writing {dst}")
    extra = {"planned": planned, "passes": passes, "precision": chosen}
    if acc is not None:
        extra["accuracy"] = acc.as_json()
    size = aie_format.write(dst, graph, extra)
    return ConversionSummary(
        source=str(src), destination=str(dst), op_counts=dict(Counter(n.op for n in graph.nodes)),
        weights_bytes=weights_bytes(graph), arena_bytes=max((p["arena_bytes"] for p in planned), default=0),
        planned_shapes=planned, passes=passes, seconds=time.perf_counter() - t0, file_bytes=size,
        precision=chosen, accuracy=acc, notes=notes)
