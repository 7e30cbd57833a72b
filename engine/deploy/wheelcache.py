"""Built wheels kept outside the build directory, by the digest of what went
into them: after `make clean`, in a second checkout, or in a test's fresh
build directory, a deploy whose dependency or engine wheel inputs did not
change takes the wheels from here instead of running `pip wheel` and the
engine wheel's build again.

Where: $AIE_CACHE_DIR, else $XDG_CACHE_HOME/ai-engine, else
~/.cache/ai-engine (AIE_CACHE_DIR=off: no cache). Each entry is
wheels/<kind>-<key>/ holding the wheels and CONTENTS (one "sha256 name" line
per wheel), written last and renamed into place with its directory, so a
half-written entry is never read. An entry is used only when every wheel
still has its recorded sha256. The newest KEEP entries of each kind stay.

The cache only ever saves time: a cache that cannot be read or written is
treated as empty, never as a deploy error.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from engine.deploy.prepare import link_or_copy

KEEP = 3
CONTENTS = "CONTENTS"


def cache_dir() -> Path | None:
    """The cache's root, or None when AIE_CACHE_DIR=off."""
    env = os.environ.get("AIE_CACHE_DIR")
    if env == "off":
        return None
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ai-engine"


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _entry(kind: str, key: str) -> Path | None:
    root = cache_dir()
    return None if root is None else root / "wheels" / f"{kind}-{key}"


def fetch(kind: str, key: str, out_dir: Path) -> list[Path] | None:
    """The entry's wheels placed in out_dir (emptied first), or None on a miss."""
    entry = _entry(kind, key)
    if entry is None:
        return None
    try:
        lines = (entry / CONTENTS).read_text().splitlines()
        recorded = [line.split(" ", 1) for line in lines if line.strip()]
        if not recorded or any(_sha256(entry / name) != sha for sha, name in recorded):
            return None
        shutil.rmtree(out_dir, ignore_errors=True)
        out_dir.mkdir(parents=True)
        for _, name in recorded:
            link_or_copy(entry / name, out_dir / name)
        os.utime(entry)  # used now: pruned last
    except (OSError, ValueError):
        return None
    return sorted(out_dir / name for _, name in recorded)


def store(kind: str, key: str, wheels: list[Path]) -> None:
    """Keep `wheels` as the entry for (kind, key); prune older entries of kind."""
    entry = _entry(kind, key)
    if entry is None:
        return
    tmp = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for wheel in wheels:
            link_or_copy(wheel, tmp / wheel.name)
        (tmp / CONTENTS).write_text("".join(f"{_sha256(w)} {w.name}\n" for w in wheels))
        if entry.exists():
            shutil.rmtree(entry)  # an entry that failed its check in fetch
        os.rename(tmp, entry)
        _prune(entry.parent, kind)
    except OSError:
        pass  # an unwritable cache costs the next deploy the build, nothing else
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _prune(root: Path, kind: str) -> None:
    entries = sorted((d for d in root.glob(f"{kind}-*") if d.is_dir()), key=lambda d: d.stat().st_mtime, reverse=True)
    for old in entries[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
