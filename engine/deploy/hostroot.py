"""The deploy state under one ROOT on a host: releases, the `current`
link, the activation history and the lock (host side: stdlib only).

Layout under ROOT:
    opt/ai-engine/releases/<version>/   the extracted bundle + venv/ + .installed
    opt/ai-engine/current -> releases/<version>   switched atomically
    opt/ai-engine/history.json          activations, newest last (rollback order)
    opt/ai-engine/deploy.lock           one deploy/rollback/stop per root at a time
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from engine.deploy import DeployError

BASE = "opt/ai-engine"
INSTALLED = ".installed"   # written last: a release without it is incomplete
MANIFEST = "MANIFEST.json"


def _say(message: str) -> None:
    # Progress goes to stderr; stdout carries only the result line.
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class HostRoot:
    """The deploy state under one ROOT: releases, `current`, history."""

    def __init__(self, root: Path, say: Callable[[str], None] = _say):
        self.root = Path(root).resolve()
        self.base = self.root / BASE
        self.releases = self.base / "releases"
        self.current = self.base / "current"
        self.history_file = self.base / "history.json"
        self.say = say
        self.config_changed = 0  # files the last provision_config changed (to undo after a failed first deploy)

    # ---- state -------------------------------------------------------------
    def release(self, version: str) -> Path:
        return self.releases / version

    def installed(self, version: str) -> bool:
        return (self.release(version) / INSTALLED).is_file()

    def active(self) -> str | None:
        try:
            target = os.readlink(self.current)
        except OSError:
            return None
        return Path(target).name

    def history(self) -> list[dict]:
        try:
            return json.loads(self.history_file.read_text())
        except (OSError, ValueError):
            return []

    def _write_json(self, path: Path, data) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)

    def record(self, version: str, event: str) -> None:
        entries = self.history()[-199:]  # bounded: a fleet deploys for years
        entries.append({"version": version, "event": event, "at": int(time.time())})
        self._write_json(self.history_file, entries)

    def previous(self) -> str | None:
        """The release activated before the active one that is still installed."""
        active = self.active()
        for entry in reversed(self.history()):
            v = entry["version"]
            if entry["event"] == "activated" and v != active and self.installed(v):
                return v
        return None

    @contextmanager
    def locked(self):
        self.base.mkdir(parents=True, exist_ok=True)
        with open(self.base / "deploy.lock", "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise DeployError("another deploy, rollback or stop is running", where=str(self.base / "deploy.lock"),
                                  hint="wait for it to finish") from None
            yield

    # ---- switching ---------------------------------------------------------
    def switch(self, version: str | None) -> None:
        """Point `current` at releases/<version> atomically (a temp symlink
        renamed over it; `ln -sfn` unlinks first and so is not atomic), or
        remove it (None)."""
        if version is None:
            self.current.unlink(missing_ok=True)
            return
        tmp = self.base / f".current.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        os.symlink(f"releases/{version}", tmp)
        os.replace(tmp, self.current)
        fd = os.open(self.base, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def prune(self, keep: int) -> list[str]:
        """Remove complete releases beyond the `keep` most recently activated
        (never the active one). Releases that never served rank last, so a
        failed release goes before a good one."""
        if not self.releases.is_dir():
            return []
        active = self.active()
        order = {e["version"]: i for i, e in enumerate(self.history()) if e["event"] == "activated"}
        complete = sorted((d for d in self.releases.iterdir() if (d / INSTALLED).is_file()),
                          key=lambda d: (order.get(d.name, -1), (d / INSTALLED).stat().st_mtime), reverse=True)
        keepers = {active} | {d.name for d in complete[:keep]}
        removed = []
        for d in complete[keep:]:
            if d.name not in keepers:
                shutil.rmtree(d)
                removed.append(d.name)
        return removed


def read_manifest(release_dir: Path) -> dict:
    path = release_dir / MANIFEST
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DeployError(f"unreadable bundle manifest: {exc}", where=str(path),
                          hint="the bundle is damaged or not an ai-engine bundle; rebuild it (invoke bundle)") from None


def run_command(cmd: list[str], what: str, timeout_s: float = 900.0, **kw) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, **kw)
    except subprocess.TimeoutExpired:
        raise DeployError(f"{what}: no result after {timeout_s:g} s", where=" ".join(cmd[:3])) from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise DeployError(f"{what} failed (exit {proc.returncode}): {' | '.join(tail)}", where=cmd[0])
    return proc
