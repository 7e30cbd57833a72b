"""What the bf16 and int8 GEMM tests share (a module of its own: a module
named conftest is ambiguous on sys.path)."""

from __future__ import annotations

import pytest


def assert_refused(call, packed, message: str) -> None:
    """A low-precision GEMM entry point refuses bad arguments with a
    ValueError naming the problem (the packed B is the call's argument)."""
    with pytest.raises(ValueError) as exc:
        call(packed)
    assert message in str(exc.value)
