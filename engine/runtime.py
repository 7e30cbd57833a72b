"""What a server needs from the runtime beside InferenceSession: the kernels'
process-wide settings and a C thread that runs bound plans.

engine.server uses these and InferenceSession (bind, run, threads,
plan_count) only; the kernel library and the plan's C structures stay below
this layer.
"""

from __future__ import annotations

import ctypes

from engine import kernels
from engine.errors import KernelError
from engine.kernels._lib import lib
from engine.plan import BoundRun, _CPlan

_FNS = None


def _fns():
    global _FNS
    if _FNS is None:
        h = lib()
        vp = ctypes.c_void_p
        h.aie_exec_runner_new.argtypes, h.aie_exec_runner_new.restype = [ctypes.c_int], vp
        h.aie_exec_runner_submit.argtypes = [vp, ctypes.POINTER(_CPlan), vp, vp, vp, vp, ctypes.c_int]
        h.aie_exec_runner_submit.restype = ctypes.c_int
        h.aie_exec_runner_collect.argtypes, h.aie_exec_runner_collect.restype = [vp, ctypes.c_char_p,
                                                                                 ctypes.c_size_t], ctypes.c_int
        h.aie_exec_runner_free.argtypes, h.aie_exec_runner_free.restype = [vp], None
        _FNS = h
    return _FNS


def kernel_isa() -> str:
    """The ISA path the kernels selected (scalar, avx2 or avx512)."""
    return kernels.isa()


def set_kernel_threads(n: int) -> None:
    """Size the kernels' one process-wide thread pool (engine.threads)."""
    lib().aie_threads_set(n)


class ExecThread:
    """A C thread of its own (aie_exec_runner) that runs one bound plan
    (InferenceSession.bind) at a time, without the GIL, and writes to the
    eventfd `fd` when a run is done: the caller then collects it."""

    def __init__(self, fd: int):
        h = _fns()
        self._h = h.aie_exec_runner_new(fd)
        if not self._h:
            raise KernelError(f"cannot start an inference thread: {h.aie_last_error().decode()}")
        self._err = ctypes.create_string_buffer(256)

    def submit(self, bound: BoundRun, threads: int) -> None:
        if _fns().aie_exec_runner_submit(self._h, *bound.args, threads) != 0:
            raise KernelError(f"inference not started: {_fns().aie_last_error().decode()}")

    def collect(self) -> str | None:
        """The finished run's error message, or None when it succeeded."""
        if _fns().aie_exec_runner_collect(self._h, self._err, len(self._err)) != 0:
            return self._err.value.decode(errors="replace")
        return None

    def free(self) -> None:
        """Stop the thread; a run in progress finishes first (this waits for it)."""
        if self._h is not None:
            h, self._h = self._h, None
            _fns().aie_exec_runner_free(h)
