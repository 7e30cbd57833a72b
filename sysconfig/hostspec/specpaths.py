"""Path-valued spec keys, marked in the schema with `x-path`:

  spec-file  a file this machine reads (model source, SSH key, known_hosts);
             a relative path is relative to the spec file that wrote it
  spec-dir   a directory this machine writes into (a local host's root);
             relative to the spec file that wrote it, created when needed
  host       a path on the target host (absolute; never resolved here)

A relative path in an overlay means the overlay's own directory, not the
first spec's: the loader's line map says which file set each value, so each
path is resolved where it is written and the merged spec holds absolute
paths only. Optional conditions: `x-path-when` {sibling: value} (a local
host's root is a local directory, an ssh host's root is on that host) and
`x-path-unless: key-line` (hosts[].host_key pins a key line or names a file).
"""

from __future__ import annotations

import os
from pathlib import Path

from hostspec.errors import Problem
from engine.config_schema import resolve_ref
from hostspec.schema import load_schema, locate
from hostspec.yamlsource import KeyPath, Origins, format_path

# OpenSSH public key types (ssh-ed25519, ssh-rsa, ecdsa-sha2-*, sk-ssh-*@openssh.com).
SSH_KEY_TYPE_PREFIXES = ("ssh-", "ecdsa-", "sk-")


def is_key_line(value: str) -> bool:
    """A public key line (`ssh-ed25519 AAAA…`, or a known_hosts line with host names first)."""
    fields = value.split()
    return bool(fields) and (fields[0].startswith(SSH_KEY_TYPE_PREFIXES) or
                             len(fields) >= 3 and fields[1].startswith(SSH_KEY_TYPE_PREFIXES))


def _applies(schema: dict, value: object, parent: object) -> bool:
    if not isinstance(value, str):
        return False
    when = schema.get("x-path-when", {})
    if any(not isinstance(parent, dict) or parent.get(k) != v for k, v in when.items()):
        return False
    return not (schema.get("x-path-unless") == "key-line" and is_key_line(value))


def path_values(data: object, schema: dict | None = None, path: KeyPath = (), parent: object = None):
    """Yield (key path, kind, value) of every path-valued key present in `data`."""
    root = load_schema()
    schema = resolve_ref(schema or root, root)
    kind = schema.get("x-path")
    if kind and _applies(schema, data, parent):
        yield path, kind, data
    if isinstance(data, dict) and "properties" in schema:
        for key, value in data.items():
            if key in schema["properties"]:
                yield from path_values(value, schema["properties"][key], path + (key,), data)
    elif isinstance(data, list) and isinstance(schema.get("items"), dict):
        for i, value in enumerate(data):
            yield from path_values(value, schema["items"], path + (i,), data)


def _set(data: object, path: KeyPath, value: object) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


def resolve_paths(data: dict, origins: Origins, file_dirs: dict[str, Path]) -> None:
    """Make every spec-file / spec-dir path absolute, in place: `~` expanded,
    relative ones joined to the directory of the file that set them
    (`file_dirs`: file name as in origins -> its directory)."""
    for path, kind, value in list(path_values(data)):
        if kind == "host":
            continue
        expanded = Path(os.path.expanduser(value))
        if not expanded.is_absolute():
            file, _ = locate(origins, path)
            expanded = file_dirs[file] / expanded
        _set(data, path, os.path.normpath(expanded))


def missing_files(data: dict, origins: Origins, severity: str) -> list[Problem]:
    """Problems for resolved spec-file paths that are not files on this machine."""
    problems = []
    for path, kind, value in path_values(data):
        if kind == "spec-file" and not Path(value).is_file():
            what = "is not a file" if Path(value).exists() else "does not exist"
            file, line = locate(origins, path)
            problems.append(Problem(file, line, format_path(path), f"{value} {what}",
                                    "relative paths are relative to the spec file that sets them", severity))
    return problems
