"""Backup sets: what a provision run replaced, so `--rollback` can put it back.

A set lives in ROOT/var/lib/ai-engine/provision/backups/<UTC time>-<seq>/:
`manifest.json` (every path the run touched: did it exist, its sha256, mode
and owner, plus the live kernel values read before they were changed) and
`files/<path>`, a copy of each file as it was. The set is assembled in a
staging directory and renamed into place only when complete, so a run killed
while saving never leaves a half set that a rollback would trust. `seq` only
grows, so the newest set is found even if the clock steps back.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .filesync import FileChange, atomic_write, fsync_dir, sha256, target_path
from .report import ProvisionError

STATE_DIR = "var/lib/ai-engine/provision"
BACKUP_DIR = f"{STATE_DIR}/backups"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
STAGING_PREFIX = ".staging-"


@dataclass
class BackupSet:
    path: Path
    manifest: dict

    @property
    def seq(self) -> int:
        return int(self.path.name.rsplit("-", 1)[1])

    @property
    def consumed(self) -> bool:
        return bool(self.manifest.get("consumed"))

    def saved_copy(self, relpath: str) -> Path:
        return target_path(self.path / "files", relpath)


def backup_root(root: Path) -> Path:
    return target_path(root, BACKUP_DIR)


def _utc_stamp(now: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))


def list_sets(root: Path) -> list[BackupSet]:
    """Every complete backup set under ROOT, oldest first."""
    base = backup_root(root)
    if not base.is_dir():
        return []
    sets = []
    for entry in base.iterdir():
        if entry.name.startswith(".") or not (entry / MANIFEST).is_file():
            continue
        try:
            manifest = json.loads((entry / MANIFEST).read_text())
            int(entry.name.rsplit("-", 1)[1])
        except (ValueError, IndexError, json.JSONDecodeError) as exc:
            raise ProvisionError(f"{entry / MANIFEST}: unreadable backup manifest ({exc}); move the set aside") from exc
        sets.append(BackupSet(entry, manifest))
    return sorted(sets, key=lambda s: s.seq)


def newest_unconsumed(root: Path) -> BackupSet | None:
    pending = [s for s in list_sets(root) if not s.consumed]
    return pending[-1] if pending else None


def has_stale_staging(root: Path) -> bool:
    base = backup_root(root)
    return base.is_dir() and any(p.name.startswith(STAGING_PREFIX) for p in base.iterdir())


def remove_stale_staging(root: Path) -> list[Path]:
    """Staging directories of runs killed while saving their backup."""
    base = backup_root(root)
    if not base.is_dir():
        return []
    stale = sorted(p for p in base.iterdir() if p.name.startswith(STAGING_PREFIX))
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


def _write_manifest(directory: Path, manifest: dict) -> None:
    atomic_write(directory / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode(), 0o600)


def create_set(root: Path, changes: list[FileChange], created_dirs: list[str], live_before: list[dict]) -> Path:
    """Save the current state of every changed file (and the live values about
    to be overwritten) as a new backup set; return its directory."""
    base = backup_root(root)
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    existing = list_sets(root)
    seq = existing[-1].seq + 1 if existing else 1
    now = time.time()
    name = f"{_utc_stamp(now)}-{seq:04d}"
    staging = base / f"{STAGING_PREFIX}{name}-{os.getpid()}"
    staging.mkdir(mode=0o700)
    files = []
    for change in changes:
        entry = {
            "path": change.relpath,
            "existed": change.old is not None,
            "sha256": sha256(change.old) if change.old is not None else None,
            "mode": change.old_mode,
            "uid": change.old_uid,
            "gid": change.old_gid,
            "new_sha256": sha256(change.new),
        }
        if change.old is not None:
            copy = target_path(staging / "files", change.relpath)
            copy.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(copy, change.old, 0o600)
        files.append(entry)
    manifest = {
        "format": MANIFEST_FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "consumed": None,
        "files": files,
        "created_dirs": created_dirs,
        "live_before": live_before,
    }
    _write_manifest(staging, manifest)
    final = base / name
    os.rename(staging, final)
    fsync_dir(base)
    return final


def mark_consumed(backup: BackupSet) -> None:
    manifest = dict(backup.manifest, consumed=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    _write_manifest(backup.path, manifest)
    backup.manifest = manifest
