"""Structured logs: one JSON object per line, one line per request plus
lifecycle events.

Always on stderr (under systemd, journald keeps it). When engine.yaml's
log_dir exists and is writable, every line also goes to log_dir/engine.log,
rotated by size (engine.log.1 is the newest old file, engine.log.N the
oldest) so the directory stays bounded without an external logrotate. On
SIGHUP the file is re-opened, so an external logrotate that moves it works too.
"""

from __future__ import annotations

import json
import os
import sys
import time

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
LOG_FILE = "engine.log"
ROTATE_BYTES = 64 << 20   # one file's size before it rotates
ROTATE_KEEP = 4           # rotated files kept: at most 5 * 64 MiB on disk


class RotatingFile:
    """Append-only text file that rotates when a write would pass max_bytes."""

    def __init__(self, path: str, max_bytes: int = ROTATE_BYTES, keep: int = ROTATE_KEEP):
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self._file = None
        self._size = 0
        self.open()

    def open(self) -> None:
        self.close()
        self._file = open(self.path, "a", encoding="utf-8")
        self._size = self._file.tell()

    def write(self, line: str) -> None:
        if self._size and self._size + len(line) > self.max_bytes:
            self.rotate()
        self._file.write(line)
        self._file.flush()    # a line per write, so a crash loses nothing and tail -f sees it
        self._size += len(line)

    def rotate(self) -> None:
        self.close()
        for i in range(self.keep - 1, 0, -1):
            older = f"{self.path}.{i}"
            if os.path.exists(older):
                os.replace(older, f"{self.path}.{i + 1}")
        if self.keep:
            os.replace(self.path, f"{self.path}.1")
        else:
            os.unlink(self.path)
        self.open()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def open_log_dir(log_dir: str | None, max_bytes: int = ROTATE_BYTES) -> tuple[RotatingFile | None, str | None]:
    """(the log file, None) when log_dir is a writable directory, else (None, why not)."""
    if not log_dir:
        return None, "no log_dir configured"
    if not os.path.isdir(log_dir):
        return None, f"{log_dir} does not exist"
    if not os.access(log_dir, os.W_OK | os.X_OK):
        return None, f"{log_dir} is not writable"
    try:
        return RotatingFile(os.path.join(log_dir, LOG_FILE), max_bytes), None
    except OSError as exc:
        return None, f"{log_dir}: {exc.strerror}"


class JsonLogger:
    def __init__(self, level: str = "info", stream=None, file: RotatingFile | None = None):
        self.threshold = LEVELS[level]
        self.stream = stream or sys.stderr
        self.file = file

    def log(self, level: str, event: str, **fields) -> None:
        if LEVELS[level] < self.threshold:
            return
        record = {"ts": round(time.time(), 6), "level": level, "event": event}
        record.update(fields)
        line = json.dumps(record, default=str, separators=(",", ":")) + "\n"
        try:
            self.stream.write(line)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed log stream must not take requests down with it
        if self.file is not None:
            try:
                self.file.write(line)
            except (OSError, ValueError) as exc:
                # Disk full or the directory gone: keep serving, say so once on stderr.
                self.file = None
                self.log("error", "log_file_failed", error=str(exc), fallback="stderr only")

    def reopen(self) -> None:
        """SIGHUP: start a new file if an external logrotate moved ours away."""
        if self.file is not None:
            try:
                self.file.open()
            except OSError as exc:
                self.file = None
                self.log("error", "log_file_failed", error=str(exc), fallback="stderr only")

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def info(self, event: str, **fields) -> None:
        self.log("info", event, **fields)

    def warning(self, event: str, **fields) -> None:
        self.log("warning", event, **fields)

    def error(self, event: str, **fields) -> None:
        self.log("error", event, **fields)
