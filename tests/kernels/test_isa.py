"""ISA selection: AIE_ISA forces a path, and an impossible request fails clearly."""

import os
import subprocess
import sys

import pytest

from engine import kernels


def _isa_in_child(value: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, AIE_ISA=value)
    return subprocess.run([sys.executable, "-m", "engine.cli", "isa"], env=env, capture_output=True, text=True)


def test_default_selects_best():
    assert kernels.isa() == kernels.best_isa()


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_forced_isa(isa):
    order = ["scalar", "avx2", "avx512"]
    proc = _isa_in_child(isa)
    if order.index(isa) <= order.index(kernels.best_isa()):
        assert proc.returncode == 0, proc.stderr
        assert f"selected: {isa}" in proc.stdout
    else:
        assert proc.returncode == 1
        assert f"AIE_ISA={isa}: this CPU/OS supports at most" in proc.stderr


def test_unknown_isa_is_a_clear_error():
    proc = _isa_in_child("sse9")
    assert proc.returncode == 1
    assert "AIE_ISA=sse9: unknown ISA (expected scalar, avx2, avx512 or auto)" in proc.stderr
