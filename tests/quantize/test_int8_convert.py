"""`precision: int8` / `ai-engine convert --precision int8`: our own quantiser
(engine.quantize) on the model's samples, then the QDQ fusion onto the int8
kernels; the accuracy contract as for bf16 (a limit exceeded fails with the
numbers and writes nothing)."""

from __future__ import annotations

import numpy as np

from engine.convert import PrecisionOptions, convert_file
from engine.session import InferenceSession
from tests.quantize.test_bf16_models import _cli


def test_digits_in_int8_keeps_its_heldout_accuracy_within_half_a_point(zoo, tmp_path):
    from models import digits

    src = zoo("digits")
    summary = convert_file(src, tmp_path / "digits.aie",
                           precision=PrecisionOptions("int8", sample=src.with_name("digits.sample.npy")))
    assert summary.precision == "int8" and summary.accuracy is not None
    assert any("int8 calibrated and compared on 10 samples" in n for n in summary.notes), summary.notes
    ours = InferenceSession(tmp_path / "digits.aie", threads=1)
    assert ours.precision == "int8" and "gemm_u8s8" in ours.kernel_paths, ours.kernel_paths
    x, y = digits.heldout_set()
    fp32 = InferenceSession(src, threads=1).run(None, {"image": x.astype(np.float32)})[0].argmax(1)
    int8 = ours.run(None, {"image": x.astype(np.float32)})[0].argmax(1)
    acc32, acc8 = float((fp32 == y).mean()), float((int8 == y).mean())
    print(f"\ndigits held-out accuracy: fp32 {acc32:.4f}, int8 {acc8:.4f} ({len(y)} samples); "
          + "; ".join(line.strip() for line in summary.accuracy.lines()[1:]))
    assert acc8 >= acc32 - 0.005, (acc32, acc8)


def test_int8_over_its_limit_refuses_with_the_numbers_and_writes_nothing(zoo, tmp_path):
    src = zoo("digits")
    dst = tmp_path / "out.aie"
    proc = _cli("convert", src, "-o", dst, "--precision", "int8", "--sample", src.with_name("digits.sample.npy"),
                "--max-rel-err", "1e-9", "-q")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "quantised model refused, nothing written: max rel error" in line and "> limit 1.000e-09" in line, line
    assert not dst.exists() and list(tmp_path.iterdir()) == []
