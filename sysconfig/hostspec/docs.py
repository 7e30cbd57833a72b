"""Generate the README's "Tasks" and "Spec reference" sections.

    python -m hostspec.docs                 # print the spec reference
    python -m hostspec.docs --write README.md   # refresh both generated sections
    python -m hostspec.docs --check README.md   # exit 1 when README is stale

The spec reference comes from sysconfig/schema.json and, for the engine:
section, engine/config.schema.json (together the single source of keys,
types, defaults and meanings); the task list is `invoke --list`.
tests/sysconfig/test_spec_docs.py fails when README and these disagree.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from engine.config_schema import resolve_ref
from hostspec.schema import load_schema

REPO = Path(__file__).resolve().parents[2]
SECTIONS = ("tasks", "spec-reference")
REGEN = "python -m hostspec.docs --write README.md"


def _type(schema: dict, root: dict) -> str:
    s = resolve_ref(schema, root)
    kind = s.get("x-kind")
    if "anyOf" in s:
        parts = [_type(o, root) for o in s["anyOf"]]
        return " or ".join(dict.fromkeys(parts))
    if kind:
        return kind
    if "const" in s:
        return json.dumps(s["const"])
    if "enum" in s:
        return " \\| ".join(v if isinstance(v, str) else json.dumps(v) for v in s["enum"])
    t = s.get("type")
    if t == "array":
        return f"list of {_type(s.get('items', {}), root)}"
    if t == "object" and isinstance(s.get("additionalProperties"), dict):
        return f"map of {_type(s['additionalProperties'], root)}"
    if t == "object":
        return "map"
    if isinstance(t, list):
        return " or ".join(t)
    return t or "any"


def _default(schema: dict) -> str:
    if "default" not in schema:
        return "required"
    value = schema["default"]
    if isinstance(value, dict) and value and all(not isinstance(v, dict) for v in value.values()):
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    if value == {}:
        return ""
    return json.dumps(value) if not isinstance(value, str) else value


def _rows(schema: dict, path: str, root: dict, out: list[tuple[str, str, str, str]]) -> None:
    s = resolve_ref(schema, root)
    for key, sub in s.get("properties", {}).items():
        key_path = f"{path}.{key}" if path else key
        rs = resolve_ref(sub, root)
        default = _default(sub) if key not in s.get("required", []) else "required"
        out.append((key_path, _type(sub, root), default, rs.get("description", "")))
        if "properties" in rs:
            _rows(rs, key_path, root, out)
        elif rs.get("type") == "array" and "properties" in resolve_ref(rs.get("items", {}), root):
            _rows(rs["items"], key_path + "[]", root, out)


def spec_reference() -> str:
    root = load_schema()
    rows: list[tuple[str, str, str, str]] = []
    _rows(root, "", root, rows)
    cell = lambda text: str(text).replace("|", "\\|") if "\\|" not in str(text) else str(text)  # noqa: E731
    lines = [
        "Generated from `sysconfig/schema.json` (its `engine:` keys from `engine/config.schema.json`, the schema of "
        "engine.yaml) by `python -m hostspec.docs`; do not edit by hand.",
        root["description"],
        "",
        "| Key | Type | Default | Meaning |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| `{k}` | {cell(t)} | {('`' + cell(d) + '`') if d not in ('', 'required') else d} | {cell(m)} |"
              for k, t, d, m in rows]
    return "\n".join(lines) + "\n"


def tasks_listing() -> str:
    out = subprocess.run([sys.executable, "-m", "invoke", "--search-root", str(REPO), "--list"],
                         capture_output=True, text=True, check=True, timeout=60, cwd=REPO)
    return ("Generated from `invoke --list` by `python -m hostspec.docs`; `invoke --help TASK` documents "
            "every option.\n\n```\n" + out.stdout.rstrip() + "\n```\n")


def _markers(name: str) -> tuple[str, str]:
    return (f"<!-- BEGIN generated:{name} ({REGEN}) -->", f"<!-- END generated:{name} -->")


def generated() -> dict[str, str]:
    return {"tasks": tasks_listing(), "spec-reference": spec_reference()}


def splice(readme: str, sections: dict[str, str]) -> str:
    """README text with each generated section replaced (markers must exist)."""
    for name, body in sections.items():
        begin, end = _markers(name)
        if begin not in readme or end not in readme:
            raise ValueError(f"README lacks the markers of section {name!r}: {begin} ... {end}")
        head, rest = readme.split(begin, 1)
        _, tail = rest.split(end, 1)
        readme = f"{head}{begin}\n{body}{end}{tail}"
    return readme


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hostspec.docs", description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="README", help="refresh the generated sections of README in place")
    group.add_argument("--check", metavar="README", help="exit 1 when README's generated sections are stale")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        sys.stdout.write(spec_reference())
        return 0
    path = Path(args.write or args.check)
    text = path.read_text(encoding="utf-8")
    try:
        fresh = splice(text, generated())
    except ValueError as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return 1
    if args.check:
        if fresh != text:
            print(f"{path}: generated sections are stale; run `{REGEN}`", file=sys.stderr)
            return 1
        return 0
    if fresh != text:
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(fresh, encoding="utf-8")
        tmp.replace(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
