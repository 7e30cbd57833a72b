"""`precision: auto`: of the precisions the level runs on hardware (int8
with samples on a VNNI/AMX level, bf16 on AMX/AVX-512 BF16, fp32) whose
measured error is within the limits, the fastest as timed on the
representative input, saying why each other one was passed over. The tests
do not depend on which is faster here: they check the choice is
auto_decide's on the printed timings, and auto_decide itself on given ones."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from engine.convert import AUTO_TIE, BF16_LEVELS, INT8_LEVELS, PrecisionOptions, auto_decide, convert_file
from engine.kernels.levels import level, level_unsupported
from engine.session import InferenceSession
from tests.quantize.test_bf16_models import _cli


def _needs(lvl: str) -> None:
    why = level_unsupported(lvl)
    if why:
        pytest.skip(f"level {lvl} unavailable on this host: {why}")


def _timings(text: str) -> dict[str, float]:
    """The candidates' printed timings: {precision: median ms}."""
    [line] = [x for x in text.splitlines() if "auto timed at" in x]
    return {p: float(ms) for p, ms in re.findall(r"(\w+) ([0-9.]+) \(\d+ runs\)", line.split("): ", 1)[1])}


def test_auto_decide_takes_the_fastest_or_the_most_exact_within_the_tie():
    assert auto_decide({"fp32": 10.0, "bf16": 5.0, "int8": 3.0})[0] == "int8"
    assert auto_decide({"fp32": 10.0, "bf16": 4.0, "int8": 6.0})[0] == "bf16"
    assert auto_decide({"fp32": 1.0, "bf16": 5.0})[0] == "fp32"
    # int8 is fastest but bf16 is within AUTO_TIE of it: the more exact one
    chosen, why = auto_decide({"fp32": 10.0, "bf16": 5.0, "int8": 5.0 / (1 + AUTO_TIE / 2)})
    assert chosen == "bf16"
    assert why == ["fp32 passed over: 10.000 ms, slower than bf16's 5.000 ms",
                   f"int8 passed over: 4.762 ms is within {AUTO_TIE:.0%} of the fastest (int8 4.762 ms) "
                   "and bf16 (5.000 ms) is more exact"]
    # just outside the tie: the fastest
    assert auto_decide({"fp32": 10.0, "bf16": 5.0, "int8": 5.0 / (1 + 2 * AUTO_TIE)})[0] == "int8"
    assert auto_decide({"fp32": 1.05, "bf16": 1.0, "int8": 1.0})[0] == "fp32"
    with pytest.raises(ValueError, match="needs fp32's timing"):
        auto_decide({"bf16": 1.0})


def test_auto_with_samples_times_each_candidate_and_keeps_heldout_accuracy(zoo, tmp_path):
    from models import digits

    src = zoo("digits")
    summary = convert_file(src, tmp_path / "auto.aie",
                           precision=PrecisionOptions("auto", sample=src.with_name("digits.sample.npy")))
    notes = "\n".join(summary.notes)
    # digits is within the default limit in int8 and bf16: every candidate the level has is timed
    candidates = {"fp32"} | ({"int8"} if level() in INT8_LEVELS else set()) \
        | ({"bf16"} if level() in BF16_LEVELS else set())
    if candidates == {"fp32"}:  # avx2 / avx512 without VNNI or BF16: nothing to time fp32 against
        chosen, ms = "fp32", {}
        assert summary.precision == "fp32" and "auto timed" not in notes, notes
        assert f"auto chose fp32: no other precision on level {level()} is within the limit" in summary.notes, notes
    else:
        ms = _timings(notes)
        assert set(ms) == candidates, notes
        chosen, why = auto_decide(ms)
        assert summary.precision == chosen, notes
        assert all(f"auto: {w}" in summary.notes for w in why), notes
        assert any(n.startswith(f"auto chose {chosen}: the fastest within the limit") for n in summary.notes), notes
    ours = InferenceSession(tmp_path / "auto.aie", threads=1)
    assert ours.precision == chosen
    x, y = digits.heldout_set()
    x = x.astype(np.float32)
    acc32 = float((InferenceSession(src, threads=1).run(None, {"image": x})[0].argmax(1) == y).mean())
    accx = float((ours.run(None, {"image": x})[0].argmax(1) == y).mean())
    print(f"\ndigits auto -> {chosen} ({ms}): held-out accuracy fp32 {acc32:.4f}, {chosen} {accx:.4f} ({len(y)} samples)")
    assert accx >= acc32 - 0.005, (acc32, accx)


