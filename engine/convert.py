"""ONNX -> .aie conversion: import, passes, execute once, write.

Every conversion plans and executes the converted model once on
representative inputs (prove_runs: the first sample, else seeded random
inputs at the spec's shapes or representative_shapes' defaults) before
writing: a model that cannot run fails here with its error and nothing is
written. The arena printed and recorded is that execution's, at that shape.

Precision (engine.models[].precision, `ai-engine convert --precision`):
fp32 (the default) converts as always. bf16 also converts the model with
engine.passes.precision's bf16 marks, runs both on the samples (the spec's
sample / --sample; seeded random inputs only when there are none, and the
summary says so), prints the error against fp32 and refuses, writing
nothing, when it exceeds max_rel_err / min_top1_agreement. int8 quantises
the model with engine.quantize (per-channel int8 weights, per-tensor uint8
activations, min-max ranges on the samples: the same samples, or the seeded
random ones, said) into a QDQ model, which the passes fuse onto the int8
kernels; the quantiser measures it against fp32 on those samples and
refuses, writing nothing, past the limits.

auto considers the precisions this level runs on hardware: int8 (a VNNI or
AMX level, and only with samples: a quantiser calibrated on random inputs
proves nothing), bf16 (AMX or AVX-512 BF16; elsewhere bf16 runs on the
portable path, slower than fp32) and fp32. Of those whose measured error is
within the limits (AUTO_MAX_REL_ERR unless one is given) it times each on
the representative input and takes the fastest (auto_decide: the most exact
within AUTO_TIE of it), and notes (and says) the timings and why each other
one was passed over, with the measured numbers.
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
from engine.errors import ConversionError, EngineError
from engine.ir import Graph
from engine.kernels.levels import level
from engine.onnx_import import import_file
from engine.passes import passes_for, run_passes
from engine.passes.precision import precision_of
from engine.plan import NeedsValue
from engine.quantize.accuracy import AccuracyReport, compare_outputs, limit_problems
from engine.quantize.calibration import load_calibration
from engine.quantize.quantizer import QuantizeOptions, quantize_file
from engine.session import InferenceSession, build_plan_for_graph

PRECISION_CHOICES = ("fp32", "bf16", "int8", "auto")
BF16_LEVELS = ("avx512_bf16", "amx")  # levels with bf16 dot-product hardware
# levels with int8 dot-product hardware (vpdpbusd on ymm/zmm, AMX-INT8); plain
# avx2's vpmaddubsw int8 path is not expected to beat its fp32
INT8_LEVELS = ("avx_vnni", "avx512_vnni", "avx512_bf16", "amx")
# auto's limit when none is given: bf16 rounds each GEMM input to 8
# significant bits (2^-9 relative); over the 10-20 layers of the zoo's CNNs
# and encoders that measures 2e-3..1.5e-2 (OpenVINO's bf16: 1.2e-2 on
# ResNet-18). 3e-2 passes those and refuses a model that amplifies it. The
# same limit holds int8 to bf16's accuracy (digits 1.8e-4; MobileNetV2
# calibrated on random inputs 3.4e-2, refused).
AUTO_MAX_REL_ERR = 3e-2
RANDOM_BATCHES = 4  # seeded random inputs when a model has no samples
EXACTNESS = ("fp32", "bf16", "int8")  # auto's candidates, the most exact first
# auto takes the most exact candidate within AUTO_TIE of the fastest: wall
# time on a shared host varies by several per cent run to run, exactness not
AUTO_TIE = 0.10
# auto times each candidate by the median of warm runs: as many as fit in
# AUTO_TIME_S (a sub-millisecond model needs many to rank), at least
# AUTO_MIN_RUNS (a slow one is not timed for minutes), at most AUTO_MAX_RUNS
AUTO_TIME_S = 0.3
AUTO_MIN_RUNS = 3
AUTO_MAX_RUNS = 50


@dataclass
class PrecisionOptions:
    precision: str = "fp32"                 # one of PRECISION_CHOICES
    sample: str | Path | None = None         # .npy/.npz (or a directory of them): the inputs compared on
    max_rel_err: float | None = None
    min_top1_agreement: float | None = None
    threads: int = 1
    shapes: dict[str, list[int]] | None = None  # random inputs' shapes by input name (else batch 1, symbolic dims 1)
    max_shapes: dict[str, list[int]] | None = None  # the largest shapes served: planned too (the arena peak)


@dataclass
class ConversionSummary:
    source: str
    destination: str
    op_counts: dict[str, int]
    weights_bytes: int
    arena_bytes: int  # the arena of the representative shape the model was executed at
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
            f"  arena peak:     {self.arena_bytes} bytes at "
            + "; ".join(p.get("how") or str(p["inputs"]) for p in self.planned_shapes) + " (executed once)",
            f"  planned memory: {self.planned_memory} bytes (weights + arena peak)",
            f"  precision:      {self.precision}",
        ] + [f"  {n}" for n in self.notes] + (["  " + x for x in self.accuracy.lines()] if self.accuracy else [])


# A symbolic dim other than a leading batch dim (height, width, sequence) is
# planned and executed at this size when neither the spec's shapes nor a
# sample says otherwise: 1 would plan a 1x1 image (too small for a pooling
# window, and an arena figure of nothing); 64 fits every window and stride
# of the zoo's models and stays cheap to execute at conversion.
REPRESENTATIVE_DIM = 64
REPRESENTATIVE_BATCH = 1
REPRESENTATIVE_SEED = 0


def representative_shapes(graph: Graph, shapes: dict | None = None) -> tuple[dict[str, tuple[int, ...]] | None, str]:
    """Concrete shapes to plan and execute the model at, and how they were
    chosen: `shapes` (by input name) where given, else the model's fixed dims
    with a symbolic leading dim at REPRESENTATIVE_BATCH and other symbolic
    dims at REPRESENTATIVE_DIM. None when an input has unknown rank."""
    given = {k: tuple(int(d) for d in v) for k, v in (shapes or {}).items()}
    names = [t.name for t in graph.inputs]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ConversionError(f"shapes name inputs {unknown}, the model's inputs are {sorted(names)}")
    out, defaulted = {}, []
    for t in graph.inputs:
        if t.name in given:
            dims = given[t.name]
            if t.shape is not None and (len(dims) != len(t.shape) or any(
                    isinstance(d, int) and d > 0 and d != g for d, g in zip(t.shape, dims))):
                raise ConversionError(f"shape {list(dims)} does not fit input {t.name!r} with dims "
                                      f"{[d if isinstance(d, int) and d > 0 else (d or '?') for d in t.shape]}")
            out[t.name] = dims
            continue
        if t.shape is None:
            return None, f"input {t.name!r} has unknown rank"
        dims = []
        for i, d in enumerate(t.shape):
            if isinstance(d, int) and d > 0:
                dims.append(d)
            else:
                dims.append(REPRESENTATIVE_BATCH if i == 0 else REPRESENTATIVE_DIM)
                label = d if isinstance(d, str) and d else f"{t.name}[{i}]"
                defaulted.append(f"{label}={dims[-1]}")
        out[t.name] = tuple(dims)
    how = ", ".join(f"{k} {list(v)}" for k, v in out.items())
    if defaulted:
        how += f" (symbolic {', '.join(dict.fromkeys(defaulted))} by default; the spec's shapes set others)"
    return out, how


def representative_inputs(graph: Graph, shapes: dict | None = None,
                          seed: int = REPRESENTATIVE_SEED) -> tuple[dict[str, np.ndarray] | None, str]:
    """Seeded random inputs at representative_shapes(graph, shapes): normal
    floats, and 0/1 for integer and bool inputs (valid ids, masks and flags
    for every table). Returns (feeds or None, the shapes and how chosen)."""
    concrete, how = representative_shapes(graph, shapes)
    if concrete is None:
        return None, how
    rng = np.random.default_rng(seed)
    feeds = {}
    for t in graph.inputs:
        dt = np.dtype(t.dtype)
        shape = concrete[t.name]
        feeds[t.name] = (rng.standard_normal(shape).astype(dt) if dt.kind in "fc"
                         else rng.integers(0, 2, shape).astype(dt))
    return feeds, how


def weights_bytes(graph: Graph) -> int:
    total = sum(aie_format._align(a.nbytes) for a in graph.initializers.values())
    for node in graph.nodes:
        for v in node.attrs.values():
            if isinstance(v, Graph):
                total += weights_bytes(v)
    return total


def _run_inputs(src, graph: Graph, opts: "PrecisionOptions") -> tuple[dict[str, np.ndarray], str]:
    """The inputs the model is executed (and auto's candidates timed) at, and
    how they were chosen: the first sample, else representative_inputs."""
    if opts.sample is not None:
        feeds = load_calibration(opts.sample, graph.inputs).batches[0]
        return feeds, ", ".join(f"{k} {list(v.shape)}" for k, v in feeds.items()) + " (the first sample)"
    feeds, how = representative_inputs(graph, opts.shapes)
    if feeds is None:
        raise ConversionError(f"cannot execute the model to check it runs: {how}", where=str(src),
                              hint="give the spec's shapes (or --sample) for it")
    return feeds, how


def prove_runs(src, graph: Graph, extra: dict, opts: "PrecisionOptions", say) -> list[dict]:
    """Plan and execute the converted graph once on representative inputs
    (the first sample when there is one, else representative_inputs at the
    spec's shapes): a model that cannot run fails conversion here with its
    error. Returns the planned shape and its arena, for the file's meta."""
    feeds, how = _run_inputs(src, graph, opts)
    say(f"executing once at {how}")
    loaded = aie_format.parse(aie_format.serialize(graph, extra), str(src))
    try:
        session = InferenceSession(src, threads=opts.threads, loaded=loaded)
        session.run(None, feeds)
    except EngineError as exc:
        hint = None if opts.sample is not None else ("it ran on seeded random inputs at these shapes: give the spec's "
                                                      "sample (--sample) or shapes to execute it on meaningful ones")
        raise ConversionError(f"the converted model does not run at {how}: {exc}", where=str(src), hint=hint) from None
    [plan] = session.plans()
    return [{"inputs": {k: list(v.shape) for k, v in feeds.items()}, "arena_bytes": int(plan.arena_bytes),
             "how": how}]


def plan_max_shapes(graph: Graph, max_shapes: dict | None) -> list[dict]:
    """Plan the spec's max_shapes, so the recorded arena peak is theirs."""
    if not max_shapes:
        return []
    names = {t.name for t in graph.inputs}
    if set(max_shapes) != names:
        raise ConversionError(f"max_shapes name inputs {sorted(max_shapes)}, the model's inputs are {sorted(names)}")
    for t in graph.inputs:
        given = list(max_shapes[t.name])
        if t.shape is not None and (len(given) != len(t.shape) or any(
                isinstance(d, int) and d > 0 and d != g for d, g in zip(t.shape, given))):
            raise ConversionError(f"max_shapes: {given} does not fit input {t.name!r} with dims {list(t.shape)}")
    feeds = {t.name: np.zeros(max_shapes[t.name], t.dtype) for t in graph.inputs}
    try:
        plan = build_plan_for_graph(graph, feeds, nthreads=1)
    except NeedsValue as need:
        raise ConversionError(f"max_shapes: input {need.name!r} decides shapes by its values; "
                              "the arena peak cannot be planned from shapes alone") from None
    return [{"inputs": {k: list(v) for k, v in max_shapes.items()}, "arena_bytes": int(plan.arena_bytes)}]


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
    shapes, _ = representative_shapes(graph, opts.shapes)
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


def _int8(src, fp32: Graph, opts: PrecisionOptions, say, notes: list[str], *, limits: bool = True):
    """Quantise with engine.quantize and fuse onto the int8 kernels. With
    limits the quantiser refuses past them (precision int8); auto passes
    limits=False and judges the returned error itself."""
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
                               QuantizeOptions(max_rel_err=opts.max_rel_err if limits else None,
                                               min_top1_agreement=opts.min_top1_agreement if limits else None,
                                               threads=opts.threads),
                               progress=say)
        if opts.sample is not None:
            notes.append(f"int8 calibrated and compared on {result.samples} samples from {result.calibration}")
        notes.extend(result.notes)
        graph, passes = _converted(quantised, "fp32", say)
    if precision_of(graph) != "int8":
        raise ConversionError("int8: the quantised model runs no int8 kernel (no Conv/MatMul/Gemm fused)",
                              where=str(src), hint="use precision fp32 or bf16")
    return graph, passes, "int8", result.accuracy


def _bf16(src, fp32: Graph, opts: PrecisionOptions, say, notes: list[str]):
    """The bf16 graph, its passes and its error against fp32; None when no
    node computes in bf16."""
    bf16, passes16 = _converted(src, "bf16", say)
    if precision_of(bf16) == "fp32":
        return None
    say("measuring bf16 against fp32")
    return bf16, passes16, _measure(fp32, bf16, _samples(fp32, opts, notes), opts.threads)


def _measured(acc: AccuracyReport) -> str:
    return (f"(measured on {acc.samples} samples: max abs {acc.max_abs_err:.3e}, max rel {acc.max_rel_err:.3e}, "
            f"min cosine {acc.cosine:.6f}"
            + (f", top-1 agreement {acc.top1_agreement:.4f}" if acc.top1_agreement is not None else "") + ")")


def _auto_candidates(has_samples: bool) -> tuple[list[str], list[str]]:
    """auto's candidates at the selected level (fp32 always last), and why
    each other precision is not one."""
    lvl, out, why = level(), [], []
    if lvl not in INT8_LEVELS:
        why.append(f"int8 skipped: level {lvl} has no int8 dot-product hardware (needs {' or '.join(INT8_LEVELS)})")
    elif not has_samples:
        why.append("int8 skipped: no calibration samples (give --sample / the spec's sample); "
                   "auto does not quantise on random inputs")
    else:
        out.append("int8")
    if lvl in BF16_LEVELS:
        out.append("bf16")
    else:
        why.append(f"bf16 skipped: level {lvl} has no bf16 hardware (needs {' or '.join(BF16_LEVELS)}); "
                   "bf16 would run on the portable path, slower than fp32")
    return out + ["fp32"], why


def auto_decide(ms: dict[str, float], tie: float = AUTO_TIE) -> tuple[str, list[str]]:
    """auto's choice among the candidates within the limits, from their
    measured median milliseconds, and why each other one was passed over.
    The fastest wins, except that the most exact precision (EXACTNESS order)
    within `tie` of the fastest is taken instead: one run to the next differs
    by that much, and exactness does not."""
    if not ms or "fp32" not in ms:
        raise ValueError(f"auto_decide needs fp32's timing among the candidates, got {sorted(ms)}")
    fastest = min(ms, key=lambda p: (ms[p], EXACTNESS.index(p)))
    bound = ms[fastest] * (1 + tie)
    chosen = next(p for p in EXACTNESS if p in ms and ms[p] <= bound)
    why = []
    for p in EXACTNESS:
        if p not in ms or p == chosen:
            continue
        if ms[p] > bound:
            why.append(f"{p} passed over: {ms[p]:.3f} ms, slower than {chosen}'s {ms[chosen]:.3f} ms")
        else:
            why.append(f"{p} passed over: {ms[p]:.3f} ms is within {tie:.0%} of the fastest "
                       f"({fastest} {ms[fastest]:.3f} ms) and {chosen} ({ms[chosen]:.3f} ms) is more exact")
    return chosen, why


def time_ms(src, graph: Graph, feeds: dict[str, np.ndarray], threads: int) -> tuple[float, int]:
    """The median wall milliseconds of one run of `graph` on `feeds` after a
    warm run, and how many runs it is the median of (see AUTO_TIME_S)."""
    session = InferenceSession(src, threads=threads, loaded=aie_format.parse(aie_format.serialize(graph, {}), str(src)))
    session.run(None, feeds)
    times: list[float] = []
    t_end = time.perf_counter() + AUTO_TIME_S
    while len(times) < AUTO_MIN_RUNS or (len(times) < AUTO_MAX_RUNS and time.perf_counter() < t_end):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times)), len(times)


