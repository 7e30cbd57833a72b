"""The ONNX backend node test cases against the engine.

onnx.backend.test.case.node.collect_testcases(None) builds every case
(model, inputs, expected outputs) in memory. Each case must end in one of two
ways: outputs matching the expected ones within the case's tolerance, or a
clean ConversionError (subclass) raised at load or first run — never a wrong
answer and never any other exception. The pass count is printed and written
to build/reports/onnx-node-tests.txt.

The correct cases are pinned in onnx_node_suite_baseline.json: a case that
was correct and is no longer fails the test by name, so the count can only
grow. When it grows (or onnx is upgraded and renames cases), re-pin with

    .venv/bin/python -m tests.runtime.test_onnx_node_suite --update-baseline
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import pytest

from engine.errors import ConversionError
from engine.session import InferenceSession

REPORT = Path(__file__).resolve().parents[2] / "build" / "reports" / "onnx-node-tests.txt"
BASELINE = Path(__file__).with_name("onnx_node_suite_baseline.json")
UPDATE = "python -m tests.runtime.test_onnx_node_suite --update-baseline"


def _collect():
    from onnx.backend.test.case.node import collect_testcases

    return collect_testcases(None)


def _as_array(v) -> np.ndarray:
    # Some cases ship their data as TensorProto instead of numpy arrays.
    if isinstance(v, onnx.TensorProto):
        return onnx.numpy_helper.to_array(v)
    return np.asarray(v)


def _check_case(case, tmpdir: Path) -> str:
    """'pass' or 'unsupported: ...'; raises AssertionError on a wrong answer."""
    path = tmpdir / f"{case.name}.onnx"
    onnx.save(case.model, str(path))
    names = [i.name for i in case.model.graph.input if i.name not in {t.name for t in case.model.graph.initializer}]
    for inputs, expected in case.data_sets:
        try:
            sess = InferenceSession(path, threads=1)
            feeds = {n: _as_array(v) for n, v in zip(names, inputs)}
            outs = sess.run(None, feeds)
        except ConversionError as exc:
            return f"unsupported: {exc}"
        assert len(outs) == len(expected), f"{case.name}: {len(outs)} outputs, expected {len(expected)}"
        for k, (got, want) in enumerate(zip(outs, expected)):
            want = _as_array(want)
            assert got.shape == want.shape, f"{case.name} output {k}: shape {got.shape}, expected {want.shape}"
            assert got.dtype == want.dtype, f"{case.name} output {k}: dtype {got.dtype}, expected {want.dtype}"
            if want.dtype.kind in "fc":
                np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol, equal_nan=True,
                                           err_msg=f"{case.name} output {k}")
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"{case.name} output {k}")
    return "pass"


def op_types(graph: onnx.GraphProto) -> set[str]:
    """Every op type a graph runs, its subgraphs' included."""
    ops = set()
    for node in graph.node:
        ops.add(node.op_type)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                ops |= op_types(sub)
    return ops


def run_suite() -> tuple[dict[str, set[str]], int, list[str], int, float]:
    """({correct case: its op types}, unsupported count, wrong/crashed lines, case count, seconds)."""
    cases = _collect()
    t0 = time.perf_counter()
    passed, unsupported, wrong = {}, 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            try:
                verdict = _check_case(case, Path(tmp))
            except AssertionError as exc:
                wrong.append(f"WRONG {case.name}: {str(exc)[:300]}")
                continue
            except Exception as exc:  # noqa: BLE001 - the rule under test
                wrong.append(f"CRASH {case.name}: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            if verdict == "pass":
                passed[case.name] = op_types(case.model.graph)
            else:
                unsupported += 1
    return passed, unsupported, wrong, len(cases), time.perf_counter() - t0


def load_baseline() -> dict:
    return json.loads(BASELINE.read_text())


def write_baseline(passed: dict[str, set[str]]) -> None:
    """The correct cases, and the op types they run (tests/runtime/test_op_coverage.py counts those ops as tested)."""
    ops = sorted(set().union(*passed.values()))
    BASELINE.write_text(json.dumps({"onnx": onnx.__version__, "correct": len(passed), "ops": ops,
                                    "cases": sorted(passed)}, indent=1) + "\n")


def test_every_node_case_is_correct_or_cleanly_unsupported(capsys):
    passed, unsupported, wrong, total, elapsed = run_suite()
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(f"onnx backend node tests: {len(passed)} passed, {unsupported} unsupported (ConversionError), "
                      f"{len(wrong)} wrong or crashed, of {total} cases ({elapsed:.0f} s)\n"
                      + "".join(w + "\n" for w in wrong))
    baseline = load_baseline()
    lost = sorted(set(baseline["cases"]) - set(passed))
    gained = sorted(set(passed) - set(baseline["cases"]))
    with capsys.disabled():
        print(f"\nonnx node tests: {len(passed)} passed (baseline {baseline['correct']}), {unsupported} unsupported, "
              f"{len(wrong)} wrong/crashed of {total} in {elapsed:.0f} s (report: {REPORT})")
        if gained and not lost:
            print(f"{len(gained)} cases correct beyond the baseline; pin them: {UPDATE}")
    assert not wrong, f"{len(wrong)} cases gave a wrong answer or crashed:\n" + "\n".join(wrong[:40])
    assert not lost, (f"{len(lost)} cases of the baseline are no longer correct (baseline onnx {baseline['onnx']}, "
                      f"now {onnx.__version__}; re-pin with {UPDATE} only if that is intended): " + ", ".join(lost))


def test_baseline_is_consistent():
    baseline = load_baseline()
    assert baseline["ops"] == sorted(set(baseline["ops"])), f"{BASELINE.name}: ops not sorted and unique"
    assert baseline["correct"] == len(baseline["cases"]) == len(set(baseline["cases"])), \
        f"{BASELINE.name}: count {baseline['correct']} != {len(baseline['cases'])} case names; re-pin with {UPDATE}"


if __name__ == "__main__":
    if sys.argv[1:] != ["--update-baseline"]:
        sys.exit(f"usage: {UPDATE}")
    names, _, bad, _, _ = run_suite()
    if bad:
        sys.exit(f"not pinning: {len(bad)} cases wrong or crashed, first: {bad[0]}")
    write_baseline(names)
    print(f"{BASELINE}: {len(names)} correct cases pinned (onnx {onnx.__version__})")
