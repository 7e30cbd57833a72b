"""One exception type per layer, all derived from EngineError. Each carries a
location and a hint so a CLI prints it as one line (``where: what (hint)``)
and exits non-zero; `print_error` is that printer, shared by `ai-engine`,
`python -m hostspec` and the invoke tasks.

The layers' bases: SpecError (hostspec.errors: the spec), ProvisionError
(hostspec.report: applying a rendered tree), ConfigError (engine.yaml),
ConversionError, ModelFormatError, KernelError, InvalidArgument (here),
ArenaError (engine.arena), FrameError (engine.wire), ServeError
(engine.server.errors: carries the answer's status), ServerError
(engine.client), DeployError (engine.deploy). docs/ARCHITECTURE.md
("Errors") lists them with the few subclasses and why each exists.
"""

from __future__ import annotations

import sys


class EngineError(Exception):
    """Base of every error ai-engine reports to a user."""

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        self.hint = hint

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.hint:
            text += f" ({self.hint})"
        return text


class KernelError(EngineError):
    """A compute kernel rejected its arguments or could not run."""


class ConversionError(EngineError):
    """An ONNX model could not be converted (unsupported op, bad graph, ...)."""


class UnsupportedOperatorError(ConversionError):
    """The model uses an operator (or attribute) the engine does not implement."""


class ModelFormatError(EngineError):
    """A .aie file is truncated, corrupted, of another format or a newer version."""


class InvalidArgument(EngineError, ValueError):
    """Inputs given to a session do not match the model (name, shape, dtype)."""


def missing_package(exc: ModuleNotFoundError, what: str, cls: type[EngineError] = EngineError) -> EngineError:
    """`what` needs a package this install lacks. On a host that is by design:
    its venv holds only what serving needs (requirements/host.in); reading
    ONNX, the tasks and the deployer's SSH are the build machine's
    (requirements/build.in, the `ai-engine[build]` extra)."""
    return cls(f"{what} needs the Python package {exc.name!r}, which is not installed here",
               hint="a host installs only what serving needs; on a build machine: pip install 'ai-engine[build]'")


def error_lines(exc: BaseException, prefix: str = "error") -> list[str]:
    """What a CLI prints for `exc`: `prefix: where: what (hint)`, one line per
    problem (a SpecError holds every problem of a spec)."""
    if isinstance(exc, OSError) and not isinstance(exc, EngineError):
        return [f"{prefix}: {exc.filename or ''}: {exc.strerror or exc}"]
    return [f"{prefix}: {line}" for line in str(exc).splitlines() or [type(exc).__name__]]


def exit_status(exc: BaseException) -> int:
    """1, or the error's own exit_code (98: serve cannot listen)."""
    return int(getattr(exc, "exit_code", 1))


def print_error(exc: BaseException, prefix: str = "error") -> int:
    """Print `exc` on stderr as every CLI here does; return its exit status."""
    for line in error_lines(exc, prefix):
        print(line, file=sys.stderr)
    return exit_status(exc)
