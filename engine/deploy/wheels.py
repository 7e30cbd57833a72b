"""Wheels for the bundle: what a host runs (requirements/host.in's closure at
the versions pinned in requirements/constraints.txt; never the build
machine's requirements/build.in), pip itself (so a host needs no ensurepip)
and the engine wheel with the kernel library inside.

The engine wheel is built by the repo's own build backend (setuptools, from
pyproject.toml) out of a staging copy of the sources, with SOURCE_DATE_EPOCH
fixed so its bytes depend only on the sources.
"""

from __future__ import annotations

import ensurepip
import os
import shutil
import subprocess
import sys
from pathlib import Path

from engine.deploy import DeployError
from engine.deploy.bundle import FIXED_MTIME

REPO = Path(__file__).resolve().parents[2]
# What goes into the engine wheel's build (the packages pyproject.toml finds,
# and the requirement files it reads its dependencies from).
ENGINE_SOURCES = ("engine", "sysconfig/hostspec")
HOST_REQUIREMENTS = "requirements/host.in"
WHEEL_METADATA = ("pyproject.toml", HOST_REQUIREMENTS, "requirements/build.in")


def _pip(args: list[str], what: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip() and "WARNING" not in ln]
        raise DeployError(f"{what} failed: {' | '.join(lines[-3:])}", where="pip",
                          hint="the bundle needs every dependency as a wheel from the configured index or mirror")


# Where a pip wheel to bundle is found: the one ensurepip carries, else the
# distro's copy (Debian and Ubuntu strip ensurepip's wheels from the system
# Python and ship them in python3-pip-whl).
PIP_WHEEL_DIRS = (Path(ensurepip.__file__).parent / "_bundled", Path("/usr/share/python-wheels"))


def pip_wheel(dirs: tuple[Path, ...] = PIP_WHEEL_DIRS) -> Path:
    """The pip wheel the bundle carries (so a host needs no ensurepip)."""
    for d in dirs:
        found = sorted(d.glob("pip-*.whl"))
        if found:
            return found[-1]
    raise DeployError("no pip wheel to bundle: this Python's ensurepip has none", where=ensurepip.__file__,
                      hint="install the distro's pip wheel (Debian/Ubuntu: apt-get install python3-pip-whl) "
                           "or use a Python whose ensurepip carries one")


def dependency_wheels(out_dir: Path, repo: Path = REPO) -> list[Path]:
    """pip wheel what a host runs (requirements/host.in) into out_dir (emptied first)."""
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    _pip(["wheel", "--quiet", "--wheel-dir", str(out_dir), "-c", str(repo / "requirements/constraints.txt"),
          "-r", str(repo / HOST_REQUIREMENTS)], "downloading the dependency wheels")
    shutil.copy2(pip_wheel(), out_dir)
    return sorted(out_dir.glob("*.whl"))


def source_files(repo: Path = REPO) -> list[Path]:
    """The engine's package sources as git sees them (tracked and new, not ignored)."""
    proc = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "--", *ENGINE_SOURCES, *WHEEL_METADATA],
                          cwd=repo, capture_output=True, text=True)
    if proc.returncode != 0:
        # Not a git checkout (an exported tree): every file but caches.
        files = [p.relative_to(repo) for d in ENGINE_SOURCES for p in (repo / d).rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts]
        return sorted([*files, *map(Path, WHEEL_METADATA)])
    return sorted(Path(line) for line in proc.stdout.splitlines() if (repo / line).is_file())


def engine_wheel(out_dir: Path, kernels_so: Path, staging: Path, repo: Path = REPO) -> Path:
    """Build the engine wheel (engine + hostspec, kernels in engine/_native/) into out_dir."""
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    for rel in source_files(repo):
        dst = staging / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(repo / rel, dst)
    # The gRPC stubs are generated, never committed: into the staging copy, from the vendored protos
    # (a subprocess: engine.server shares this layer, so it is not imported here).
    proc = subprocess.run([sys.executable, "-m", "engine.server.grpc_stubs", str(staging / "engine/server/grpc_gen"),
                           str(repo / "proto")], cwd=staging, capture_output=True, text=True)
    if proc.returncode != 0:
        raise DeployError(f"generating the gRPC stubs failed: {proc.stderr.strip()[-400:]}", where=str(repo / "proto"),
                          hint="grpcio-tools is a build-machine package (requirements/build.in)")
    native = staging / "engine" / "_native"
    native.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(kernels_so, native / "libaie_kernels.so")
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(FIXED_MTIME))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                           "--wheel-dir", str(out_dir), str(staging)], capture_output=True, text=True, env=env)
    shutil.rmtree(staging, ignore_errors=True)
    if proc.returncode != 0:
        raise DeployError(f"building the engine wheel failed: {proc.stderr.strip()[-400:]}", where=str(repo))
    wheels = sorted(out_dir.glob("ai_engine-*.whl"))
    if len(wheels) != 1:
        raise DeployError(f"expected one engine wheel, found {[w.name for w in wheels]}", where=str(out_dir))
    return wheels[0]
