"""ai-engine tasks (invoke). Each task is a thin wrapper: read options, call
one library function, report. The work lives in `hostspec` (sysconfig/) and
`engine`, where it is tested without invoke. `invoke --list` is the table of
contents; `invoke --help TASK` documents every option."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from invoke import Collection, Exit, task

ROOT = Path(__file__).resolve().parent
DEFAULT_SPEC = ROOT / "sysconfig" / "spec.yaml"


def _specs(spec: list[str] | None) -> list[Path]:
    return [Path(s) for s in spec] if spec else [DEFAULT_SPEC]


@task(
    help={
        "sanitize": "also run the C tests under AddressSanitizer + UBSan (default: on)",
        "pytest-args": "extra arguments passed to pytest, e.g. '-k kernels -x'",
    }
)
def test(c, sanitize=True, pytest_args=""):
    """Run every test: C kernel tests (plain and sanitized), then pytest."""
    c.run("make -C kernels -j2 test", pty=False)
    if sanitize:
        c.run("make -C kernels -j2 SANITIZE=1 test", pty=False)
    c.run(f"{sys.executable} -m pytest {pytest_args}", pty=False)


@task(
    help={
        "jobs": "parallel compile jobs (default: CPU count)",
        "sanitize": "build the AddressSanitizer + UBSan variant into build/lib-san",
    }
)
def build_kernels(c, jobs=0, sanitize=False):
    """Build the compute kernels into build/lib (CUDA too when nvcc exists)."""
    n = jobs or os.cpu_count() or 1
    c.run(f"make -C kernels -j{n}" + (" SANITIZE=1" if sanitize else ""), pty=False)


# --- tasks added by later work go above this line ---------------------------

ns = Collection(test, build_kernels)
ns.configure({"run": {"echo": True}})
