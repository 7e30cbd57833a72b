"""Every graph pass of the converter (engine.passes.DEFAULT_PASSES) has its
own test file here, tests/passes/test_<pass>.py, calling it directly: a new
pass without one fails by name."""

from __future__ import annotations

from pathlib import Path

from engine.passes import DEFAULT_PASSES


def test_every_pass_has_a_test_file():
    here = Path(__file__).parent
    missing = sorted({p.__name__ for p in DEFAULT_PASSES if not (here / f"test_{p.__name__}.py").exists()})
    assert not missing, f"graph passes without tests/passes/test_<pass>.py: {', '.join(missing)}"
