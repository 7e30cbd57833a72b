"""A small session over the real kernels (aie_sgemm with its bias + ReLU
epilogue), with the three methods the server uses from engine.InferenceSession.

The server tests use it through AIE_SERVE_SESSION_FACTORY=kernel_mlp:MLPSession
so they control the model's size (and so its run time: the deadline test
needs a batch that runs for a known while) without the converter. Model
files are .npz with w0, b0, w1, b1, ... (float32, w_i of shape [in, out]);
ReLU after every layer but the last; an optional `repeat` runs the whole
forward pass that many times (same answer, proportionally longer run); an
optional `fail_above` makes a run fail when an input's first value exceeds
it (a release whose model errors for some inputs: the canary tests).

Test hook, off unless the server's environment sets it (serve_support.RunGate
does): with AIE_TEST_RUN_EVENTS=<file> every run appends "start" to that
file as it begins; with AIE_TEST_RUN_GATE=<fifo> every run then waits for one
byte from that FIFO before it computes. A test thereby sees when a batch is
running and decides when it ends -- no sleeping to let a model "be busy".
The wait is bounded (GATE_TIMEOUT_S) and ends at once when the test closes
its end of the FIFO, so a failed test never leaves a server hanging.
"""

from __future__ import annotations

import ctypes
import os
import select
from dataclasses import dataclass

import numpy as np

from engine.kernels._lib import check, lib
from engine.kernels.abi import Epilogue as _Epilogue
from engine.kernels.abi import Unary


@dataclass(frozen=True)
class NodeArg:
    name: str
    shape: list
    type: str = "tensor(float)"


def _sgemm():
    f = lib().aie_sgemm
    i64, fp = ctypes.c_int64, ctypes.c_void_p
    f.argtypes = [ctypes.c_int, ctypes.c_int, i64, i64, i64, ctypes.c_float, fp, i64, fp, i64, ctypes.c_float, fp,
                  i64, ctypes.POINTER(_Epilogue), fp, ctypes.c_size_t, ctypes.c_int]
    f.restype = ctypes.c_int
    ws = lib().aie_sgemm_workspace_size
    ws.argtypes = [i64, i64, i64, ctypes.c_int]
    ws.restype = ctypes.c_size_t
    return f, ws


GATE_TIMEOUT_S = 60.0


class _RunHook:
    """The AIE_TEST_RUN_EVENTS / AIE_TEST_RUN_GATE hook (module docstring)."""

    def __init__(self):
        events, gate = os.environ.get("AIE_TEST_RUN_EVENTS"), os.environ.get("AIE_TEST_RUN_GATE")
        self.events = os.open(events, os.O_WRONLY | os.O_APPEND | os.O_CREAT) if events else None
        # The test holds the FIFO open for writing before the server starts, so this open never blocks.
        self.gate = os.open(gate, os.O_RDONLY) if gate else None

    def run_starts(self) -> None:
        if self.events is not None:
            os.write(self.events, b"start\n")  # one O_APPEND write: lines never interleave
        if self.gate is not None:
            ready, _, _ = select.select([self.gate], [], [], GATE_TIMEOUT_S)
            if not ready:
                raise TimeoutError(f"test gate AIE_TEST_RUN_GATE not opened within {GATE_TIMEOUT_S} s")
            os.read(self.gate, 1)  # b"" once the test closed the FIFO: every later run passes

    def close(self) -> None:
        for fd in (self.events, self.gate):
            if fd is not None:
                os.close(fd)
        self.events = self.gate = None


class MLPSession:
    def __init__(self, path: str, threads: int | None = None):
        with np.load(path) as z:
            n = len([k for k in z.files if k.startswith("w")])
            if n == 0:
                raise ValueError(f"{path}: no layers (w0, b0, ...)")
            self.layers = [(np.ascontiguousarray(z[f"w{i}"], np.float32), np.ascontiguousarray(z[f"b{i}"], np.float32))
                           for i in range(n)]
            self.repeat = int(z["repeat"]) if "repeat" in z.files else 1
            self.fail_above = float(z["fail_above"]) if "fail_above" in z.files else None
        self.threads = threads or 1
        self._sgemm, self._ws = _sgemm()
        self._hook = _RunHook()

    def close(self) -> None:
        self._hook.close()

    def get_inputs(self):
        return [NodeArg("x", ["batch", self.layers[0][0].shape[0]])]

    def get_outputs(self):
        return [NodeArg("y", ["batch", self.layers[-1][0].shape[1]])]

    def run(self, output_names, feeds):
        self._hook.run_starts()
        if self.fail_above is not None and np.any(feeds["x"][:, 0] > self.fail_above):
            raise ValueError(f"input above {self.fail_above} (fail_above)")
        for _ in range(self.repeat):
            y = self._forward(np.ascontiguousarray(feeds["x"], dtype=np.float32))
        return [y]

    def _forward(self, x):
        for i, (w, b) in enumerate(self.layers):
            m, k = x.shape
            n = w.shape[1]
            y = np.empty((m, n), np.float32)
            ep = _Epilogue(b.ctypes.data, 1, Unary.RELU if i < len(self.layers) - 1 else Unary.IDENTITY, 0.0, 0.0)
            size = self._ws(m, n, k, self.threads)
            ws = np.empty(max(1, size), np.uint8)
            check(self._sgemm(0, 0, m, n, k, 1.0, x.ctypes.data, k, w.ctypes.data, n, 0.0, y.ctypes.data, n,
                              ctypes.byref(ep), ws.ctypes.data, size, self.threads), "sgemm")
            x = y
        return x


def write_mlp(path, sizes, seed: int, repeat: int = 1, fail_above: float | None = None) -> None:
    """A seeded random MLP with layer widths `sizes` (e.g. [16, 32, 4])."""
    rng = np.random.default_rng(seed)
    arrays = {"repeat": np.int64(repeat)}
    if fail_above is not None:
        arrays["fail_above"] = np.float64(fail_above)
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        arrays[f"w{i}"] = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        arrays[f"b{i}"] = (rng.standard_normal(b) * 0.1).astype(np.float32)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def reference(path, x: np.ndarray) -> np.ndarray:
    """The same MLP in float64 numpy: the oracle for the kernel session."""
    with np.load(path) as z:
        n = len([k for k in z.files if k.startswith("w")])
        h = x.astype(np.float64)
        for i in range(n):
            h = h @ z[f"w{i}"].astype(np.float64) + z[f"b{i}"].astype(np.float64)
            if i < n - 1:
                h = np.maximum(h, 0)
    return h
