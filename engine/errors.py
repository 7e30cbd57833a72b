"""One exception type per layer. Each carries a location and a hint so the CLI
can print it as one line (``where: what (hint)``) and exit non-zero."""

from __future__ import annotations


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
