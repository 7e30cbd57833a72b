"""The release bundle: one reproducible tarball per target ISA with all a host
needs to run the engine, and nothing it must fetch.

    MANIFEST.json                 version, arch, python, spec digest, engine
                                  listen/port/models, sha256 of every other file
    engine/...                    the installer (engine.deploy host side, stdlib only)
    wheels/*.whl                  the engine wheel (kernels inside) + every dependency + pip
    lib/libaie_kernels.{a,so}     the kernel libraries, for linking against them
    models/<name>.aie             converted models
    models/<name>.smoke.json      each model's smoke input + the converter's reference output
    rootfs/...                    the tree render_tree made from the spec
    spec/<n>-<file>.yaml          the spec files, for live provisioning at /
    README.md                     the repo's README (the unit's Documentation=)

Reproducible: entries sorted, mtime fixed, uid/gid 0 with no names, modes
normalised, gzip header without name or time — the same inputs give the same
sha256. The version is the first 12 hex digits of the manifest's hash unless
given, so the version names the content.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from engine.deploy import DeployError

# 1980-01-01: the earliest time a zip (wheel) can hold, so tar and wheel agree.
FIXED_MTIME = 315532800
# Level 1: most of the bytes are wheels, already deflated; higher levels cost
# seconds for a few percent.
GZIP_LEVEL = 1
INSTALLER_FILES = ("engine/__init__.py", "engine/errors.py", "engine/deploy/__init__.py",
                   "engine/deploy/hostroot.py", "engine/deploy/install.py", "engine/deploy/prepare.py",
                   "engine/deploy/remote.py", "engine/deploy/service.py", "engine/deploy/supervise.py",
                   "engine/deploy/tokens.py", "engine/deploy/verify.py")
# Repo files shipped as they are: the installer, and the README the systemd
# unit's Documentation= points at (file:/opt/ai-engine/current/README.md).
REPO_FILES = (*INSTALLER_FILES, "README.md")
ENGINE_DIR = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class BundleInputs:
    wheels: list[Path]                      # engine wheel, dependencies, pip
    libs: list[Path]                        # libaie_kernels.so / .a
    models: dict[str, tuple[Path, Path]]    # name -> (.aie, .smoke.json)
    rootfs: dict[str, tuple[bytes, int]]    # relpath -> (content, mode), from render_tree
    spec_files: list[Path]
    spec_digest: str
    listen: str
    http_port: int
    auth: dict = field(default_factory=dict)  # tokens.auth_summary of engine.auth: how verification gets a token
    python: str = field(default_factory=lambda: "%d.%d" % tuple(map(int, platform.python_version_tuple()[:2])))
    arch: str = field(default_factory=platform.machine)


@dataclass(frozen=True)
class Bundle:
    path: Path
    version: str
    sha256: str
    size: int
    manifest: dict


def _members(inputs: BundleInputs) -> dict[str, tuple[Path | bytes, int]]:
    """Archive name -> (file on disk or bytes, mode)."""
    out: dict[str, tuple[Path | bytes, int]] = {}

    def add(name: str, source: Path | bytes, mode: int = 0o644) -> None:
        if name in out:
            raise DeployError(f"two bundle inputs map to {name}", where=str(source) if isinstance(source, Path) else name)
        if isinstance(source, Path) and not source.is_file():
            raise DeployError("bundle input missing", where=str(source), hint="run the step that builds it")
        out[name] = (source, mode)

    for rel in REPO_FILES:
        add(rel, ENGINE_DIR.parent / rel)
    for wheel in inputs.wheels:
        add(f"wheels/{wheel.name}", wheel)
    for lib in inputs.libs:
        add(f"lib/{lib.name}", lib, 0o755 if lib.suffix == ".so" else 0o644)
    for name, (aie, smoke) in sorted(inputs.models.items()):
        add(f"models/{name}.aie", aie)
        add(f"models/{name}.smoke.json", smoke)
    for rel, (content, mode) in inputs.rootfs.items():
        add(f"rootfs/{rel}", content, 0o755 if mode & 0o111 else 0o644)
    for i, spec in enumerate(inputs.spec_files):
        add(f"spec/{i}-{spec.name}", spec)
    return out


def _sha256(source: Path | bytes) -> str:
    if isinstance(source, bytes):
        return hashlib.sha256(source).hexdigest()
    h = hashlib.sha256()
    with open(source, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_manifest(inputs: BundleInputs, members: dict, version: str | None) -> dict:
    manifest = {
        "format": 1,
        "generated": "by ai-engine (engine.deploy.bundle); do not edit",
        "arch": inputs.arch,
        "python": inputs.python,
        "spec_digest": inputs.spec_digest,
        "engine": {"listen": inputs.listen, "http_port": inputs.http_port, "auth": inputs.auth,
                   "models": [{"name": n, "aie": f"models/{n}.aie", "smoke": f"models/{n}.smoke.json"}
                              for n in sorted(inputs.models)]},
        "files": {name: _sha256(src) for name, (src, _) in sorted(members.items())},
    }
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    manifest["version"] = version or hashlib.sha256(canonical).hexdigest()[:12]
    return manifest


def _tarinfo(name: str, size: int, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, mode, FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def bundle_name(version: str, arch: str) -> str:
    return f"ai-engine-{version}-{arch}.tar.gz"


def build_bundle(inputs: BundleInputs, out_dir: Path, version: str | None = None) -> Bundle:
    """Write out_dir/ai-engine-<version>-<arch>.tar.gz (atomically) and return it."""
    members = _members(inputs)
    manifest = make_manifest(inputs, members, version)
    manifest_bytes = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / bundle_name(manifest["version"], inputs.arch)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=GZIP_LEVEL) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
            tar.addfile(_tarinfo("MANIFEST.json", len(manifest_bytes), 0o644), io.BytesIO(manifest_bytes))
            for name, (source, mode) in sorted(members.items()):
                if isinstance(source, bytes):
                    tar.addfile(_tarinfo(name, len(source), mode), io.BytesIO(source))
                else:
                    with open(source, "rb") as fh:
                        tar.addfile(_tarinfo(name, os.fstat(fh.fileno()).st_size, mode), fh)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Bundle(path=path, version=manifest["version"], sha256=_sha256(path), size=path.stat().st_size,
                  manifest=manifest)


def read_member(path: Path, name: str) -> bytes:
    """One file of a bundle (e.g. a model's smoke reference)."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            member = tar.extractfile(name)
            if member is None:
                raise KeyError(name)
            return member.read()
    except (tarfile.TarError, OSError, EOFError, KeyError) as exc:
        raise DeployError(f"cannot read {name} from the bundle: {exc}", where=str(path)) from None


def read_bundle(path: Path) -> Bundle:
    """A bundle built earlier (or elsewhere): its manifest and checksum."""
    path = Path(path)
    try:
        with tarfile.open(path, "r:gz") as tar:
            member = tar.extractfile("MANIFEST.json")
            manifest = json.loads(member.read()) if member else None
    except (tarfile.TarError, OSError, EOFError, KeyError, ValueError) as exc:
        raise DeployError(f"not a readable ai-engine bundle: {exc}", where=str(path)) from None
    if not manifest or "version" not in manifest:
        raise DeployError("MANIFEST.json missing or without a version", where=str(path))
    return Bundle(path=path, version=manifest["version"], sha256=_sha256(path), size=path.stat().st_size,
                  manifest=manifest)


def extract(bundle: Path, dest: Path) -> dict:
    """Extract a bundle into dest (a release directory); return its manifest.
    Refuses members that would land outside dest (tarfile's 'data' filter)."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(bundle, "r:gz") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:
                extract_checked(tar, dest)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DeployError(f"cannot extract the bundle: {exc}", where=str(bundle), hint="rebuild it (invoke bundle)") from None
    return json.loads((dest / "MANIFEST.json").read_text())


def extract_checked(tar: tarfile.TarFile, dest: Path) -> None:
    """What the 'data' filter refuses, checked by hand, for a host Python
    without extraction filters (before 3.11.4, e.g. Debian 12's 3.11.2):
    only files, directories and links, all landing inside dest."""
    root = dest.resolve()

    def inside(path: Path) -> bool:
        return path == root or root in path.parents
    for m in tar.getmembers():
        target = (root / m.name).resolve()
        if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
            raise DeployError(f"bundle member {m.name!r} is not a file, directory or link", where=str(dest))
        if os.path.isabs(m.name) or not inside(target) or \
                (m.issym() and not inside((target.parent / m.linkname).resolve())) or \
                (m.islnk() and not inside((root / m.linkname).resolve())):
            raise DeployError(f"bundle member {m.name!r} would land outside the release directory", where=str(dest))
    tar.extractall(dest)

