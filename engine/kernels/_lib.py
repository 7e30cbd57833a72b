"""Loading the kernel shared object and calling into it with ctypes.

Why ctypes and not a CPython extension: the library is plain C with no Python
ABI dependency, so one .so serves every Python version and the deploy bundle;
ctypes releases the GIL for the duration of every foreign call; and the hot
path (a whole model inference) is one foreign call, so ctypes' ~1 us of call
overhead is paid once per inference, not per op.

Lookup order: $AIE_KERNELS_LIB, engine/_native/libaie_kernels.so (installed
wheels), build/lib/libaie_kernels.so (a source checkout after `make kernels`).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from engine.errors import KernelError

_HERE = Path(__file__).resolve().parent
_CANDIDATES = (
    _HERE.parent / "_native" / "libaie_kernels.so",
    _HERE.parents[1] / "build" / "lib" / "libaie_kernels.so",
)

_lib: ctypes.CDLL | None = None


def library_path() -> Path:
    env = os.environ.get("AIE_KERNELS_LIB")
    if env:
        return Path(env)
    for cand in _CANDIDATES:
        if cand.exists():
            return cand
    raise KernelError(
        "kernel library libaie_kernels.so not found",
        where=", ".join(str(c) for c in _CANDIDATES),
        hint="run `invoke build-kernels` (or `make kernels`), or set AIE_KERNELS_LIB",
    )


def lib() -> ctypes.CDLL:
    """The loaded library, initialised once (ISA chosen, AIE_ISA honoured)."""
    global _lib
    if _lib is None:
        path = library_path()
        try:
            handle = ctypes.CDLL(str(path))
        except OSError as exc:
            raise KernelError(f"cannot load {path}: {exc}", hint="rebuild with `invoke build-kernels`") from None
        handle.aie_last_error.restype = ctypes.c_char_p
        handle.aie_isa_name.restype = ctypes.c_char_p
        handle.aie_level_name.restype = ctypes.c_char_p
        handle.aie_level_supported.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        handle.aie_version.restype = ctypes.c_char_p
        rc = handle.aie_init()
        if rc != 0:
            raise KernelError(handle.aie_last_error().decode())
        _lib = handle
    return _lib


def check(rc: int, what: str) -> None:
    """Turn a negative aie_status into a KernelError carrying aie_last_error()."""
    if rc != 0:
        raise KernelError(f"{what}: {lib().aie_last_error().decode()}")
