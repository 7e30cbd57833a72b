"""PyYAML syntax errors in plain words.

PyYAML says "expected <block end>, but found '<block mapping start>'" where a
person wrote a key one space off, and points at the end of the file for a
quote opened twenty lines earlier. This maps the errors spec authors make
(tabs, unclosed quotes and brackets, indentation, a missing ': ') to a
message about what they wrote, located where the fix goes, with a hint.
"""

from __future__ import annotations

import re

import yaml

from hostspec.errors import Problem

_CLOSERS = {"flow sequence": ("[", "]"), "flow mapping": ("{", "}")}


def _at(mark) -> tuple[int | None, int | None]:
    return (mark.line + 1, mark.column + 1) if mark is not None else (None, None)


def _explain(exc: yaml.MarkedYAMLError) -> tuple[object, str, str | None]:
    """(mark to report, message, hint) for one PyYAML error."""
    problem, context = exc.problem or "", exc.context or ""
    here, opened = exc.problem_mark, exc.context_mark or exc.problem_mark
    if "'\\t' that cannot start any token" in problem:
        return here, "a tab character", "YAML indents with spaces only; replace the tab with spaces"
    m = re.match(r"found character '(.+)' that cannot start any token", problem)
    if m:
        return here, f"a value cannot start with {m.group(1)!r}", f"quote the value, e.g. \"{m.group(1)}...\""
    if context.startswith("while scanning a quoted scalar") and "end of stream" in problem:
        return opened, "unclosed quote: this string never ends", "add the closing quote on the same line"
    m = re.match(r"found unknown escape character '(.+)'", problem)
    if m:
        return here, f"unknown escape \\{m.group(1)} in a double-quoted string", \
            "use single quotes, or write \\\\ for a backslash"
    m = re.match(r"while parsing a (flow sequence|flow mapping)", context)
    if m:
        opener, closer = _CLOSERS[m.group(1)]
        return opened, f"unclosed {opener!r}: no matching {closer!r} before line {here.line + 1}", \
            f"close it with {closer!r}, or write the items one per line"
    if problem.startswith("expected <block end>, but found '-'"):
        return here, "a list item ('- ') where a key was expected", \
            "indent the list under its key, or make every item of the list a '- ' line"
    if problem.startswith("expected <block end>"):
        message = ("bad indentation: this line lines up with none of the keys above it "
                   f"(the mapping from line {opened.line + 1})")
        return here, message, "keys of one mapping start in the same column; indent with spaces"
    if problem == "mapping values are not allowed here":
        return here, "unexpected ':' (a key cannot start in the middle of a value)", \
            "check the indentation of this line, or quote a value that contains ': '"
    if problem == "could not find expected ':'":
        return opened, "a line that is not 'key: value'", "write key, colon, space, value; or indent it under a key"
    m = re.match(r"found undefined alias '(.+)'", problem)
    if m:
        return here, f"unknown alias *{m.group(1)}", f"define the anchor &{m.group(1)} first, or quote the value"
    return here or opened, f"{problem} ({context})" if context else problem or "unreadable YAML", None


def syntax_problem(display: str, exc: yaml.YAMLError) -> Problem:
    """One located, plain-words Problem for a YAML error in `display`."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return Problem(display, None, "", f"YAML syntax error: {exc}")
    mark, message, hint = _explain(exc)
    line, column = _at(mark)
    return Problem(display, line, "", f"YAML syntax error: {message}", hint, column=column)
