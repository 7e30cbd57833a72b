"""engine.yaml: the engine section of the host spec, as rendered by provisioning
(sizes as int bytes), loaded into dataclasses.

Keys, types, ranges, defaults and their documentation are the schema's
(engine/config.schema.json, through engine.config_schema): engine.yaml is
validated against it, a missing key takes its default from it, and the
dataclasses below only give the keys Python names (a test holds them to the
schema's keys). What JSON Schema cannot say (cross-key rules, sizes that must
be >= 1 here but 0 elsewhere) is checked in `_check`. Unknown keys are errors
naming the key and where it sits, because the file is generated but
hand-edited too, and a typo that silently falls back to a default is worse
than a refusal to start.

Paths: relative ones are relative to the config file's directory; `root`
(``ai-engine serve --root DIR``) prefixes every absolute one, so a deployment
into a local root works without chroot.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from engine import units
from engine.config_rules import engine_problems
from engine.config_schema import KeyPath, explain, format_path, load_schema, resolve_ref, subschema, validator
from engine.errors import EngineError


class ConfigError(EngineError):
    """engine.yaml is missing, unreadable or has a bad key or value."""


_SCHEMA = load_schema()
_PATH_REFS = ("#/$defs/path", "#/$defs/optional_path")  # values resolved against the file's directory and root
# Model names and versions appear in URLs unencoded (engine.server.kserve routes on this).
NAME_PATTERN = _SCHEMA["properties"]["models"]["items"]["properties"]["name"]["pattern"].strip("^$")


def _value(tp, schema: dict, value, path: KeyPath, resolve=None):
    """One validated YAML value in the engine's terms: sizes in bytes, durations
    in seconds, 'auto' as the schema's x-auto, lists as tuples, sections as
    dataclasses (missing keys from the schema's defaults), paths resolved."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    if value == "auto" and "x-auto" in schema:
        return schema["x-auto"]
    if value is None and "x-null" in schema:
        return schema["x-null"]
    if schema.get("x-kind") in ("size", "duration") and value is not None:
        parse = units.parse_size if schema["x-kind"] == "size" else units.parse_duration
        try:
            value = parse(value, where=format_path(("engine",) + path))
        except units.UnitError as exc:  # a string the pattern lets through, like '1.5' bytes
            where, _, message = str(exc).partition(": ")
            raise ConfigError(message, where=where) from None
    if dataclasses.is_dataclass(tp):
        return _build(tp, value or {}, path, resolve)
    if isinstance(value, list):
        item_tp = typing.get_args(tp)[0] if tp is not None else None
        items = resolve_ref(schema["items"], _SCHEMA)
        return tuple(_value(item_tp, items, v, path + (i,), resolve) for i, v in enumerate(value))
    if resolve and isinstance(value, str) and schema.get("$ref") in _PATH_REFS:
        return resolve(value)
    if tp is float and value is not None:
        return float(value)
    if tp is str and value is not None:
        return str(value)  # version: 1 is a string for Triton clients
    return value


def _build(cls, data: dict, path: KeyPath, resolve=None):
    """A dataclass from a validated mapping; absent keys take the schema's default."""
    schema = subschema(_SCHEMA, path)
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name == "source":
            continue
        prop = schema["properties"][f.name]
        value = data[f.name] if f.name in data else prop.get("default")
        kwargs[f.name] = _value(hints[f.name], {**resolve_ref(prop, _SCHEMA), "$ref": prop.get("$ref")},
                                value, path + (f.name,), resolve)
    return cls(**kwargs)


def _default(*path: str):
    """The schema's default of engine.<path>, in the engine's terms."""
    schema = subschema(_SCHEMA, path)
    return _value(None, schema, schema.get("default"), path)


def _section(cls, *path: str):
    return field(default_factory=lambda: _build(cls, {}, path))


# Defaults and meanings: engine/config.schema.json, the key of the same path.
@dataclass(frozen=True)
class ArenaConfig:
    size: int = _default("arena", "size")
    hugepages: bool = _default("arena", "hugepages")
    mlock: bool = _default("arena", "mlock")


@dataclass(frozen=True)
class LimitsConfig:
    max_body: int = _default("limits", "max_body")
    max_header_bytes: int = _default("limits", "max_header_bytes")
    max_headers: int = _default("limits", "max_headers")
    header_timeout_s: float = _default("limits", "header_timeout_s")
    idle_timeout_s: float = _default("limits", "idle_timeout_s")
    drain_timeout_s: float = _default("limits", "drain_timeout_s")
    drain_delay_s: float = _default("limits", "drain_delay_s")
    write_timeout_s: float = _default("limits", "write_timeout_s")
    min_body_rate: int = _default("limits", "min_body_rate")
    max_buffered_bytes: int = _default("limits", "max_buffered_bytes")
    max_unsent_bytes: int = _default("limits", "max_unsent_bytes")
    max_connections: int = _default("limits", "max_connections")
    max_connections_per_client: int = _default("limits", "max_connections_per_client")
    max_json_elements: int = _default("limits", "max_json_elements")
    max_shm_regions: int = _default("limits", "max_shm_regions")
    max_shm_bytes: int = _default("limits", "max_shm_bytes")


@dataclass(frozen=True)
class RateLimitConfig:
    """A token bucket: auth.rate_limit and auth.failure_limit (their defaults differ)."""
    requests_per_s: float
    burst: int


@dataclass(frozen=True)
class AuthConfig:
    enabled: bool = _default("auth", "enabled")
    algorithms: tuple[str, ...] = _default("auth", "algorithms")
    secret_file: str | None = _default("auth", "secret_file")
    public_key_file: str | None = _default("auth", "public_key_file")
    audience: str | None = _default("auth", "audience")
    issuer: str | None = _default("auth", "issuer")
    open_health: bool = _default("auth", "open_health")
    open_metrics: bool = _default("auth", "open_metrics")
    default_priority: int = _default("auth", "default_priority")
    require_exp: bool = _default("auth", "require_exp")
    scopes_claim: str = _default("auth", "scopes_claim")
    priority_claim: str = _default("auth", "priority_claim")
    rate_limit: RateLimitConfig = _section(RateLimitConfig, "auth", "rate_limit")
    failure_limit: RateLimitConfig = _section(RateLimitConfig, "auth", "failure_limit")
    leeway_s: float = _default("auth", "leeway_s")


@dataclass(frozen=True)
class TlsConfig:
    cert_file: str | None = _default("tls", "cert_file")
    key_file: str | None = _default("tls", "key_file")
    client_ca_file: str | None = _default("tls", "client_ca_file")

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None


def _model_default(key: str):
    return _default("models", 0, key)


@dataclass(frozen=True)
class ModelConfig:
    name: str
    path: str
    version: str = str(_model_default("version"))
    max_batch_size: int = _model_default("max_batch_size")
    max_queue_delay_us: int | None = _model_default("max_queue_delay_us")  # None = auto (adaptive window)
    preferred_batch_sizes: tuple[int, ...] = _model_default("preferred_batch_sizes")
    queue_order: str = _model_default("queue_order")
    priority_levels: int = _model_default("priority_levels")
    default_priority: int = _model_default("default_priority")  # 0 = the lowest level (priority_levels)
    default_timeout_us: int = _model_default("default_timeout_us")
    max_timeout_us: int = _model_default("max_timeout_us")
    max_queue_size: int = _model_default("max_queue_size")
    instances: int = _model_default("instances")  # 0 = auto (engine.server.placement)
    threads: int = _model_default("threads")      # 0 = auto (engine threads / instances)
    buckets: dict | None = _model_default("buckets")  # shape buckets (engine.server.buckets); None = none


@dataclass(frozen=True)
class EngineConfig:
    models: tuple[ModelConfig, ...]
    listen: str = _default("listen")
    http_port: int = _default("http_port")
    binary_port: int | None = _default("binary_port")  # null disables the binary protocol
    grpc_port: int | None = _default("grpc_port")      # null disables gRPC
    threads: int = _default("threads")                  # 0 = auto (usable cores)
    log_level: str = _default("log_level")
    plan_cache_size: int = _default("plan_cache_size")
    arena: ArenaConfig = _section(ArenaConfig, "arena")
    limits: LimitsConfig = _section(LimitsConfig, "limits")
    auth: AuthConfig = _section(AuthConfig, "auth")
    tls: TlsConfig = _section(TlsConfig, "tls")
    state_dir: str = _default("state_dir")
    log_dir: str = _default("log_dir")
    hugepage_size: int = _default("hugepage_size")
    source: str = ""                 # the file this came from (not a key)

    def model(self, name: str) -> ModelConfig | None:
        return next((m for m in self.models if m.name == name), None)


def _check(cfg: EngineConfig) -> None:
    """The cross-key rules (engine.config_rules, which specs are held to as
    well) and the engine's own: at least one model, each listed once."""
    if not cfg.models:
        raise ConfigError("no models listed", where="engine.models", hint="list at least one {name, path}")
    seen = set()
    for i, m in enumerate(cfg.models):
        if m.name in seen:
            raise ConfigError(f"model {m.name!r} listed twice", where=f"engine.models[{i}].name")
        seen.add(m.name)
    _refuse(engine_problems(dataclasses.asdict(cfg)))


def _refuse(problems: list) -> None:
    """ConfigError for the first (key path, message, hint), if any."""
    if problems:
        path, message, hint = problems[0]
        raise ConfigError(message, where=format_path(("engine",) + path), hint=hint)


def _validate(data) -> None:
    """ConfigError for the first schema problem (in key order), worded as the spec's are."""
    _refuse(sorted((p for err in validator().iter_errors(data) for p in explain(err)),
                   key=lambda p: format_path(p[0])))


def _resolver(base: Path, root: Path | None):
    def resolve(path: str) -> str:
        p = Path(path)
        if p.is_absolute():
            return str(root / p.relative_to("/")) if root else str(p)
        return str((base / p).resolve())
    return resolve


def parse_config(data, *, base: Path, root: Path | None = None, source: str = "<config>") -> EngineConfig:
    """Build an EngineConfig from already-parsed YAML (a mapping)."""
    if isinstance(data, dict) and set(data) == {"engine"}:
        data = data["engine"]  # accept the spec's section wrapped in its key too
    data = {} if data is None else data
    _validate(data)
    cfg = _build(EngineConfig, data, (), _resolver(base, root))
    _check(cfg)
    return dataclasses.replace(cfg, source=source)


def load_config(path: str | Path, root: str | Path | None = None) -> EngineConfig:
    """Read and validate engine.yaml; ConfigError (one line, names the key) if wrong."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config: {exc.strerror}", where=str(path)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"not valid YAML: {getattr(exc, 'problem', exc)}", where=where) from None
    try:
        return parse_config(data, base=path.resolve().parent, root=Path(root) if root else None,
                            source=str(path))
    except ConfigError as exc:
        exc.where = f"{path}: {exc.where}" if exc.where else str(path)
        raise
