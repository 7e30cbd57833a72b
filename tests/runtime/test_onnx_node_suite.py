"""The ONNX backend node test cases against the engine.

onnx.backend.test.case.node.collect_testcases(None) builds every case
(model, inputs, expected outputs) in memory. Each case must end in one of two
ways: outputs matching the expected ones within the case's tolerance, or a
clean ConversionError (subclass) raised at load or first run — never a wrong
answer and never any other exception. The pass count is printed and written
to build/reports/onnx-node-tests.txt.
"""

from __future__ import annotations

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


def test_every_node_case_is_correct_or_cleanly_unsupported(capsys):
    cases = _collect()
    t0 = time.perf_counter()
    passed, unsupported, wrong = 0, 0, []
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
                passed += 1
            else:
                unsupported += 1
    elapsed = time.perf_counter() - t0
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(f"onnx backend node tests: {passed} passed, {unsupported} unsupported (ConversionError), "
                      f"{len(wrong)} wrong or crashed, of {len(cases)} cases ({elapsed:.0f} s)\n"
                      + "".join(w + "\n" for w in wrong))
    with capsys.disabled():
        print(f"\nonnx node tests: {passed} passed, {unsupported} unsupported, {len(wrong)} wrong/crashed "
              f"of {len(cases)} in {elapsed:.0f} s (report: {REPORT})")
    assert passed > 0
    assert not wrong, f"{len(wrong)} cases gave a wrong answer or crashed:\n" + "\n".join(wrong[:40])