def test_auto_past_a_tight_limit_falls_back_to_fp32_with_the_measured_numbers(zoo, tmp_path):
    src = zoo("digits")
    dst = tmp_path / "auto.aie"
    proc = _cli("convert", src, "-o", dst, "--precision", "auto", "--sample", src.with_name("digits.sample.npy"),
                "--max-rel-err", "1e-9")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "precision:      fp32" in proc.stdout, proc.stdout
    for lowp in ("int8", "bf16"):
        if (lowp == "int8" and level() in INT8_LEVELS) or (lowp == "bf16" and level() in BF16_LEVELS):
            [line] = [x for x in proc.stdout.splitlines() if f"auto: {lowp} refused: max rel error" in x]
            # in the summary and as progress, each with the measured numbers
            assert "> limit 1.000e-09 (measured on 10 samples: max abs" in line and "max rel" in line, line
            assert f"auto: {lowp} refused: max rel error" in proc.stderr
    assert "auto chose fp32: no other precision on level" in proc.stdout
    assert "auto timed" not in proc.stdout  # nothing to time fp32 against
    assert InferenceSession(dst, threads=1).precision == "fp32"


def test_auto_without_samples_does_not_quantise_and_says_so(zoo, tmp_path):
    _needs("avx512_bf16")
    src = zoo("digits")
    proc = _cli("convert", src, "-o", tmp_path / "auto.aie", "--precision", "auto", isa="avx512_bf16")
    assert proc.returncode == 0, proc.stderr
    assert "auto: int8 skipped: no calibration samples" in proc.stdout, proc.stdout
    ms = _timings(proc.stdout)
    assert set(ms) == {"fp32", "bf16"}, proc.stdout
    assert f"precision:      {auto_decide(ms)[0]}" in proc.stdout, proc.stdout


def test_auto_at_avx_vnni_times_int8_and_what_it_writes_runs_there(zoo, tmp_path):
    """AIE_ISA=avx_vnni: no bf16 hardware but vpdpbusd on ymm: int8 and fp32
    are timed, and the written model runs at that level (int8 on its int8
    kernel). (AIE_ISA=avx2 -> fp32, untimed:
    test_bf16_models.test_auto_under_avx2_picks_fp32_and_a_bf16_file_runs_there.)"""
    lvl = "avx_vnni"
    _needs(lvl)
    src = zoo("digits")
    dst = tmp_path / "auto.aie"
    proc = _cli("convert", src, "-o", dst, "--precision", "auto", "--sample", src.with_name("digits.sample.npy"),
                isa=lvl)
    assert proc.returncode == 0, proc.stderr
    ms = _timings(proc.stdout)
    assert set(ms) == {"fp32", "int8"}, proc.stdout
    chosen = auto_decide(ms)[0]
    assert f"precision:      {chosen}" in proc.stdout, proc.stdout
    assert f"auto: bf16 skipped: level {lvl} has no bf16 hardware" in proc.stdout
    script = ("import sys; from engine import InferenceSession; s = InferenceSession(sys.argv[1], threads=1); "
              "print(s.precision, s.kernel_paths.get('gemm_u8s8'))")
    run = subprocess.run([sys.executable, "-c", script, dst], capture_output=True, text=True,
                         env={**os.environ, "AIE_ISA": lvl}, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[0] == chosen, run.stdout
    if chosen == "int8":
        assert run.stdout.split()[1] == f"{lvl}_s8_32x32", run.stdout
