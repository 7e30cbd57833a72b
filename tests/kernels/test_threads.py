"""The kernel thread pool: sizing, determinism, concurrent callers, idle cost."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from aie_testing import run_concurrently
from engine import kernels


@pytest.fixture
def restore_threads():
    before = kernels.get_threads()
    yield
    kernels.set_threads(before)


def _child(code: str, **env) -> str:
    proc = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_default_size_is_the_affinity_mask():
    env = {k: v for k, v in os.environ.items() if k != "AIE_NUM_THREADS"}
    proc = subprocess.run([sys.executable, "-c", "from engine import kernels; print(kernels.get_threads())"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == len(os.sched_getaffinity(0))


def test_env_overrides_size():
    assert _child("from engine import kernels; print(kernels.get_threads())", AIE_NUM_THREADS="3") == "3"


def test_resize_and_bad_sizes(restore_threads):
    kernels.set_threads(3)
    assert kernels.get_threads() == 3
    a = np.random.default_rng(1).standard_normal((200, 150)).astype(np.float32)
    want = kernels.matmul(a, a.T.copy(), threads=1)
    assert np.array_equal(kernels.matmul(a, a.T.copy(), threads=3), want)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="thread count"):
            kernels.set_threads(bad)


def test_concurrent_callers_get_correct_results():
    """Several application threads call matmul at once (ctypes drops the GIL)."""
    rng = np.random.default_rng(2)
    problems = [(rng.standard_normal((150, 120)).astype(np.float32), rng.standard_normal((120, 170)).astype(np.float32))
                for _ in range(4)]
    expected = [kernels.matmul(a, b, threads=1) for a, b in problems]

    def worker(i):
        a, b = problems[i]
        for k in range(20):
            assert np.array_equal(kernels.matmul(a, b, threads=2), expected[i]), f"caller {i}, call {k}: wrong result"

    run_concurrently(worker, 4, timeout=120)


def _cpu_seconds() -> float:
    # utime + stime of the whole process (all threads), fields 14 and 15 of /proc/self/stat
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_idle_workers_burn_no_cpu(restore_threads):
    kernels.set_threads(2)
    a = np.random.default_rng(3).standard_normal((256, 256)).astype(np.float32)
    for _ in range(5):
        kernels.matmul(a, a, threads=2)  # workers exist and have just finished
    before = _cpu_seconds()
    time.sleep(0.2)
    used = _cpu_seconds() - before
    # a spinning worker would use ~0.2 s here; the bounded spin before sleeping is < 1 ms
    assert used < 0.03, f"{used:.3f} s of CPU used while idle for 0.2 s"
