"""What a person watching a deploy sees: one line per pipeline step (with a
spinner while it runs, 'unchanged' when skipped), host events as they
happen, and a final per-host table: host, release, outcome, time, reason."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterable

from rich.console import Console
from rich.table import Table

from engine.deploy.balancer_rollout import HTTP_BACKEND
from engine.deploy.haproxy import ServerStat
from engine.deploy.targets import HostResult

STYLE = {"deployed": "green", "unchanged": "green", "restarted": "green", "switched": "green", "stopped": "green",
         "ready": "green", "started": "green", "reloaded": "green", "updated": "green",
         "rolled-back": "yellow", "skipped": "yellow", "not-running": "yellow", "failed": "red", "unreachable": "red"}


def default_console() -> Console:
    """Rich's console for a terminal; piped (a file, CI, grep) it neither wraps
    nor colours, so URLs and fix commands stay whole on one line each."""
    console = Console(highlight=False)
    if console.is_terminal:
        return console
    return Console(highlight=False, soft_wrap=True, width=100_000, no_color=True)


class Reporter:
    def __init__(self, console: Console | None = None, quiet: bool = False):
        self.console = console or default_console()
        self.quiet = quiet

    def note(self, message: str) -> None:
        if not self.quiet:
            self.console.print(message)

    @contextmanager
    def step(self, name: str):
        """Time a pipeline step; the body may set state["detail"] (what it made, or why it skipped)."""
        state = {"detail": ""}
        t0 = time.monotonic()
        if self.quiet:
            yield state
            return
        with self.console.status(f"{name} …", spinner="dots"):
            yield state
        detail = state["detail"]
        self.console.print(f"[green]✓[/] {name:<22} {time.monotonic() - t0:6.1f} s  [dim]{detail}[/]")

    def host(self, name: str, message: str) -> None:
        if not self.quiet:
            self.console.print(f"  [cyan]{name}[/]: {message}")

    def host_done(self, result: HostResult) -> None:
        if not self.quiet:
            colour = STYLE.get(result.status, "white")
            self.console.print(f"  [cyan]{result.name}[/]: [{colour}]{result.status}[/] in {result.seconds:.1f} s")
            for warning in result.warnings:
                self.console.print(f"  [cyan]{result.name}[/]: [yellow]warning:[/] {warning}")

    def table(self, results: Iterable[HostResult], title: str = "deploy") -> None:
        table = Table(title=title, title_justify="left")
        wrap = self.console.is_terminal  # piped: each reason stays on one line
        for col in ("host", "release", "outcome", "time", "reason"):
            table.add_column(col, overflow="fold", no_wrap=not wrap,
                             max_width=90 if col == "reason" and wrap else None)
        for r in results:
            colour = STYLE.get(r.status, "white")
            reason = r.reason or (f"[yellow]{len(r.warnings)} warning(s), see above[/]" if r.warnings else "")
            table.add_row(r.name, r.active or r.version or "-", f"[{colour}]{r.status}[/]", f"{r.seconds:.1f} s",
                          reason)
        self.console.print(table)

    def status_table(self, results: Iterable[HostResult]) -> None:
        results = list(results)
        balanced = any("balancer" in r.data for r in results)
        table = Table(title="status", title_justify="left")
        for col in ("host", "release", "pid", "health", *(["balancer"] if balanced else []), "uptime",
                    "releases installed"):
            table.add_column(col, overflow="fold")
        for r in results:
            d = r.data
            lb = [balancer_cell(d.get("balancer", {}))] if balanced else []
            if r.status == "failed":
                table.add_row(r.name, "-", "-", f"[red]{r.reason}[/]", *lb, "-", "-")
                continue
            up = d.get("uptime_s")
            table.add_row(r.name, d.get("active") or "-", str(d.get("pid") or "-"),
                          f"[{STYLE.get(d.get('health'), 'red')}]{d.get('health')}[/]", *lb,
                          _duration(up) if up is not None else "-", ", ".join(d.get("releases", [])))
        self.console.print(table)


def balancer_cell(entries: dict[str, list[ServerStat]]) -> str:
    """A host's state and weight on each balancer: its HTTP backend's, and
    the binary backend's where that differs."""
    parts = []
    for lb, stats in entries.items():
        if not stats:
            text = "not behind it"
        else:
            http = next((s for s in stats if s.backend == HTTP_BACKEND), stats[0])
            text = f"{http.status} weight {http.weight}"
            others = [f"{s.backend.removeprefix('ai_engine_')} {s.status} weight {s.weight}" for s in stats
                      if (s.status, s.weight) != (http.status, http.weight)]
            text += f" ({', '.join(others)})" if others else ""
        parts.append(text if len(entries) == 1 else f"{lb}: {text}")
    return "; ".join(parts) or "-"


def _duration(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
