"""Install rendered files into a root directory: plan, diff, atomic write.

A file is replaced only when its bytes or mode differ, through a temp file in
the same directory (so the rename cannot cross filesystems), fsynced, then
renamed over the target and the directory fsynced: after a crash or kill -9
the target holds either the old or the new content, never a mix. A temp file
left behind by a killed run carries TEMP_MARK in its name and is removed by
the next apply.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .report import ProvisionError

# Temp files are named ".<target name>.aie-tmp.<random>" next to the target;
# the marker is what makes them recognisable (and removable) after a crash.
TEMP_MARK = ".aie-tmp."


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def target_path(root: Path, relpath: str) -> Path:
    """ROOT/relpath, refusing paths that would land outside ROOT."""
    pure = PurePosixPath(relpath)
    if pure.is_absolute() or not pure.parts or ".." in pure.parts:
        raise ProvisionError(f"rendered path {relpath!r}: must be relative to the root, without '..'")
    return root.joinpath(*pure.parts)


@dataclass
class FileChange:
    """One rendered file against what ROOT holds now."""

    relpath: str
    target: Path
    new: bytes
    new_mode: int
    old: bytes | None  # None: the file does not exist yet
    old_mode: int | None
    old_uid: int | None = None
    old_gid: int | None = None

    @property
    def changed(self) -> bool:
        return self.old != self.new or self.old_mode != self.new_mode

    def describe(self) -> str:
        if self.old is None:
            return f"new file, {len(self.new)} bytes, mode {self.new_mode:04o}"
        what = []
        if self.old != self.new:
            what.append("content differs")
        if self.old_mode != self.new_mode:
            what.append(f"mode {self.old_mode:04o} -> {self.new_mode:04o}")
        return ", ".join(what)

    def unified_diff(self) -> str | None:
        if self.old == self.new:
            return None
        try:
            old_text = (self.old or b"").decode("utf-8")
            new_text = self.new.decode("utf-8")
        except UnicodeDecodeError:
            return f"Binary files {self.target} and {self.relpath} (spec) differ\n"
        lines = difflib.unified_diff(
            old_text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile=f"{self.target} (host)" if self.old is not None else "/dev/null",
            tofile=f"{self.relpath} (spec)",
        )
        # A last line without a newline would glue itself to the next header.
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def read_current(target: Path) -> tuple[bytes | None, os.stat_result | None]:
    try:
        st = target.lstat()
    except FileNotFoundError:
        return None, None
    if stat.S_ISDIR(st.st_mode):
        raise ProvisionError(f"{target}: is a directory, expected a file (or nothing) there")
    return target.read_bytes(), st


def plan_files(tree: dict, root: Path) -> list[FileChange]:
    """Compare every rendered file with ROOT, in sorted path order."""
    changes = []
    for relpath in sorted(tree):
        rendered = tree[relpath]
        target = target_path(root, relpath)
        old, st = read_current(target)
        changes.append(
            FileChange(
                relpath=relpath,
                target=target,
                new=rendered.content,
                new_mode=rendered.mode,
                old=old,
                old_mode=stat.S_IMODE(st.st_mode) if st else None,
                old_uid=st.st_uid if st else None,
                old_gid=st.st_gid if st else None,
            )
        )
    return changes


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def missing_dirs(targets: list[Path], root: Path) -> list[Path]:
    """Directories between ROOT and the targets that do not exist yet,
    outermost first: what an apply will create and a rollback may remove."""
    missing: set[Path] = set()
    for target in targets:
        parent = target.parent
        while parent != root and not parent.exists():
            missing.add(parent)
            parent = parent.parent
    return sorted(missing, key=lambda p: (len(p.parts), str(p)))


def make_dirs(dirs: list[Path]) -> None:
    for directory in dirs:  # outermost first, see missing_dirs
        directory.mkdir(mode=0o755, exist_ok=True)
        fsync_dir(directory.parent)


def atomic_write(target: Path, content: bytes, mode: int, *, uid: int | None = None, gid: int | None = None) -> None:
    """Replace target with content in one rename (see the module docstring)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}{TEMP_MARK}", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)  # mkstemp creates 0600; umask must not decide the mode
            if uid is not None and gid is not None and os.geteuid() == 0:
                os.fchown(handle.fileno(), uid, gid)  # keep the owner of the file being replaced
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(target.parent)


def atomic_remove(target: Path) -> bool:
    try:
        target.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(target.parent)
    return True


def stale_temps(tree: dict, root: Path) -> list[Path]:
    """Temp files an interrupted run left next to the targets of this tree."""
    found = []
    for relpath in sorted(tree):
        target = target_path(root, relpath)
        if target.parent.is_dir():
            found.extend(sorted(target.parent.glob(f".{target.name}{TEMP_MARK}*")))
    return found
