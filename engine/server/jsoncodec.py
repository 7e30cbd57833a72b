"""JSON on the request path: orjson (C; parses a KServe tensor's number list
~4x and writes ~10x faster than the stdlib, measured on ResNet-18's 150,528
inputs and 1,000 outputs), with the stdlib behind it for what orjson refuses
but JSON clients do send: NaN/Infinity literals (Python's json writes them)
and integers beyond 64 bits. Outputs holding non-finite floats are written by
the stdlib too, as NaN/Infinity, because orjson would write null.

Request JSON is measured before it is parsed (check_structure): a body of
60 MiB of `[[],[],...]` became 20 million lists, 2.4 GB and a 12-17 s stall
of the event loop (the GIL is held by the parser, whatever thread runs it)."""

from __future__ import annotations

import json

import numpy as np

from engine.server.errors import ServeError

try:
    import orjson
except ImportError:  # the server works without it, only slower
    orjson = None


MAX_DEPTH = 72        # numpy's 64 dims of a nested `data` list + the KServe envelope (4 levels) + headroom
_SCAN_CHUNK = 1 << 20  # bytes per vectorised step: bounds the scan's temporaries to ~14 MiB
_NON_FINITE = (b"NaN", b"Infinity")


def loads(data: bytes | memoryview):
    if orjson is not None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            # The stdlib parses what orjson refuses only for NaN/Infinity
            # literals; any other error stands, so a malformed body is not parsed twice.
            data = bytes(data) if isinstance(data, memoryview) else data
            if "infinity" not in str(exc) and not any(lit in data for lit in _NON_FINITE):
                raise
    try:
        return json.loads(bytes(data) if isinstance(data, memoryview) else data)
    except RecursionError:
        raise ServeError("JSON nests too deeply") from None


def check_structure(data: bytes | memoryview, max_elements: int, max_depth: int = MAX_DEPTH) -> None:
    """ServeError (400, 413) if `data` nests deeper than max_depth or holds more than
    max_elements values and containers (counted as commas plus opening
    brackets outside strings), found without building anything: numpy
    comparisons over 1 MiB chunks, O(len) time and bounded memory. numpy
    releases the GIL in its loops, so on a worker thread this leaves the
    event loop free."""
    buf = np.frombuffer(data, np.uint8)
    depth, elements, in_string, backslashes = 0, 0, 0, 0
    for start in range(0, len(buf), _SCAN_CHUNK):
        c = buf[start:start + _SCAN_CHUNK]
        is_quote = c == 34                        # '"'
        outside = None                            # None: every byte of the chunk is outside strings
        if in_string or is_quote.any():
            outside, in_string, backslashes = _outside_strings(c, is_quote, in_string, backslashes)
        else:
            backslashes = 0
        opens = (c == 91) | (c == 123)            # '[' '{'
        closes = (c == 93) | (c == 125)           # ']' '}'
        commas = c == 44
        if outside is not None:
            opens &= outside
            closes &= outside
            commas &= outside
        n_open = int(np.count_nonzero(opens))
        elements += n_open + int(np.count_nonzero(commas))
        if elements > max_elements:
            raise ServeError(f"request JSON holds more than {max_elements} values "
                             "(limits.max_json_elements)", status=413)
        if depth + n_open > max_depth:            # only then can the chunk go too deep: look closer
            level = np.cumsum(opens.view(np.int8) - closes.view(np.int8), dtype=np.int32)
            if depth + int(level.max()) > max_depth:
                raise ServeError(f"request JSON nests deeper than {max_depth} levels")
        depth += n_open - int(np.count_nonzero(closes))


def _outside_strings(c: np.ndarray, is_quote: np.ndarray, in_string: int, backslashes: int):
    """(mask of bytes outside strings, in_string and trailing backslashes
    carried into the next chunk)."""
    quotes = np.flatnonzero(is_quote)
    is_bs = c == 92                               # '\\'
    any_bs = bool(is_bs.any())
    if len(quotes) and (any_bs or backslashes):
        # A quote after an odd run of backslashes is escaped.
        plain = np.flatnonzero(~is_bs)
        i = np.searchsorted(plain, quotes)
        run = np.where(i > 0, quotes - 1 - plain[np.maximum(i - 1, 0)], quotes + backslashes)
        quotes = quotes[run % 2 == 0]
    if len(quotes) <= 64:   # the usual case (a few names): mark the spans, no pass over the chunk
        outside = np.full(len(c), not in_string)
        state, prev = in_string, 0
        for q in quotes.tolist():
            outside[prev:q] = not state
            state, prev = 1 - state, q
        outside[prev:] = not state
    else:
        toggles = np.zeros(len(c), np.int8)
        toggles[quotes] = 1
        outside = (np.cumsum(toggles, dtype=np.int32) + in_string) % 2 == 0
    in_string = (in_string + len(quotes)) % 2
    if any_bs and is_bs[-1]:
        plain = np.flatnonzero(~is_bs)
        backslashes = (len(c) - 1 - int(plain[-1])) if len(plain) else backslashes + len(c)
    else:
        backslashes = 0
    return outside, in_string, backslashes


def dumps(obj, *, finite: bool = True) -> bytes:
    """Compact JSON bytes; finite=False: obj may hold NaN/Infinity floats."""
    if orjson is not None and finite:
        try:
            return orjson.dumps(obj)
        except TypeError:
            pass  # a type orjson does not serialise; the stdlib may
    return json.dumps(obj, separators=(",", ":")).encode()
