"""The spec's schema and its validation: merged spec data against
sysconfig/schema.json (package data hostspec/data/schema.json), whose engine:
section is the engine's own engine.yaml schema (engine/config.schema.json, the
one definition of those keys; see `engine_section`). Each jsonschema error
becomes one `Problem` a person can act on (engine.config_schema.explain says
what was wrong), located at the line that set the value."""

from __future__ import annotations

import copy
import functools
import json
from importlib import resources

import jsonschema

from engine import config_schema
from hostspec.errors import Problem
from hostspec.yamlsource import KeyPath, Origins, format_path

# Package data, so a wheel installed on a host carries it.
SCHEMA = resources.files("hostspec") / "data" / "schema.json"
DEPLOY_MODEL_KEYS = "model_deploy"  # $defs entry: the model keys only the deployer reads (source, sample, ...)


def engine_section(engine: dict, spec_defs: dict) -> dict:
    """The spec's view of the engine.yaml schema: the keys render sets itself
    (x-rendered: model path, state_dir, ...) dropped, and the deployer-side
    model keys added after the name."""
    section = {k: v for k, v in copy.deepcopy(engine).items() if not k.startswith("$") and k != "title"}
    _drop_rendered(section)
    model = section["properties"]["models"]["items"]
    deploy = spec_defs[DEPLOY_MODEL_KEYS]
    props = list(model["properties"].items())
    model["properties"] = dict(props[:1] + list(deploy["properties"].items()) + props[1:])
    model["required"] = model.get("required", []) + deploy["required"]
    return section


def _drop_rendered(schema: dict) -> None:
    props = schema.get("properties", {})
    for key in [k for k, sub in props.items() if sub.get("x-rendered")]:
        del props[key]
        if key in schema.get("required", []):
            schema["required"].remove(key)
    for sub in props.values():
        _drop_rendered(sub)
    if isinstance(schema.get("items"), dict):
        _drop_rendered(schema["items"])


@functools.cache
def load_schema() -> dict:
    """The whole spec schema. Its $defs are the engine's ($defs/size, ...) plus
    its own; a spec's own definition of a name wins (path: absolute on the host)."""
    spec = json.loads(SCHEMA.read_text(encoding="utf-8"))
    engine = config_schema.load_schema()
    spec["properties"]["engine"] = {**engine_section(engine, spec["$defs"]),
                                    **{k: v for k, v in spec["properties"]["engine"].items() if k != "$comment"}}
    spec["$defs"] = {**copy.deepcopy(engine["$defs"]), **spec["$defs"]}
    return spec


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(load_schema())


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


def _translate(err: jsonschema.ValidationError, data: object, origins: Origins) -> list[Problem]:
    path = _original_path(data, tuple(err.absolute_path))
    if "propertyNames" in err.schema_path:
        # jsonschema reports a bad key at its parent's path, with the key as the instance
        kpath = _original_path(data, tuple(err.absolute_path) + (err.instance,))
        return [_problem(origins, kpath, "invalid key", "expected " + _key_expectation(path))]
    if err.validator == "const" and path == ("version",):
        return [_problem(origins, path, f"unsupported spec version {config_schema.show(err.instance)}",
                         "this ai-engine reads version 1")]
    return [_problem(origins, _original_path(data, json_path), message, hint)
            for json_path, message, hint in config_schema.explain(err)]


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
    return config_schema.fill_defaults(data, schema or root, root)