def _auto(src, fp32: Graph, passes: list[str], opts: PrecisionOptions, say, notes: list[str]):
    """The fastest candidate whose measured error is within the limits (ties
    as auto_decide says), each timed on the representative input; each one
    passed over is noted (and said) with the reason and the numbers."""
    limit = opts.max_rel_err
    if limit is None and opts.min_top1_agreement is None:
        limit = AUTO_MAX_REL_ERR
    candidates, rejected = _auto_candidates(opts.sample is not None)
    for why in rejected:
        say(f"auto: {why}")
    feeds, how = _run_inputs(src, fp32, opts)
    within: dict[str, tuple] = {"fp32": (fp32, passes, None, [])}
    for precision in candidates[:-1]:
        mine: list[str] = []  # what it was compared on: kept only for the one chosen
        try:
            if precision == "int8":
                graph, got_passes, _, acc = _int8(src, fp32, opts, say, mine, limits=False)
            else:
                got = _bf16(src, fp32, opts, say, mine)
                if got is None:
                    rejected.append("bf16 skipped: no node can compute in bf16 "
                                    "(no MatMul, Gemm or Conv with constant weights)")
                    say(f"auto: {rejected[-1]}")
                    continue
                graph, got_passes, acc = got
        except ConversionError as exc:  # e.g. nothing to quantise: the next candidate
            rejected.append(f"{precision} refused: {exc}")
            say(f"auto: {rejected[-1]}")
            continue
        problems = limit_problems(acc, limit, opts.min_top1_agreement)
        if problems:
            rejected.append(f"{precision} refused: " + "; ".join(problems) + " " + _measured(acc))
            say(f"auto: {rejected[-1]}")
            continue
        within[precision] = (graph, got_passes, acc, mine)
    if len(within) == 1:  # nothing to time fp32 against
        notes.extend(f"auto: {why}" for why in rejected)
        notes.append(f"auto chose fp32: no other precision on level {level()} is within the limit")
        return fp32, passes, "fp32", None
    ms, runs = {}, {}
    for precision, (graph, *_rest) in within.items():
        say(f"auto: timing {precision} at {how}")
        ms[precision], runs[precision] = time_ms(src, graph, feeds, opts.threads)
    chosen, passed_over = auto_decide(ms)
    timed = (f"auto timed at {how}, {opts.threads} thread{'s' if opts.threads != 1 else ''} "
             "(wall ms, median of warm runs): "
             + ", ".join(f"{p} {ms[p]:.3f} ({runs[p]} runs)" for p in EXACTNESS if p in ms))
    say(timed)
    graph, got_passes, acc, mine = within[chosen]
    notes.extend([f"auto: {why}" for why in rejected] + mine + [timed] + [f"auto: {why}" for why in passed_over])
    notes.append(f"auto chose {chosen}: the fastest within the limit"
                 + (f", or within {AUTO_TIE:.0%} of it and more exact" if chosen != min(ms, key=ms.get) else "")
                 + (f" (max rel err {acc.max_rel_err:.3e} <= {limit if limit is not None else 'none'}"
                    + (f", top-1 {acc.top1_agreement:.4f} >= {opts.min_top1_agreement}"
                       if opts.min_top1_agreement is not None and acc.top1_agreement is not None else "") + ")"
                    if acc is not None else " (exact)"))
    return graph, got_passes, chosen, acc


