"""Parse the human units the host spec, engine.yaml and the arena API accept:
sizes ('512M', '1.5T', '2MiB'), durations ('10s', '500ms') and percentages
('800%'). The one parser of each: the engine's config loader, engine.arena and
hostspec (which runs where the engine wheel is installed) all import it. Each
parser names what it expected in its error, so the message stands alone on one
line."""

from __future__ import annotations

import re
from fractions import Fraction

# Binary multiples, as the kernel and systemd read K/M/G/T (1024-based).
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# 'MiB' spells the same binary unit; '4GB' stays an error, as GB is 10^9 to many readers.
_SIZE_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(?:([KMGT])(?:iB)?)?$")
SIZE_EXPECTED = "a size like 512M, 4G or 1.5T (K, M, G, T = 1024-based) or a whole number of bytes"

_DURATION_UNITS = {"ms": Fraction(1, 1000), "s": Fraction(1), "min": Fraction(60), "h": Fraction(3600)}
_DURATION_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ms|s|min|h)?$")
DURATION_EXPECTED = "seconds as a number, or a duration like 500ms, 10s, 2min, 1h"

_PERCENT_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(%)$")
PERCENT_EXPECTED = "a percentage like 25% or a plain number of percent"


class UnitError(ValueError):
    """A value could not be read in the unit its key expects; str() is the message."""


def _describe(value: object) -> str:
    return repr(value) if isinstance(value, str) else f"{type(value).__name__} {value!r}"


def _number(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


def _scaled(value: object, *, where: str, numbers: tuple, pattern: re.Pattern, scale: dict, noun: str,
            expected: str) -> Fraction | int | float:
    """A plain number of one of `numbers` (>= 0) as it is, or a string
    `<number><unit>` matched by `pattern`, as an exact Fraction times scale[unit]."""
    if isinstance(value, bool) or not isinstance(value, (*numbers, str)):
        raise UnitError(f"{where}: expected {expected}, got {_describe(value)}")
    if not isinstance(value, str):
        if value < 0:
            raise UnitError(f"{where}: {noun} must not be negative, got {value}")
        return value
    m = pattern.match(value.strip())
    if not m:
        raise UnitError(f"{where}: bad {noun} {value!r}: expected {expected}")
    return Fraction(m.group(1)) * scale[m.group(2) or ""]


def parse_size(value: int | str, *, where: str) -> int:
    """'4G' '512M' '1.5T' '64K' '2MiB' -> bytes (1024-based); an int passes through."""
    exact = _scaled(value, where=where, numbers=(int,), pattern=_SIZE_RE, scale=_SIZE_UNITS, noun="size",
                    expected=SIZE_EXPECTED)
    if isinstance(exact, Fraction) and exact.denominator != 1:
        raise UnitError(f"{where}: bad size {value!r}: not a whole number of bytes ({float(exact)})")
    return int(exact)


def parse_duration(value: int | float | str, *, where: str) -> int | float:
    """'500ms' '10s' '2min' '1h' or a number of seconds -> seconds (int when whole)."""
    seconds = _scaled(value, where=where, numbers=(int, float), pattern=_DURATION_RE,
                      scale={**_DURATION_UNITS, "": Fraction(1)}, noun="duration", expected=DURATION_EXPECTED)
    return _number(seconds) if isinstance(seconds, Fraction) else seconds


def parse_percent(value: int | float | str, *, where: str) -> int | float:
    """'800%' or 800 -> 800 (percent, int when whole)."""
    percent = _scaled(value, where=where, numbers=(int, float), pattern=_PERCENT_RE, scale={"%": Fraction(1)},
                      noun="percentage", expected=PERCENT_EXPECTED)
    return _number(percent) if isinstance(percent, Fraction) else percent


def format_size(n: int) -> str:
    """Shortest exact K/M/G/T spelling of a byte count ('2M' for 2097152)."""
    for unit in ("T", "G", "M", "K"):
        if n and n % _SIZE_UNITS[unit] == 0:
            return f"{n // _SIZE_UNITS[unit]}{unit}"
    return str(n)
