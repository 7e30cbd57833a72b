"""`precision: auto`: the fastest precision the level runs on hardware whose
measured error is within the limits (int8 with samples on a VNNI/AMX level,
then bf16 on AMX/AVX-512 BF16, then fp32), saying why each faster one was
passed over."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from engine.convert import BF16_LEVELS, INT8_LEVELS, PrecisionOptions, convert_file
from engine.kernels.levels import level, level_unsupported
from engine.session import InferenceSession
from tests.quantize.test_bf16_models import _cli


def _needs(lvl: str) -> None:
    why = level_unsupported(lvl)
    if why:
        pytest.skip(f"level {lvl} unavailable on this host: {why}")


def test_auto_with_samples_picks_int8_on_a_vnni_or_amx_level_and_keeps_heldout_accuracy(zoo, tmp_path):
    from models import digits

    if level() not in INT8_LEVELS:
        pytest.skip(f"level {level()} has no int8 dot-product hardware (auto picks int8 on {', '.join(INT8_LEVELS)})")
    src = zoo("digits")
    summary = convert_file(src, tmp_path / "auto.aie",
                           precision=PrecisionOptions("auto", sample=src.with_name("digits.sample.npy")))
    assert summary.precision == "int8", summary.notes
    assert any(n.startswith(f"auto chose int8: level {level()} has int8 hardware") for n in summary.notes), \
        summary.notes
    ours = InferenceSession(tmp_path / "auto.aie", threads=1)
    assert ours.precision == "int8" and "gemm_u8s8" in ours.kernel_paths, ours.kernel_paths
    x, y = digits.heldout_set()
    x = x.astype(np.float32)
    acc32 = float((InferenceSession(src, threads=1).run(None, {"image": x})[0].argmax(1) == y).mean())
    acc8 = float((ours.run(None, {"image": x})[0].argmax(1) == y).mean())
    print(f"\ndigits auto -> int8: held-out accuracy fp32 {acc32:.4f}, int8 {acc8:.4f} ({len(y)} samples)")
    assert acc8 >= acc32 - 0.005, (acc32, acc8)


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
    assert "auto chose fp32: no faster precision on level" in proc.stdout
    assert InferenceSession(dst, threads=1).precision == "fp32"


def test_auto_without_samples_does_not_quantise_and_says_so(zoo, tmp_path):
    _needs("avx512_bf16")
    src = zoo("digits")
    proc = _cli("convert", src, "-o", tmp_path / "auto.aie", "--precision", "auto", isa="avx512_bf16")
    assert proc.returncode == 0, proc.stderr
    assert "auto: int8 skipped: no calibration samples" in proc.stdout, proc.stdout
    assert "precision:      bf16" in proc.stdout and "auto chose bf16: level avx512_bf16" in proc.stdout


def test_auto_at_avx_vnni_picks_int8_which_runs_there(zoo, tmp_path):
    """AIE_ISA=avx_vnni: no bf16 hardware but vpdpbusd on ymm: int8, and the
    written model runs that level's int8 kernel. (AIE_ISA=avx2 -> fp32:
    test_bf16_models.test_auto_under_avx2_picks_fp32_and_a_bf16_file_runs_there.)"""
    lvl = "avx_vnni"
    _needs(lvl)
    src = zoo("digits")
    dst = tmp_path / "auto.aie"
    proc = _cli("convert", src, "-o", dst, "--precision", "auto", "--sample", src.with_name("digits.sample.npy"),
                isa=lvl)
    assert proc.returncode == 0, proc.stderr
    assert "precision:      int8" in proc.stdout, proc.stdout
    assert f"auto: bf16 skipped: level {lvl} has no bf16 hardware" in proc.stdout
    script = ("import sys; from engine import InferenceSession; s = InferenceSession(sys.argv[1], threads=1); "
              "print(s.precision, s.kernel_paths['gemm_u8s8'])")
    run = subprocess.run([sys.executable, "-c", script, dst], capture_output=True, text=True,
                         env={**os.environ, "AIE_ISA": lvl}, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["int8", f"{lvl}_s8_32x32"], run.stdout
