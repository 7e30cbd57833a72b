"""The schema of engine.yaml (engine/config.schema.json, package data) and the
JSON Schema machinery both of its readers share: engine.server.config, which
loads engine.yaml, and hostspec, which validates a spec's engine: section
against the same file (and the rest of the spec against its own schema, which
is built the same way).

`explain` turns one jsonschema error into (key path, message, hint) in words a
person can act on: what was expected (the schema's `x-expected`), a
did-you-mean for unknown keys and enum values. Callers add where: the engine
the file name, hostspec the file and line that set the value.
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
import re
from importlib import resources

import jsonschema

SCHEMA = resources.files("engine") / "config.schema.json"

KeyPath = tuple  # ('models', 0, 'name')


@functools.cache
def load_schema() -> dict:
    """The engine.yaml schema. Cached and shared: callers copy before changing it."""
    return json.loads(SCHEMA.read_text(encoding="utf-8"))


@functools.cache
def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(load_schema())


def format_path(path: KeyPath) -> str:
    """('engine', 'models', 0, 'name') -> 'engine.models[0].name'."""
    text = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text


def resolve_ref(schema: dict, root: dict) -> dict:
    """`schema` with its local `$ref`s (#/$defs/<name>) merged in, outermost keys winning."""
    while "$ref" in schema:
        ref = schema["$ref"].split("/")[-1]
        merged = dict(root["$defs"][ref])
        merged.update({k: v for k, v in schema.items() if k != "$ref"})
        schema = merged
    return schema


def subschema(root: dict, path: KeyPath) -> dict:
    """The resolved schema of the value at `path` (list indices step into items)."""
    schema = resolve_ref(root, root)
    for part in path:
        schema = resolve_ref(schema["items"] if isinstance(part, int) else schema["properties"][part], root)
    return schema


def fill_defaults(value: object, schema: dict, root: dict) -> object:
    """A copy of `value` with schema defaults filled in and keys in schema order
    (so rendered output does not depend on the order keys were written in)."""
    schema = resolve_ref(schema, root)
    if isinstance(value, dict) and "properties" in schema:
        out = {}
        for key, sub in schema["properties"].items():
            if key in value:
                out[key] = fill_defaults(value[key], sub, root)
            elif "default" in sub:
                out[key] = fill_defaults(copy.deepcopy(sub["default"]), sub, root)
        for key in value:  # keys allowed by additionalProperties
            if key not in out:
                out[key] = value[key]
        return out
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        return {k: value[k] for k in sorted(value, key=str)}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [fill_defaults(v, schema["items"], root) for v in value]
    return value


def describe(value: object) -> str:
    """How a wrong value is named in a message: "string 'lots'", "boolean true", "a list"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"{type(value).__name__} {value!s}"


def show(value: object) -> str:
    """A schema value as YAML writes it: true, null, 8."""
    if value is True or value is False:
        return str(value).lower()
    return "null" if value is None else str(value)


def did_you_mean(word: str, choices: list[str]) -> str | None:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


_TYPE_WORDS = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false",
               "object": "a mapping", "array": "a list", "null": "null"}
_RANGE_WORDS = {"minimum": "less than the minimum", "maximum": "greater than the maximum",
                "exclusiveMinimum": "not greater than", "exclusiveMaximum": "not less than"}


def explain(err: jsonschema.ValidationError) -> list[tuple[KeyPath, str, str | None]]:
    """(key path, message, hint) for each problem one jsonschema error stands for
    (an additionalProperties error names every unknown key)."""
    path = tuple(err.absolute_path)
    schema, value, kind = err.schema, err.instance, err.validator
    expected = schema.get("x-expected") if isinstance(schema, dict) else None
    label = schema.get("x-kind") if isinstance(schema, dict) else None
    if kind == "additionalProperties":
        known = sorted(schema.get("properties", {}))
        return [(path + (key,), "unknown key", did_you_mean(str(key), known) or
                 ("known keys: " + ", ".join(known) if known else None))
                for key in value if key not in schema.get("properties", {})]
    if kind == "required":
        missing = re.match(r"'(.+)' is a required property", err.message)
        return [(path, f"missing required key {missing.group(1) if missing else err.message!r}", None)]
    if kind in ("type", "anyOf", "oneOf") and expected:
        return [(path, f"expected {expected}, got {describe(value)}", None)]
    if kind == "type":
        types = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
        words = " or ".join(_TYPE_WORDS.get(t, t) for t in types)
        return [(path, f"expected {words}, got {describe(value)}", None)]
    if kind == "pattern":
        if label:
            return [(path, f"bad {label} {value!r}", f"expected {expected}")]
        return [(path, f"invalid value {value!r}", f"expected {expected or 'to match ' + err.validator_value}")]
    if kind in _RANGE_WORDS:
        return [(path, f"out of range: {show(value)} is {_RANGE_WORDS[kind]} {show(err.validator_value)}", None)]
    if kind == "enum":
        choices = [show(c) for c in err.validator_value]
        hint = did_you_mean(str(value), choices) if isinstance(value, str) else None
        if isinstance(value, bool) and "no" in choices:
            hint = "YAML reads yes/no as true/false: quote it, e.g. 'no'"
        return [(path, f"must be one of {', '.join(choices)}; got {show(value)}", hint)]
    if kind == "const":
        return [(path, f"must be {show(err.validator_value)}; got {show(value)}", None)]
    if kind in ("minItems", "maxItems"):
        bound = "at least" if kind == "minItems" else "at most"
        return [(path, f"needs {bound} {err.validator_value} item(s)", None)]
    if kind == "uniqueItems":
        return [(path, "items must be unique", None)]
    if kind == "minLength":
        return [(path, "must not be empty", None)]
    if kind in ("anyOf", "oneOf"):
        return [(path, f"invalid value {describe(value)}", None)]
    return [(path, err.message, None)]
