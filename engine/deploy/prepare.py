"""Putting a release in place on a host: its files checked against the
manifest, its venv built from the bundled wheels or shared with an installed
release of the same wheels (host side: stdlib only)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from engine.deploy import DeployError
from engine.deploy.hostroot import INSTALLED, HostRoot, read_manifest, run_command


def check_files(release_dir: Path, manifest: dict) -> None:
    """Every file listed in the manifest exists with its sha256 (a truncated
    upload or a damaged disk stops here, before anything changes)."""
    for rel, want in sorted(manifest["files"].items()):
        path = release_dir / rel
        h = hashlib.sha256()
        try:
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
        except OSError as exc:
            raise DeployError(f"bundle file missing or unreadable: {exc.strerror}", where=str(path)) from None
        if h.hexdigest() != want:
            raise DeployError("bundle file does not match its sha256 in MANIFEST.json", where=str(path),
                              hint="re-upload the bundle")


def check_python(manifest: dict, python: str) -> None:
    want = manifest.get("python")
    have = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True).stdout.strip()
    if want and have != want:
        raise DeployError(f"the bundle's wheels are for Python {want}, this host's {python} is {have or 'unusable'}",
                          hint="build the bundle with the hosts' Python version")


def build_venv(release_dir: Path, python: str) -> None:
    """venv without ensurepip (Debian strips it) + pip run from the bundled pip
    wheel, installing only from wheels/ (hosts are often air-gapped)."""
    venv = release_dir / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    run_command([python, "-m", "venv", "--without-pip", str(venv)], "creating the release venv")
    wheels = release_dir / "wheels"
    pip = sorted(wheels.glob("pip-*.whl"))
    if not pip:
        raise DeployError("no pip wheel in the bundle", where=str(wheels))
    # --isolated: no pip.conf or PIP_* of the host may add an index or a constraint.
    # --no-compile: bytecode is written lazily by the engine itself (saves ~half the install time).
    # Every bundled wheel: the bundle carries exactly requirements/host.in's
    # closure, the engine wheel's dependencies.
    packages = sorted(str(w) for w in wheels.glob("*.whl") if not w.name.startswith("pip-"))
    run_command([str(venv / "bin" / "python"), f"{pip[-1]}/pip", "install", "--isolated", "--quiet", "--no-index",
          "--no-compile", "--disable-pip-version-check", "--find-links", str(wheels), *packages],
         "installing the wheels into the release venv")


def _wheels(manifest: dict) -> dict[str, str]:
    return {rel: sha for rel, sha in manifest["files"].items() if rel.startswith("wheels/")}


def find_donor(host: HostRoot, manifest: dict) -> tuple[Path, dict] | None:
    """The newest installed release with the same wheels and Python (by
    sha256): its venv and unchanged files can be shared with a new release."""
    if not host.releases.is_dir():
        return None
    candidates = [d for d in host.releases.iterdir() if d.name != manifest["version"] and (d / INSTALLED).is_file()]
    for d in sorted(candidates, key=lambda d: (d / INSTALLED).stat().st_mtime, reverse=True):
        try:
            other = read_manifest(d)
        except DeployError:
            continue
        if other.get("python") == manifest.get("python") and _wheels(other) == _wheels(manifest):
            return d, other
    return None


def _link_over(src: Path, dst: Path) -> None:
    tmp = dst.with_name(f".{dst.name}.link.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    os.link(src, tmp)
    os.replace(tmp, dst)


def share_unchanged(release_dir: Path, manifest: dict, donor: Path, donor_manifest: dict) -> int:
    """Hard-link every file of the new release that is byte-identical (same
    sha256) to the donor's, so a release that changes one config file costs
    that file's bytes on disk, not the whole bundle again. Release files are
    never written after install, so sharing them is safe. Bytes saved."""
    saved = 0
    for rel, sha in manifest["files"].items():
        src, dst = donor / rel, release_dir / rel
        if donor_manifest["files"].get(rel) != sha or not src.is_file() or src.stat().st_ino == dst.stat().st_ino:
            continue
        try:
            _link_over(src, dst)
        except OSError:
            continue  # another filesystem, or links not allowed: keep the copy
        saved += src.stat().st_size
    return saved


def clone_venv(donor: Path, release_dir: Path) -> None:
    """The donor's venv (same wheels) hard-linked into the new release; only
    the files that name the donor's path (bin/ scripts, pyvenv.cfg) are
    rewritten, as new files. Seconds instead of a pip install."""
    _link_venv(donor / "venv", str(donor.resolve()), release_dir / "venv", str(release_dir.resolve()))


def link_or_copy(src: Path | str, dst: Path | str) -> None:
    try:
        os.link(src, dst)  # release files and cached wheels are never written in place: sharing is safe
    except OSError:
        shutil.copy2(src, dst)  # another filesystem (a cache elsewhere): a copy still beats rebuilding


def _link_venv(src: Path, old_prefix: str, dst: Path, new_prefix: str) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, symlinks=True, copy_function=link_or_copy)
    old, new = old_prefix.encode(), new_prefix.encode()
    for path in [*(dst / "bin").iterdir(), dst / "pyvenv.cfg"]:
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if old in data:
            mode = path.stat().st_mode
            path.unlink()  # break the link: the donor's file stays as it was
            path.write_bytes(data.replace(old, new))
            path.chmod(mode)


# The venv cache (install --venv-cache DIR, which the deployer gives local
# roots): DIR/<key>/venv, a venv built from a set of wheels by one Python,
# and DIR/<key>/ORIGIN, the release path its scripts name. A root with no
# installed release of the same wheels (a new root, or after `make clean`)
# links it in instead of running pip. ORIGIN is written last and the entry
# renamed into place, so a half-stored entry is never used; the newest
# VENV_CACHE_KEEP stay.
VENV_CACHE_KEEP = 3


def venv_key(manifest: dict, python: str) -> str:
    wheels = json.dumps(sorted(_wheels(manifest).items())).encode()
    return hashlib.sha256(wheels + f"\0{os.path.realpath(python)}\0{manifest.get('python')}".encode()).hexdigest()[:32]


def venv_from_cache(cache: Path, key: str, release_dir: Path) -> bool:
    entry = cache / key
    try:
        origin = (entry / "ORIGIN").read_text()
        _link_venv(entry / "venv", origin, release_dir / "venv", str(release_dir.resolve()))
        os.utime(entry)  # used now: pruned last
    except OSError:
        shutil.rmtree(release_dir / "venv", ignore_errors=True)
        return False
    return True


def venv_to_cache(cache: Path, key: str, release_dir: Path) -> None:
    """Keep the release's fresh venv (hard links) for the next new root; a
    cache that cannot be written costs the next install its pip run, nothing else."""
    entry = cache / key
    tmp = cache / f".{key}.{os.getpid()}.tmp"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        shutil.copytree(release_dir / "venv", tmp / "venv", symlinks=True, copy_function=link_or_copy)
        (tmp / "ORIGIN").write_text(str(release_dir.resolve()))
        shutil.rmtree(entry, ignore_errors=True)
        os.rename(tmp, entry)
        entries = sorted((d for d in cache.iterdir() if d.is_dir() and not d.name.startswith(".")),
                         key=lambda d: d.stat().st_mtime, reverse=True)
        for old in entries[VENV_CACHE_KEEP:]:
            shutil.rmtree(old, ignore_errors=True)
    except OSError:
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def prepare(host: HostRoot, release_dir: Path, python: str, venv_cache: Path | None = None) -> dict:
    """Make releases/<version> complete (files checked, venv built, shared
    with an installed release of the same wheels, or linked from
    venv_cache); idempotent."""
    manifest = read_manifest(release_dir)
    version = manifest["version"]
    if release_dir.resolve() != host.release(version).resolve():
        raise DeployError(f"release {version} must be installed from {host.release(version)}", where=str(release_dir))
    if host.installed(version):
        return manifest
    host.say(f"checking {len(manifest['files'])} files of release {version}")
    check_files(release_dir, manifest)
    check_python(manifest, python)
    donor = find_donor(host, manifest)
    if donor is not None:
        saved = share_unchanged(release_dir, manifest, *donor)
        host.say(f"sharing {saved / 1e6:.1f} MB of unchanged files and the venv with release {donor[0].name}")
        clone_venv(donor[0], release_dir)
    elif venv_cache is not None and venv_from_cache(venv_cache, venv_key(manifest, python), release_dir):
        host.say(f"the release venv from the venv cache ({venv_cache})")
    else:
        host.say("building the release venv from the bundled wheels")
        build_venv(release_dir, python)
        if venv_cache is not None:
            venv_to_cache(venv_cache, venv_key(manifest, python), release_dir)
    (release_dir / INSTALLED).write_text(f"{int(time.time())}\n")
    return manifest
