"""Fixtures of the kernel tests."""

from __future__ import annotations

import pytest

from engine import kernels


@pytest.fixture(params=kernels.LEVELS)
def level(request):
    """Run the test at each level (process-wide, restored after); skip with the reason where this host lacks it."""
    why = kernels.level_unsupported(request.param)
    if why is not None:
        pytest.skip(f"level {request.param} unavailable on this host: {why}")
    with kernels.use_level(request.param):
        yield request.param


@pytest.fixture(params=kernels.available_isas())
def isa(request):
    """Run the test with each ISA this host can run selected (process-wide, restored after)."""
    with kernels.use_isa(request.param):
        yield request.param

