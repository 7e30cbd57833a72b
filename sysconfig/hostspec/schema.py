"""Validate merged spec data against the schema (sysconfig/schema.json, shipped
as package data hostspec/data/schema.json) and turn each
jsonschema error into one `Problem` a person can act on: the key path, what
was expected (from the schema's `x-expected`), a did-you-mean hint for
unknown keys and enum values, and the line that set the value."""

from __future__ import annotations

import copy
import difflib
import functools
import json
import re
from importlib import resources

import jsonschema

from hostspec.errors import Problem
from hostspec.yamlsource import KeyPath, Origins, format_path

# Package data, so a wheel installed on a host carries it; in a checkout
# hostspec/data/schema.json is a link to sysconfig/schema.json, the one file to edit.
SCHEMA = resources.files("hostspec") / "data" / "schema.json"


@functools.cache
def load_schema() -> dict:
    return json.loads(SCHEMA.read_text(encoding="utf-8"))


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(load_schema())


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


def _show(value: object) -> str:
    if value is True or value is False:
        return str(value).lower()
    return "null" if value is None else str(value)


_TYPE_WORDS = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false",
               "object": "a mapping", "array": "a list", "null": "null"}


def _jsonable(value: object) -> object:
    """jsonschema needs string keys; YAML may give ints ({0: 512}) or booleans."""
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, bool) else str(k).lower(): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def locate(origins: Origins, path: KeyPath) -> tuple[str | None, int | None]:
    """(file, line) of `path`, or of its nearest ancestor when it was never written (defaults)."""
    for n in range(len(path), -1, -1):
        if path[:n] in origins:
            return origins[path[:n]]
    return None, None


def _original_path(data: object, json_path: KeyPath) -> KeyPath:
    """Map string keys back to the YAML keys (0 rather than '0') so origins match."""
    out, node = [], data
    for part in json_path:
        if isinstance(node, dict):
            key = next((k for k in node if (str(k).lower() if isinstance(k, bool) else str(k)) == part), part)
            out.append(key)
            node = node.get(key)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            out.append(part)
            node = node[part]
        else:
            out.append(part)
            node = None
    return tuple(out)


def _problem(origins: Origins, path: KeyPath, message: str, hint: str | None = None) -> Problem:
    file, line = locate(origins, path)
    return Problem(file, line, format_path(path) or "(top level)", message, hint)


def _did_you_mean(word: str, choices: list[str]) -> str | None:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


def _translate(err: jsonschema.ValidationError, data: object, origins: Origins) -> list[Problem]:
    path = _original_path(data, tuple(err.absolute_path))
    schema, value, kind = err.schema, err.instance, err.validator
    expected = schema.get("x-expected") if isinstance(schema, dict) else None
    label = schema.get("x-kind") if isinstance(schema, dict) else None
    if kind == "additionalProperties":
        known = sorted(schema.get("properties", {}))
        extra = [k for k in value if k not in schema.get("properties", {})]
        out = []
        for key in extra:
            kpath = _original_path(data, tuple(err.absolute_path) + (key,))
            hint = _did_you_mean(str(key), known) or ("known keys: " + ", ".join(known) if known else None)
            out.append(_problem(origins, kpath, "unknown key", hint))
        return out
    if kind == "required":
        missing = re.match(r"'(.+)' is a required property", err.message)
        name = missing.group(1) if missing else err.message
        return [_problem(origins, path, f"missing required key {name!r}")]
    if "propertyNames" in err.schema_path:
        # jsonschema reports a bad key at its parent's path, with the key as the instance
        kpath = _original_path(data, tuple(err.absolute_path) + (value,))
        return [_problem(origins, kpath, "invalid key", "expected " + _key_expectation(path))]
    if kind in ("type", "anyOf", "oneOf") and expected:
        return [_problem(origins, path, f"expected {expected}, got {describe(value)}")]
    if kind == "type":
        types = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
        words = " or ".join(_TYPE_WORDS.get(t, t) for t in types)
        return [_problem(origins, path, f"expected {words}, got {describe(value)}")]
    if kind == "pattern":
        if label:
            return [_problem(origins, path, f"bad {label} {value!r}", f"expected {expected}")]
        return [_problem(origins, path, f"invalid value {value!r}", f"expected {expected or 'to match ' + err.validator_value}")]
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        rel = {"minimum": "less than the minimum", "maximum": "greater than the maximum",
               "exclusiveMinimum": "not greater than", "exclusiveMaximum": "not less than"}[kind]
        return [_problem(origins, path, f"out of range: {_show(value)} is {rel} {_show(err.validator_value)}")]
    if kind == "enum":
        choices = [_show(c) for c in err.validator_value]
        hint = _did_you_mean(str(value), choices) if isinstance(value, str) else None
        if isinstance(value, bool) and str(value).lower() in ("true", "false") and "no" in choices:
            hint = "YAML reads yes/no as true/false: quote it, e.g. 'no'"
        return [_problem(origins, path, f"must be one of {', '.join(choices)}; got {_show(value)}", hint)]
    if kind == "const":
        if path == ("version",):
            return [_problem(origins, path, f"unsupported spec version {_show(value)}", "this ai-engine reads version 1")]
        return [_problem(origins, path, f"must be {_show(err.validator_value)}; got {_show(value)}")]
    if kind in ("minItems", "maxItems"):
        return [_problem(origins, path, f"needs {'at least' if kind == 'minItems' else 'at most'} {err.validator_value} item(s)")]
    if kind == "uniqueItems":
        return [_problem(origins, path, "items must be unique")]
    if kind == "minLength":
        return [_problem(origins, path, "must not be empty")]
    if kind in ("anyOf", "oneOf"):
        return [_problem(origins, path, f"invalid value {describe(value)}")]
    return [_problem(origins, path, err.message)]


def _key_expectation(parent: KeyPath) -> str:
    if parent[-1:] == ("per_node",):
        return "a NUMA node number like 0 or 1"
    if parent[-1:] == ("sysctl",):
        return "a sysctl name like net.core.somaxconn"
    return "a valid key"


def validate(data: object, origins: Origins) -> list[Problem]:
    """Every schema problem of `data`, in file/line order."""
    problems: list[Problem] = []
    for err in _validator().iter_errors(_jsonable(data)):
        problems.extend(_translate(err, data, origins))
    return sorted(set(problems), key=lambda p: (p.file or "", p.line or 0, p.path, p.message))


def fill_defaults(data: dict, schema: dict | None = None) -> dict:
    """Return a copy of `data` with schema defaults filled in and keys in schema order
    (so rendered output does not depend on the order keys were written in)."""
    root = load_schema()
    return _fill(data, schema or root, root)


def resolve_ref(schema: dict, root: dict) -> dict:
    while "$ref" in schema:
        ref = schema["$ref"].split("/")[-1]
        merged = dict(root["$defs"][ref])
        merged.update({k: v for k, v in schema.items() if k != "$ref"})
        schema = merged
    return schema


def _fill(value: object, schema: dict, root: dict) -> object:
    schema = resolve_ref(schema, root)
    if isinstance(value, dict) and "properties" in schema:
        out = {}
        for key, sub in schema["properties"].items():
            if key in value:
                out[key] = _fill(value[key], sub, root)
            elif "default" in sub:
                out[key] = _fill(copy.deepcopy(sub["default"]), sub, root)
        for key in value:  # keys allowed by additionalProperties
            if key not in out:
                out[key] = value[key]
        return out
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        return {k: value[k] for k in sorted(value, key=str)}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_fill(v, schema["items"], root) for v in value]
    return value
