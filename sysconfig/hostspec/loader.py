"""load_spec: files -> one merged, validated, normalised `Spec`.

Stages, each reporting every problem it finds before stopping:
read each YAML file (syntax, duplicate keys, empty or non-mapping files) ->
merge the layers -> JSON Schema validation -> defaults and units (sizes to
bytes, durations to seconds, percentages to numbers) -> cross-key checks ->
path-valued keys made absolute, each against the directory of the file that
wrote it (hostspec.specpaths).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Sequence

from engine import units
from hostspec.checks import check_spec, missing_sysctls, model_file_problems
from hostspec.errors import Problem, SpecError
from hostspec.merge import merge_layers
from engine.config_schema import resolve_ref
from hostspec.schema import fill_defaults, load_schema, locate, validate
from hostspec.specpaths import missing_files, resolve_paths
from hostspec.yamlsource import KeyPath, Origins, format_path, read_yaml

# Package data (pip unpacks wheels, so it is a real file). In a checkout it is a
# link to sysconfig/spec.yaml, the one file to edit; resolving the link keeps
# its relative paths (../build/...) relative to sysconfig/ as written.
DEFAULT_SPEC = Path(str(resources.files("hostspec") / "data" / "spec.yaml")).resolve()
HUGEPAGE_SIZES = {"2M": 2 << 20, "1G": 1 << 30}


@dataclass(frozen=True)
class Spec:
    data: dict  # merged, validated, defaults filled in; sizes in bytes; durations in seconds; paths absolute
    sources: tuple[Path, ...]  # the spec files, in merge order
    # sha256 hex of the canonical merged data with paths as written, so the
    # same spec gives the same digest (and rendered banners) in any checkout
    digest: str
    warnings: tuple[Problem, ...]
    origins: dict = field(default_factory=dict, repr=False, compare=False)  # key path -> (file, line)
    # model name -> the converted model a `memory: auto` was read from (hostspec.hugepages.resolve_model_memory)
    resolved_memory: dict = field(default_factory=dict, compare=False)

    def where(self, path: KeyPath) -> tuple[str | None, int | None]:
        """(file, line) that set `path` (or its nearest written ancestor)."""
        return locate(self.origins, tuple(path))

    def problem(self, path: KeyPath, message: str, hint: str | None = None, severity: str = "error") -> Problem:
        """A Problem located at the line that set `path` (used by host checks)."""
        file, line = self.where(path)
        return Problem(file, line, format_path(tuple(path)), message, hint, severity)


def display_name(path: Path) -> str:
    """How a spec file is named in messages: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def canonical_digest(data: dict) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _normalise(value: object, schema: dict, path: KeyPath, origins: Origins, problems: list[Problem]) -> object:
    """Convert unit strings to numbers where the schema says so (x-kind)."""
    root = load_schema()
    schema = resolve_ref(schema, root)
    kind = schema.get("x-kind")
    if path == ("host", "hugepages", "size"):
        return HUGEPAGE_SIZES[value]
    if path == ("host", "hugepages", "per_node"):
        return {int(k): v for k, v in sorted(value.items(), key=lambda kv: int(kv[0]))}
    if kind and not (isinstance(value, str) and value == "infinity"):
        parse = {"size": units.parse_size, "duration": units.parse_duration, "percentage": units.parse_percent}[kind]
        try:
            return parse(value, where=format_path(path))
        except units.UnitError as exc:
            file, line = locate(origins, path)
            problems.append(Problem(file, line, format_path(path), str(exc).split(": ", 1)[1]))
            return value
    if "anyOf" in schema and value is not None:
        if any(resolve_ref(option, root).get("const", ...) == value for option in schema["anyOf"]):
            return value  # a word the schema allows as it is (memory: auto)
        for option in schema["anyOf"]:
            if resolve_ref(option, root).get("x-kind"):
                return _normalise(value, option, path, origins, problems)
    if isinstance(value, dict) and "properties" in schema:
        return {k: _normalise(v, schema["properties"][k], path + (k,), origins, problems)
                if k in schema["properties"] else v for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_normalise(v, schema["items"], path + (i,), origins, problems) for i, v in enumerate(value)]
    return value


def _fill_host_defaults(hosts: list[dict], raw_hosts: object) -> None:
    """Schema defaults are per key, not per host type: give ssh hosts root '/' and
    strip the ssh-only defaults from local hosts."""
    for i, host in enumerate(hosts):
        written = raw_hosts[i] if isinstance(raw_hosts, list) and i < len(raw_hosts) else {}
        if host["type"] == "ssh":
            host.setdefault("root", "/")
        else:
            for key in ("port", "user", "key_file", "jump_host"):
                if key not in written:
                    host.pop(key, None)


def load_spec(paths: Sequence[Path | str] | None = None, *, proc: Path = Path("/proc"),
              require_files: bool = False) -> Spec:
    """Load, merge, validate and normalise spec files (None: the embedded default).
    Raises SpecError with every problem found. Warnings (e.g. a sysctl this
    kernel lacks, checked under `proc`) are returned on Spec.warnings.
    A local file the spec names (model source, SSH key) that is missing is an
    error with `require_files` (commands that read those files), else a
    warning: render and provision do not read them, and a host provisioning
    from a shipped spec does not have them."""
    files = [Path(p) for p in paths] if paths else [DEFAULT_SPEC]
    names = [display_name(f) if f == DEFAULT_SPEC else str(f) for f in files]
    layers, problems = [], []
    for i, (f, name) in enumerate(zip(files, names)):
        try:
            layers.append(read_yaml(f, name, first=i == 0))
        except SpecError as exc:
            problems.extend(exc.problems)
    if problems:
        raise SpecError(problems)
    raw, origins = merge_layers(layers)
    problems = validate(raw, origins)
    if "version" not in layers[0][0] and "version" in raw:
        problems.append(Problem(names[0], 1, "version", "missing in the first spec file",
                                "the first file starts with 'version: 1'; overlays may omit it"))
    if problems:
        raise SpecError(problems)
    data = fill_defaults(raw)
    data = _normalise(data, load_schema(), (), origins, problems)
    if problems:
        raise SpecError(problems)
    _fill_host_defaults(data["hosts"], raw.get("hosts"))
    problems = check_spec(data, raw, origins)
    if problems:
        raise SpecError(problems)
    digest = canonical_digest(data)
    sources = tuple(Path(os.path.abspath(f)) for f in files)
    resolve_paths(data, origins, {name: src.parent for name, src in zip(names, sources)})
    problems = model_file_problems(data, raw, origins)
    if problems:
        raise SpecError(problems)
    missing = missing_files(data, origins, "error" if require_files else "warning")
    if require_files and missing:
        raise SpecError(missing)
    warnings = missing_sysctls(data, origins, proc, "warning")
    warnings += _reservation_warnings(data, origins) + missing
    return Spec(data=data, sources=sources, digest=digest, warnings=tuple(warnings), origins=origins)


def _reservation_warnings(data: dict, origins: Origins) -> list[Problem]:
    hp, arena = data["host"]["hugepages"], data["engine"]["arena"]
    if arena["hugepages"] and hp["count"] != "auto" and hp["count"] * hp["size"] < arena["size"]:
        file, line = locate(origins, ("host", "hugepages", "count"))
        return [Problem(file, line, "host.hugepages.count",
                        f"{hp['count']} pages of {units.format_size(hp['size'])} hold less than engine.arena.size "
                        f"({units.format_size(arena['size'])}); the engine will fall back to normal pages",
                        "raise the count or use auto", "warning")]
    return []
