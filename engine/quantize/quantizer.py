"""quantize_file: calibrate, rewrite, measure, then (only if the error is
within the caller's limits) write. Activation ranges come from running the
fp32 model in ai-engine itself with the tensors to quantise added as outputs."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, shape_inference, version_converter

from engine.errors import ConversionError
from engine.onnx_import import import_model, load_model
from engine.quantize.accuracy import AccuracyReport, compare_outputs, limit_problems
from engine.quantize.calibration import Calibration, load_calibration
from engine.quantize.qdq import QUANTISABLE, Targets, find_targets, rewrite
from engine.session import InferenceSession

MIN_OPSET = 13          # per-channel DequantizeLinear (the axis attribute)
SAMPLE_CAP = 1 << 20    # values kept per tensor for percentile calibration


@dataclass
class QuantizeOptions:
    method: str = "minmax"               # or "percentile"
    percentile: float = 99.999           # of |values| kept for "percentile"
    max_rel_err: float | None = None     # refuse (write nothing) above this
    min_top1_agreement: float | None = None
    threads: int | None = None


@dataclass
class QuantizeResult:
    source: str
    destination: str
    calibration: str
    samples: int
    nodes: dict[str, int]
    activations: int
    weights: int
    weight_bytes_fp32: int
    weight_bytes_int8: int
    accuracy: AccuracyReport
    seconds: float
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        ops = ", ".join(f"{n} {op}" for op, n in sorted(self.nodes.items()))
        return [f"quantized {self.source} -> {self.destination} in {self.seconds:.2f} s",
                f"  calibration: {self.samples} samples from {self.calibration}",
                f"  quantized ops: {ops}; {self.activations} activation tensors (uint8, per tensor), "
                f"{self.weights} weights (int8, per channel)",
                f"  weights: {self.weight_bytes_fp32:,} bytes fp32 -> {self.weight_bytes_int8:,} bytes int8",
                *self.notes, *self.accuracy.lines()]


def _float_tensors(model: onnx.ModelProto) -> tuple[set[str], onnx.ModelProto]:
    """Names of the main graph's float32 tensors (shape inference fills
    value_info for intermediates), and the inferred model."""
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - an un-inferable graph: fall back to what the model declares
        inferred = model
    g = inferred.graph
    return {v.name for v in list(g.input) + list(g.value_info) + list(g.output)
            if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}, inferred


def _with_outputs(model: onnx.ModelProto, inferred: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """The model with `names` added as outputs (after its own, in order),
    typed as shape inference found them (float of unknown dimensions when it
    could not: the planner derives every shape itself)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    known = {v.name: v for v in inferred.graph.value_info}
    have = {o.name for o in out.graph.output} | {i.name for i in out.graph.input}
    for n in names:
        if n in have:
            continue
        vi = known.get(n)
        if vi is None or not vi.type.tensor_type.HasField("shape"):
            rank = len(vi.type.tensor_type.shape.dim) if vi is not None else 0
            vi = helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [None] * rank)
        out.graph.output.append(vi)
    return out


def _open(model: onnx.ModelProto, tmp: Path, name: str, threads: int | None) -> InferenceSession:
    path = tmp / f"{name}.onnx"
    onnx.save(model, str(path))
    return InferenceSession(path, threads=threads)


def _ranges(session: InferenceSession, cal: Calibration, names: list[str], opts: QuantizeOptions,
            fp32_outputs: int) -> tuple[dict[str, tuple[float, float]], list[list[np.ndarray]]]:
    """Per activation (min, max) over every calibration batch, and the
    model's own fp32 outputs per batch (the accuracy reference)."""
    out_names = [o.name for o in session.get_outputs()]
    lo = {n: np.inf for n in names}
    hi = {n: -np.inf for n in names}
    kept: dict[str, list[np.ndarray]] = {n: [] for n in names}
    rng = np.random.default_rng(0)
    reference = []
    for feeds in cal.batches:
        results = dict(zip(out_names, session.run(None, feeds)))
        results.update(feeds)
        reference.append([results[n] for n in out_names[:fp32_outputs]])
        for n in names:
            v = np.asarray(results[n], np.float32).ravel()
            if v.size == 0:
                continue
            if not np.isfinite(v).all():
                raise ConversionError(f"calibration gives non-finite values in tensor {n!r}",
                                      where=cal.source, hint="check the samples' range and preprocessing")
            lo[n], hi[n] = min(lo[n], float(v.min())), max(hi[n], float(v.max()))
            if opts.method == "percentile":
                take = SAMPLE_CAP // len(cal.batches) + 1
                kept[n].append(v if v.size <= take else rng.choice(v, take, replace=False))
    ranges = {}
    for n in names:
        if not np.isfinite(lo[n]):
            lo[n] = hi[n] = 0.0       # only empty tensors seen: any scale is exact
        if opts.method == "percentile" and kept[n]:
            v = np.concatenate(kept[n])
            ranges[n] = (float(np.percentile(v, 100.0 - opts.percentile)), float(np.percentile(v, opts.percentile)))
        else:
            ranges[n] = (lo[n], hi[n])
    return ranges, reference


