"""Structured logs: one JSON object per line on stderr (journald keeps it),
one line per request plus lifecycle events."""

from __future__ import annotations

import json
import sys
import time

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


class JsonLogger:
    def __init__(self, level: str = "info", stream=None):
        self.threshold = LEVELS[level]
        self.stream = stream or sys.stderr

    def log(self, level: str, event: str, **fields) -> None:
        if LEVELS[level] < self.threshold:
            return
        record = {"ts": round(time.time(), 6), "level": level, "event": event}
        record.update(fields)
        try:
            self.stream.write(json.dumps(record, default=str, separators=(",", ":")) + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed log stream must not take requests down with it

    def info(self, event: str, **fields) -> None:
        self.log("info", event, **fields)

    def warning(self, event: str, **fields) -> None:
        self.log("warning", event, **fields)

    def error(self, event: str, **fields) -> None:
        self.log("error", event, **fields)