def _choose(src, opts: PrecisionOptions, say, notes: list[str]) -> tuple[Graph, list[str], str, AccuracyReport | None]:
    """The graph to write, its passes, its precision and the measured error."""
    if opts.precision not in PRECISION_CHOICES:
        raise ConversionError(f"precision {opts.precision!r} is not one of {', '.join(PRECISION_CHOICES)}")
    fp32, passes = _converted(src, "fp32", say)
    if opts.precision == "fp32":
        return fp32, passes, "fp32", None
    if opts.precision == "int8":
        return _int8(src, fp32, opts, say, notes)
    if opts.precision == "auto":
        return _auto(src, fp32, passes, opts, say, notes)
    got = _bf16(src, fp32, opts, say, notes)
    if got is None:
        notes.append("fp32: no node can compute in bf16 (no MatMul, Gemm or Conv with constant weights)")
        return fp32, passes, "fp32", None
    bf16, passes16, acc = got
    problems = limit_problems(acc, opts.max_rel_err, opts.min_top1_agreement)
    if not problems:
        return bf16, passes16, "bf16", acc
    raise ConversionError("bf16 model refused, nothing written: " + "; ".join(problems) + " " + _measured(acc),
                          where=str(src), hint="use precision fp32 or auto, or a looser limit")


def convert_file(src: str | Path, dst: str | Path, *, progress: Callable[[str], None] | None = None,
                 precision: PrecisionOptions | None = None) -> ConversionSummary:
    say = progress or (lambda msg: None)
    opts = precision or PrecisionOptions()
    t0 = time.perf_counter()
    notes: list[str] = []
    graph, passes, chosen, acc = _choose(src, opts, say, notes)
    extra = {"passes": passes, "precision": chosen}
    if acc is not None:
        extra["accuracy"] = acc.as_json()
    planned = prove_runs(src, graph, extra, opts, say)
    if opts.max_shapes:
        say("planning max_shapes")
    extra["planned"] = planned = planned + plan_max_shapes(graph, opts.max_shapes)
    say(f"writing {dst}")
    size = aie_format.write(dst, graph, extra)
    return ConversionSummary(
        source=str(src), destination=str(dst), op_counts=dict(Counter(n.op for n in graph.nodes)),
        weights_bytes=weights_bytes(graph), arena_bytes=max((p["arena_bytes"] for p in planned), default=0),
        planned_shapes=planned, passes=passes, seconds=time.perf_counter() - t0, file_bytes=size,
        precision=chosen, accuracy=acc, notes=notes)