def _upgrade(model: onnx.ModelProto, notes: list[str], where: str) -> onnx.ModelProto:
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or opset >= MIN_OPSET:
        return model
    try:
        upgraded = version_converter.convert_version(model, MIN_OPSET)
    except Exception as exc:  # noqa: BLE001 - the converter's failures are as varied as the models
        raise ConversionError(f"opset {opset} model could not be upgraded to opset {MIN_OPSET} "
                              f"(per-channel DequantizeLinear needs it): {exc}", where=where) from None
    notes.append(f"  model upgraded from opset {opset} to {MIN_OPSET} (per-channel DequantizeLinear)")
    return upgraded


def quantize_file(src: str | Path, calibration: str | Path, dst: str | Path, options: QuantizeOptions | None = None,
                  *, progress: Callable[[str], None] | None = None) -> QuantizeResult:
    opts = options or QuantizeOptions()
    if opts.method not in ("minmax", "percentile"):
        raise ConversionError(f"unknown calibration method {opts.method!r} (expected minmax or percentile)")
    if not 50.0 < opts.percentile <= 100.0:
        raise ConversionError(f"percentile {opts.percentile} out of range (expected 50 < p <= 100)")
    say = progress or (lambda msg: None)
    t0 = time.perf_counter()
    src, dst = Path(src), Path(dst)
    model = load_model(src)
    notes: list[str] = []
    model = _upgrade(model, notes, str(src))
    float_tensors, inferred = _float_tensors(model)
    targets: Targets = find_targets(model.graph, float_tensors)
    if not targets.nodes:
        raise ConversionError(f"no quantisable op ({', '.join(QUANTISABLE)}) with float inputs in the main graph: "
                              "nothing to quantise", where=str(src))
    graph = import_model(model, str(src))
    cal = load_calibration(calibration, graph.inputs)
    say(f"calibrating {len(targets.activations)} activation tensors on {cal.samples} samples ({opts.method})")
    with tempfile.TemporaryDirectory(prefix="aie-quantize-") as tmpdir:
        tmp = Path(tmpdir)
        session = _open(_with_outputs(model, inferred, targets.activations), tmp, "calibrate", opts.threads)
        ranges, reference = _ranges(session, cal, targets.activations, opts, len(model.graph.output))
        say("rewriting Conv/MatMul/Gemm with QuantizeLinear/DequantizeLinear")
        quantised = rewrite(model, targets, ranges)
        try:
            onnx.checker.check_model(quantised)
        except onnx.checker.ValidationError as exc:
            raise ConversionError(f"the quantised model does not pass the ONNX checker (a bug): {exc}",
                                  where=str(src)) from None
        say("measuring the quantised model against fp32")
        qsession = _open(quantised, tmp, "quantized", opts.threads)
        got = [qsession.run(None, feeds) for feeds in cal.batches]
    accuracy = compare_outputs(got, reference)
    _check_limits(accuracy, opts, str(src))
    _write_atomically(quantised, dst)
    inits = {i.name: i for i in model.graph.initializer}
    fp32_bytes = sum(int(np.prod(inits[w].dims)) * 4 for w in targets.weights)
    return QuantizeResult(source=str(src), destination=str(dst), calibration=cal.source, samples=cal.samples,
                          nodes=targets.nodes, activations=len(targets.activations), weights=len(targets.weights),
                          weight_bytes_fp32=fp32_bytes, weight_bytes_int8=fp32_bytes // 4, accuracy=accuracy,
                          seconds=time.perf_counter() - t0, notes=notes)


def _check_limits(acc: AccuracyReport, opts: QuantizeOptions, where: str) -> None:
    problems = limit_problems(acc, opts.max_rel_err, opts.min_top1_agreement)
    if problems:
        raise ConversionError("quantised model refused, nothing written: " + "; ".join(problems) +
                              f" (measured on {acc.samples} calibration samples: max abs {acc.max_abs_err:.3e}, "
                              f"min cosine {acc.cosine:.6f})", where=where,
                              hint="try --method percentile, more representative calibration samples, or a looser limit")


def _write_atomically(model: onnx.ModelProto, dst: Path) -> None:
    """Never a half-written file: write beside the destination, then rename."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", dir=dst.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(model.SerializeToString())
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
