"""CPU paths of the kernels: the ISA (scalar, avx2, avx512) and level (the
ISA plus the dot-product and matrix extensions) the library selected, which
this CPU supports, and forcing one process-wide (tests and benchmarks)."""

from __future__ import annotations

import contextlib
import ctypes

from engine.kernels._lib import check, lib

ISAS = ("scalar", "avx2", "avx512")
# Levels (aie_level, in its order): the vector ISA plus the dot-product and
# matrix extensions the bf16/int8 GEMMs use; what AIE_ISA names.
LEVELS = ("scalar", "avx2", "avx512", "avx_vnni", "avx512_vnni", "avx512_bf16", "amx")


def isa() -> str:
    """The ISA path the kernels selected (scalar, avx2 or avx512)."""
    return lib().aie_isa_name(lib().aie_selected_isa()).decode()


def best_isa() -> str:
    """The best ISA this CPU and OS support, whatever AIE_ISA forces."""
    return lib().aie_isa_name(lib().aie_best_isa()).decode()


def available_isas() -> tuple[str, ...]:
    """Every path this CPU can run, scalar first (what tests iterate over)."""
    return ISAS[: ISAS.index(best_isa()) + 1]


def level() -> str:
    """The selected level (what AIE_ISA forced, or the best one): e.g. amx, avx512_vnni, avx2."""
    return lib().aie_level_name(lib().aie_selected_level()).decode()


def best_level() -> str:
    """The level aie_init picks without AIE_ISA."""
    return lib().aie_level_name(lib().aie_best_level()).decode()


def level_unsupported(name: str) -> str | None:
    """None when this CPU and OS run level `name`, else what is missing (e.g. why AMX was refused)."""
    if name not in LEVELS:
        raise ValueError(f"unknown level {name!r}: expected one of {', '.join(LEVELS)}")
    why = ctypes.c_char_p()
    ok = lib().aie_level_supported(LEVELS.index(name), ctypes.byref(why))
    return None if ok else why.value.decode()


def available_levels() -> tuple[str, ...]:
    """Every level this CPU can run, in aie_level order (what low-precision tests iterate over)."""
    return tuple(name for name in LEVELS if level_unsupported(name) is None)


def set_level(name: str) -> None:
    """Force a level process-wide (tests and benchmarks). ValueError if unknown or unsupported."""
    why = level_unsupported(name)
    if why is not None:
        raise ValueError(f"ISA {name!r} is not supported on this CPU/OS: {why}")
    check(lib().aie_set_level(LEVELS.index(name)), f"set_level({name})")


@contextlib.contextmanager
def _forced(setter, name: str):
    """Run a block with setter(name) in force, then restore the previous level
    (with its extensions)."""
    previous = level()
    setter(name)
    try:
        yield
    finally:
        set_level(previous)


def use_level(name: str):
    """Run a block at one level, then restore the previous one."""
    return _forced(set_level, name)


def set_isa(name: str) -> None:
    """Force a path process-wide (tests and benchmarks). ValueError if unknown or unsupported."""
    if name not in ISAS:
        raise ValueError(f"unknown ISA {name!r}: expected one of {', '.join(ISAS)}")
    if name not in available_isas():
        raise ValueError(f"ISA {name!r} is not supported on this CPU (best: {best_isa()})")
    check(lib().aie_set_isa(ISAS.index(name)), f"set_isa({name})")


def use_isa(name: str):
    """Run a block on one ISA path, then restore the previous level (with its extensions)."""
    return _forced(set_isa, name)
