"""engine.kernels: a thin numpy layer over the C kernels, for tests and benchmarks.

Every function validates dtype, contiguity and shapes and raises ValueError
with a clear message instead of crashing; the GIL is released while a kernel
runs (ctypes does that for every foreign call).
"""

from engine.kernels._lib import library_path, lib


def isa() -> str:
    """The ISA path the kernels selected (scalar, avx2 or avx512)."""
    return lib().aie_isa_name(lib().aie_selected_isa()).decode()


def best_isa() -> str:
    """The best ISA this CPU and OS support, whatever AIE_ISA forces."""
    return lib().aie_isa_name(lib().aie_best_isa()).decode()


__all__ = ["isa", "best_isa", "library_path"]
