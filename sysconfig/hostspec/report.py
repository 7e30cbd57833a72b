"""What a provision run did (or, with --check, would do), item by item.

One `ItemResult` per file or live knob, so an operator sees every difference
explained on its own line — the ansible `--check --diff` / `tuned-adm verify`
model. `ProvisionReport` is what `provision`, `rollback` and the CLIs share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import EngineError

# "host": a warning from the pre-flight host check, reported as a note.
KINDS = ("file", "sysctl", "hugepages", "thp", "grub", "cmdline", "systemd", "user", "host")
# changed/unchanged: an apply run; drift/in-sync: a --check run; note: nothing
# to do or nothing that could be done here, with the reason in `detail`.
STATUSES = ("changed", "unchanged", "drift", "in-sync", "failed", "note")


class ProvisionError(EngineError):
    """Provisioning cannot start or continue (not root, no backup to roll back
    to, unreadable tree). The message is one line, ready for the user."""


@dataclass
class ItemResult:
    kind: str
    name: str
    status: str
    detail: str = ""
    diff: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"ItemResult.kind {self.kind!r}: expected one of {', '.join(KINDS)}")
        if self.status not in STATUSES:
            raise ValueError(f"ItemResult.status {self.status!r}: expected one of {', '.join(STATUSES)}")

    def line(self) -> str:
        text = f"{self.status:>9}  {self.kind:<9} {self.name}"
        return f"{text}: {self.detail}" if self.detail else text


@dataclass
class ProvisionReport:
    items: list[ItemResult] = field(default_factory=list)
    backup_set: Path | None = None
    reboot_required: bool = False
    rolled_back: bool = False  # backup_set is the set a rollback restored, not one it saved

    def count(self, status: str) -> int:
        return sum(1 for item in self.items if item.status == status)

    def summary(self) -> str:
        """`3 changed, 4 unchanged` for an apply, `1 drifted, 6 in sync` for a
        check; failures and notes are appended only when there are any."""
        if any(item.status in ("drift", "in-sync") for item in self.items):
            parts = [f"{self.count('drift')} drifted", f"{self.count('in-sync')} in sync"]
        else:
            parts = [f"{self.count('changed')} changed", f"{self.count('unchanged')} unchanged"]
        if self.count("failed"):
            parts.append(f"{self.count('failed')} failed")
        if self.count("note"):
            n = self.count("note")
            parts.append(f"{n} note" + ("s" if n != 1 else ""))
        return ", ".join(parts)

    @property
    def drifted(self) -> bool:
        return any(item.status == "drift" for item in self.items)

    @property
    def failed(self) -> bool:
        return any(item.status == "failed" for item in self.items)

    def lines(self, *, diffs: bool = True) -> list[str]:
        """Human-readable report: unchanged/in-sync items are left out (the
        summary counts them), diffs follow the item they belong to."""
        out: list[str] = []
        for item in self.items:
            if item.status in ("unchanged", "in-sync"):
                continue
            out.append(item.line())
            if diffs and item.diff:
                out.append(item.diff.rstrip("\n"))
        if self.reboot_required:
            out.append("reboot required: kernel cmdline changed")
        if self.backup_set is not None:
            out.append(f"{'restored backup set' if self.rolled_back else 'backup set'}: {self.backup_set}")
        out.append(self.summary())
        return out
