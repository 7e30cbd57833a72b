"""Spec problems as data. Every check reports `Problem`s (file, line, key
path, what is wrong, hint); `SpecError` carries all of them, never just the
first, so a user fixes a spec in one round trip."""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import EngineError


@dataclass(frozen=True)
class Problem:
    """One line of a report: `spec.yaml:14: host.hugepages.cout: unknown key (did you mean 'count'?)`."""

    file: str | None
    line: int | None
    path: str
    message: str
    hint: str | None = None
    severity: str = "error"  # or "warning"
    column: int | None = None  # 1-based; only YAML syntax errors know it

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = f"{self.file}: "
            if self.line is not None:
                where = f"{self.file}:{self.line}:{self.column}: " if self.column else f"{self.file}:{self.line}: "
        text = f"{where}{self.path}: " if self.path else where
        if self.severity != "error":
            text += f"{self.severity}: "
        text += self.message
        if self.hint:
            text += f" ({self.hint})"
        return text


class SpecError(EngineError):
    """Raised with ALL problems found in a spec (errors only; warnings travel on
    Spec); str() is one line per problem, as engine.errors.print_error prints it."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
