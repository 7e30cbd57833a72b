"""engine.kernels: a thin numpy layer over the C kernels, for tests and benchmarks.

Every function validates dtype, contiguity and shapes and raises ValueError
with a clear message instead of crashing; the GIL is released while a kernel
runs (ctypes does that for every foreign call).
"""

from __future__ import annotations

import contextlib

from engine.kernels._lib import check, lib, library_path

ISAS = ("scalar", "avx2", "avx512")


def isa() -> str:
    """The ISA path the kernels selected (scalar, avx2 or avx512)."""
    return lib().aie_isa_name(lib().aie_selected_isa()).decode()


def best_isa() -> str:
    """The best ISA this CPU and OS support, whatever AIE_ISA forces."""
    return lib().aie_isa_name(lib().aie_best_isa()).decode()


def available_isas() -> tuple[str, ...]:
    """Every path this CPU can run, scalar first (what tests iterate over)."""
    return ISAS[: ISAS.index(best_isa()) + 1]


def set_isa(name: str) -> None:
    """Force a path process-wide (tests and benchmarks). ValueError if unknown or unsupported."""
    if name not in ISAS:
        raise ValueError(f"unknown ISA {name!r}: expected one of {', '.join(ISAS)}")
    if name not in available_isas():
        raise ValueError(f"ISA {name!r} is not supported on this CPU (best: {best_isa()})")
    check(lib().aie_set_isa(ISAS.index(name)), f"set_isa({name})")


@contextlib.contextmanager
def use_isa(name: str):
    """Run a block on one ISA path, then restore the previous one."""
    previous = isa()
    set_isa(name)
    try:
        yield
    finally:
        set_isa(previous)


__all__ = ["isa", "best_isa", "available_isas", "set_isa", "use_isa", "library_path"]

# Op-family modules append their imports below (one line each).
from engine.kernels.conv import *  # noqa: E402,F401,F403  conv2d, conv_transpose2d, pooling
from engine.kernels.eltwise import *  # noqa: E402,F401,F403
from engine.kernels.reduce import *  # noqa: E402,F401,F403
from engine.kernels.norm import *  # noqa: E402,F401,F403
from engine.kernels.layout import *  # noqa: E402,F401,F403
from engine.kernels.gemm import PackedB, get_threads, matmul, matmul_packed, pack_b, set_threads  # noqa: E402,F401
