"""ISA selection: AIE_ISA forces a level, and an impossible request fails clearly."""

import json
import os
import subprocess
import sys

import pytest

from engine import kernels

# The vector ISA of each level's fp32 kernels, and the micro-kernels its
# bf16/int8 GEMMs run (kernels/core/kernel_table.c).
LEVEL_KERNELS = {
    "scalar": ("scalar", "portable_bf16_32x32", "scalar_s8_32x32"),
    "avx2": ("avx2", "portable_bf16_32x32", "avx2_s8_32x32"),
    "avx512": ("avx512", "portable_bf16_32x32", "avx2_s8_32x32"),
    "avx_vnni": ("avx2", "portable_bf16_32x32", "avx_vnni_s8_32x32"),
    "avx512_vnni": ("avx512", "portable_bf16_32x32", "avx512_vnni_s8_32x32"),
    "avx512_bf16": ("avx512", "avx512_bf16_32x32", "avx512_vnni_s8_32x32"),
    "amx": ("avx512", "amx_bf16_32x32", "amx_s8_32x32"),
}


def _isa_in_child(value: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, AIE_ISA=value)
    return subprocess.run([sys.executable, "-m", "engine.cli", "isa", *args], env=env, capture_output=True, text=True)


def test_default_selects_best():
    assert kernels.isa() == kernels.best_isa()
    assert kernels.level() == kernels.best_level()


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_forced_isa(isa):
    order = ["scalar", "avx2", "avx512"]
    proc = _isa_in_child(isa)
    if order.index(isa) <= order.index(kernels.best_isa()):
        assert proc.returncode == 0, proc.stderr
        assert f"selected: {isa}" in proc.stdout
    else:
        assert proc.returncode == 1
        assert f"AIE_ISA={isa}: not supported by this CPU/OS" in proc.stderr


@pytest.mark.parametrize("level", kernels.LEVELS)
def test_forced_level_selects_its_kernels(level):
    proc = _isa_in_child(level, "--json")
    why = kernels.level_unsupported(level)
    if why is not None:
        assert proc.returncode == 1
        assert f"AIE_ISA={level}: not supported by this CPU/OS ({why}); supported: scalar" in proc.stderr
        pytest.skip(f"level {level} unavailable on this host ({why}); checked that forcing it fails clearly")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert (info["selected"], info["gemm_bf16"], info["gemm_int8"]) == LEVEL_KERNELS[level]
    assert info["level"] == level and info["best_level"] == kernels.best_level()


def test_amx_status_is_reported():
    info = json.loads(_isa_in_child("auto", "--json").stdout)
    why = kernels.level_unsupported("amx")
    assert info["amx"] == (why or "available")
    if why is None:
        assert info["best_level"] == "amx"


def test_unknown_isa_is_a_clear_error():
    proc = _isa_in_child("sse9")
    assert proc.returncode == 1
    assert ("AIE_ISA=sse9: unknown ISA (expected scalar, avx2, avx_vnni, avx512, avx512_vnni, avx512_bf16, amx or "
            "auto)") in proc.stderr
