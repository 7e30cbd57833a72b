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


@task(
    iterable=["spec"],
    help={
        "spec": "spec file; repeat to overlay site files on a base (later wins). Default: sysconfig/spec.yaml",
        "root": "install into this directory (default: /, the live system: kernel state, GRUB, systemd, users; needs root)",
        "check": "change nothing: print every difference (file diffs, live values) and exit 2 on drift, 0 in sync",
        "rollback": "restore the newest backup set under ROOT/var/lib/ai-engine/provision/backups (live values too at /)",
    },
)
def provision(c, spec=None, root="/", check=False, rollback=False):
    """Install the rendered spec into ROOT (only changed files, backed up first); at / also apply live state."""
    from hostspec.__main__ import main as hostspec_main

    argv = ["provision", "--root", root]
    # A rollback must work even when the spec no longer loads: pass it only when given.
    specs = spec if rollback else _specs(spec)
    argv += [arg for path in specs or [] for arg in ("--spec", str(path))]
    argv += ["--check"] * check + ["--rollback"] * rollback
    rc = hostspec_main(argv)
    if rc:
        raise Exit(code=rc)


@task(
    iterable=["spec"],
    help={
        "spec": "spec file; repeat to overlay site files on a base (later wins). Default: sysconfig/spec.yaml",
        "out": "directory the file tree is written into, mirroring the target root (default: build/rootfs)",
    },
)
def render(c, spec=None, out="build/rootfs"):
    """Validate the spec and render sysctl, GRUB, systemd, engine.yaml and check-host into OUT."""
    from hostspec.cli_render import run_render

    if run_render(_specs(spec), Path(out)):
        raise Exit(code=1)


@task(
    iterable=["name"],
    help={
        "name": "model to build; repeat for several (default: every zoo model). `python -m models.zoo --list` lists them",
        "out": "output directory (default: build/models, where the spec's default model points)",
        "force": "rebuild even when the files are up to date",
    },
)
def zoo(c, name=None, out="build/models", force=False):
    """Generate the ONNX model zoo (digits, mlp, cnn_bn, ..., resnet18) deterministically; skips up-to-date files."""
    from models.zoo import main as zoo_main

    rc = zoo_main(["--out", str(ROOT / out), *(["--force"] if force else []), *(name or [])])
    if rc:
        raise Exit(code=rc)


# --- tasks added by later work go above this line ---------------------------

ns = Collection(test, build_kernels, render, provision, zoo)
ns.configure({"run": {"echo": True}})
