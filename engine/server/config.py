"""engine.yaml: the engine section of the host spec, as rendered by provisioning
(sizes as int bytes), loaded into dataclasses.

Every key has a default except `models`. Unknown keys are errors naming the key
and where it sits, because the file is generated but hand-edited too, and a
typo that silently falls back to a default is worse than a refusal to start.

Paths: relative ones are relative to the config file's directory; `root`
(``ai-engine serve --root DIR``) prefixes every absolute one, so a deployment
into a local root works without chroot.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from engine.errors import EngineError


class ConfigError(EngineError):
    """engine.yaml is missing, unreadable or has a bad key or value."""


@dataclass(frozen=True)
class ArenaConfig:
    """Plan arenas (engine.arena.PlanArenas): their total, their backing.
    Defaults are the spec schema's (sysconfig/schema.json engine.arena)."""
    size: int = 256 << 20          # bytes: the most all plan arenas of the process hold together
    hugepages: bool = True         # MAP_HUGETLB pages of hugepage_size first, 4 KiB pages when none are free
    mlock: bool = False            # lock every plan arena; start-up fails when the kernel would refuse


@dataclass(frozen=True)
class LimitsConfig:
    max_body: int = 64 << 20       # bytes; HTTP body and binary-protocol payload
    max_header_bytes: int = 16 << 10
    max_headers: int = 100
    header_timeout_s: float = 10.0  # a request's headers must arrive within this (slowloris)
    idle_timeout_s: float = 60.0    # keep-alive connection with no request in flight
    drain_timeout_s: float = 30.0   # SIGTERM: longest wait for queued + in-flight work
    drain_delay_s: float = 5.0      # SIGTERM: serve on while readiness says 503, so load balancers move away
    write_timeout_s: float = 30.0   # a client that takes no response bytes for this long is closed
    min_body_rate: int = 64 << 10   # bytes/s a body or payload must average over each header_timeout_s window
    max_buffered_bytes: int = 256 << 20  # server-wide: request bytes held until answered; beyond -> 503
    max_unsent_bytes: int = 4 << 20      # per binary connection: unsent answers beyond which it is not read
    max_connections: int = 1000          # open client connections (both protocols); clamped below RLIMIT_NOFILE
    max_connections_per_client: int = 256  # open connections from one client IP address
    max_json_elements: int = 1 << 20     # JSON values and containers in one request's JSON


@dataclass(frozen=True)
class RateLimitConfig:
    requests_per_s: float = 0.0     # 0 = no rate limiting
    burst: int = 0                  # bucket depth; 0 = max(1, requests_per_s)


@dataclass(frozen=True)
class AuthConfig:
    enabled: bool = False
    algorithms: tuple[str, ...] = ("HS256",)
    secret_file: str | None = None       # HS* shared secret
    public_key_file: str | None = None   # RS*/ES* PEM public key
    audience: str | None = None
    issuer: str | None = None
    open_health: bool = True        # /v2/health/*, /health without a token
    open_metrics: bool = True       # /metrics without a token
    scopes_claim: str = "scope"     # space-separated string or list of scopes
    priority_claim: str = "priority"
    default_priority: int = 0       # best level of a token without the claim; 0 = the model's lowest
    require_exp: bool = True        # tokens without an exp claim are refused
    leeway_s: float = 0.0
    rate_limit: RateLimitConfig = field(default_factory=RateLimitConfig)
    # Failed authentications per client address; once spent, 429 before any token is checked.
    failure_limit: RateLimitConfig = field(default_factory=lambda: RateLimitConfig(1.0, 20))


@dataclass(frozen=True)
class TlsConfig:
    cert_file: str | None = None        # PEM certificate chain; set with key_file to serve TLS
    key_file: str | None = None         # PEM private key
    client_ca_file: str | None = None   # PEM CA bundle: clients must present a certificate it signed (mTLS)

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None


@dataclass(frozen=True)
class ModelConfig:
    name: str
    path: str
    version: str = "1"
    max_batch_size: int = 8          # 0 or 1: no batching
    max_queue_delay_us: int | None = 500  # longest a lone request waits for company; None = auto (adaptive)
    preferred_batch_sizes: tuple[int, ...] = ()
    queue_order: str = "edf"         # within a priority level: earliest deadline first, or fifo (Triton)
    priority_levels: int = 1         # Triton semantics: 1 is the highest priority
    default_priority: int = 0        # 0 = the lowest level (priority_levels)
    default_timeout_us: int = 0      # 0 = no deadline unless the request sets one
    max_timeout_us: int = 0          # 0 = requests may ask for any deadline
    max_queue_size: int = 1024       # queued requests; beyond -> 429
    instances: int = 0               # sessions running batches concurrently; 0 = auto (engine.server.placement)
    threads: int = 0                 # intra-op threads per instance; 0 = auto (engine threads / instances)


@dataclass(frozen=True)
class EngineConfig:
    models: tuple[ModelConfig, ...]
    listen: str = "127.0.0.1"
    http_port: int = 8000
    binary_port: int | None = 8001   # null disables the binary protocol
    threads: int = 0                 # 0 = auto (usable cores)
    log_level: str = "info"
    plan_cache_size: int = 16
    state_dir: str = "/var/lib/ai-engine"
    log_dir: str = "/var/log/ai-engine"
    hugepage_size: int = 2 << 20     # 2 MiB: x86-64 huge page size
    arena: ArenaConfig = field(default_factory=ArenaConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    tls: TlsConfig = field(default_factory=TlsConfig)
    source: str = ""                 # the file this came from (not a key)

    def model(self, name: str) -> ModelConfig | None:
        return next((m for m in self.models if m.name == name), None)


_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_SIZE_FIELDS = {"size", "max_body", "max_header_bytes", "hugepage_size", "min_body_rate", "max_buffered_bytes",
                "max_unsent_bytes"}
_AUTO_AS_NONE_FIELDS = {"max_queue_delay_us"}  # "auto" here is None: 0 already means "no wait"
_PATH_FIELDS = {"path", "secret_file", "public_key_file", "state_dir", "log_dir", "cert_file", "key_file",
                "client_ca_file"}
_LOG_LEVELS = ("debug", "info", "warning", "error")
QUEUE_ORDERS = ("edf", "fifo")
NAME_PATTERN = r"[A-Za-z0-9_.-]{1,128}"   # model names and versions: they appear in URLs unencoded
_NAME_RE = re.compile(f"^{NAME_PATTERN}$")


def _size(value, where: str) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"expected a size in bytes, got {value!r}", where=where)
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"size must be >= 0, got {value}", where=where)
        return value
    m = _SIZE_RE.match(str(value))
    if not m:
        raise ConfigError(f"expected a size (bytes, or like 256M), got {value!r}", where=where)
    return int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]


def _scalar(tp, value, where: str):
    """Coerce one YAML value to the annotated type or raise ConfigError."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None and type(None) in args:
            return None
        tp = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple:
        if not isinstance(value, list):
            raise ConfigError(f"expected a list, got {value!r}", where=where)
        return tuple(_scalar(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, where)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"expected true or false, got {value!r}", where=where)
        return value
    if tp is int:
        if value == "auto" and where.endswith(("threads", "instances")):
            return 0
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"expected an integer, got {value!r}", where=where)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"expected a number, got {value!r}", where=where)
        return float(value)
    if tp is str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # version: 1 is a string for Triton clients
        if not isinstance(value, str):
            raise ConfigError(f"expected a string, got {value!r}", where=where)
        return value
    raise AssertionError(f"config type {tp!r} unhandled")  # programming error, not user input


def _build(cls, data, where: str):
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping, got {type(data).__name__}", where=where)
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.name != "source"}
    unknown = sorted(set(map(str, data)) - names)
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}", where=where,
                          hint="expected one of: " + ", ".join(sorted(names)))
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"missing required key {f.name!r}", where=where)
            continue
        sub = f"{where}.{f.name}"
        value = data[f.name]
        if f.name in _SIZE_FIELDS:
            kwargs[f.name] = _size(value, sub)
        elif f.name in _AUTO_AS_NONE_FIELDS:
            if value == "auto":
                kwargs[f.name] = None
            elif isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"expected an integer or 'auto', got {value!r}", where=sub)
            else:
                kwargs[f.name] = value
        else:
            kwargs[f.name] = _scalar(hints[f.name], value, sub)
    return cls(**kwargs)


def _check_model(m: ModelConfig, where: str) -> None:
    def bad(key, msg):
        raise ConfigError(msg, where=f"{where}.{key}")

    if not _NAME_RE.match(m.name):
        bad("name", f"model name {m.name!r} must be 1-128 of [A-Za-z0-9_.-] (it appears in URLs)")
    if not _NAME_RE.match(m.version):
        bad("version", f"version {m.version!r} must be 1-128 of [A-Za-z0-9_.-]")
    if m.max_batch_size < 0:
        bad("max_batch_size", f"must be >= 0, got {m.max_batch_size}")
    for key in ("max_queue_delay_us", "default_timeout_us", "max_timeout_us", "threads", "instances"):
        if getattr(m, key) is not None and getattr(m, key) < 0:
            bad(key, f"must be >= 0, got {getattr(m, key)}")
    for s in m.preferred_batch_sizes:
        if not 1 <= s <= max(1, m.max_batch_size):
            bad("preferred_batch_sizes", f"size {s} outside 1..max_batch_size ({m.max_batch_size})")
    if m.queue_order not in QUEUE_ORDERS:
        bad("queue_order", f"unknown queue order {m.queue_order!r}; expected one of {', '.join(QUEUE_ORDERS)}")
    if m.priority_levels < 1:
        bad("priority_levels", f"must be >= 1, got {m.priority_levels}")
    if not 0 <= m.default_priority <= m.priority_levels:
        bad("default_priority", f"must be in 0..priority_levels ({m.priority_levels}), got {m.default_priority}")
    if m.max_timeout_us and m.default_timeout_us > m.max_timeout_us:
        bad("default_timeout_us", f"{m.default_timeout_us} exceeds max_timeout_us {m.max_timeout_us}")
    if m.max_queue_size < 1:
        bad("max_queue_size", f"must be >= 1 (the queue is bounded), got {m.max_queue_size}")


def _check(cfg: EngineConfig) -> None:
    if not cfg.models:
        raise ConfigError("no models listed", where="engine.models", hint="list at least one {name, path}")
    seen = set()
    for i, m in enumerate(cfg.models):
        _check_model(m, f"engine.models[{i}]")
        if m.name in seen:
            raise ConfigError(f"model {m.name!r} listed twice", where=f"engine.models[{i}].name")
        seen.add(m.name)
    ports = [("http_port", cfg.http_port)] + ([("binary_port", cfg.binary_port)] if cfg.binary_port is not None else [])
    for key, port in ports:
        if not 1 <= port <= 65535:
            raise ConfigError(f"port must be 1..65535, got {port}", where=f"engine.{key}")
    if cfg.binary_port == cfg.http_port:
        raise ConfigError(f"binary_port equals http_port ({cfg.http_port})", where="engine.binary_port")
    if cfg.log_level not in _LOG_LEVELS:
        raise ConfigError(f"unknown log level {cfg.log_level!r}", where="engine.log_level",
                          hint="one of " + ", ".join(_LOG_LEVELS))
    if cfg.threads < 0:
        raise ConfigError(f"must be >= 0 (0 = auto), got {cfg.threads}", where="engine.threads")
    if cfg.plan_cache_size < 1:
        raise ConfigError(f"must be >= 1, got {cfg.plan_cache_size}", where="engine.plan_cache_size")
    lim = cfg.limits
    for key in ("max_body", "max_header_bytes", "max_headers", "min_body_rate", "max_buffered_bytes",
                "max_unsent_bytes", "max_connections", "max_connections_per_client", "max_json_elements"):
        if getattr(lim, key) < 1:
            raise ConfigError(f"must be >= 1, got {getattr(lim, key)}", where=f"engine.limits.{key}")
    if lim.max_buffered_bytes < lim.max_body:
        raise ConfigError(f"{lim.max_buffered_bytes} is below max_body ({lim.max_body}): a largest request could "
                          "never be admitted", where="engine.limits.max_buffered_bytes")
    for key in ("header_timeout_s", "idle_timeout_s", "drain_timeout_s", "write_timeout_s"):
        if getattr(lim, key) <= 0:
            raise ConfigError(f"must be > 0 seconds, got {getattr(lim, key)}", where=f"engine.limits.{key}")
    if lim.drain_delay_s < 0:
        raise ConfigError(f"must be >= 0 seconds, got {lim.drain_delay_s}", where="engine.limits.drain_delay_s")
    auth = cfg.auth
    allowed = {"HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512"}
    for alg in auth.algorithms:
        if alg not in allowed:
            raise ConfigError(f"algorithm {alg!r} not accepted", where="engine.auth.algorithms",
                              hint="one of " + ", ".join(sorted(allowed)) + " ('none' is never accepted)")
    if auth.enabled:
        if not auth.algorithms:
            raise ConfigError("auth enabled with no algorithms", where="engine.auth.algorithms")
        if any(a.startswith("HS") for a in auth.algorithms) and not auth.secret_file:
            raise ConfigError("an HS* algorithm needs secret_file", where="engine.auth.secret_file")
        if any(not a.startswith("HS") for a in auth.algorithms) and not auth.public_key_file:
            raise ConfigError("an RS*/ES* algorithm needs public_key_file", where="engine.auth.public_key_file")
    for key in ("rate_limit", "failure_limit"):
        limit = getattr(auth, key)
        if limit.requests_per_s < 0 or limit.burst < 0:
            raise ConfigError("requests_per_s and burst must be >= 0", where=f"engine.auth.{key}")
    if auth.default_priority < 0:
        raise ConfigError(f"must be >= 0 (0 = the model's lowest level), got {auth.default_priority}",
                          where="engine.auth.default_priority")
    tls = cfg.tls
    if (tls.cert_file is None) != (tls.key_file is None):
        missing = "key_file" if tls.key_file is None else "cert_file"
        raise ConfigError("TLS needs both cert_file and key_file", where=f"engine.tls.{missing}")
    if tls.client_ca_file is not None and tls.cert_file is None:
        raise ConfigError("client_ca_file (mTLS) needs cert_file and key_file", where="engine.tls.client_ca_file")


def _resolve(path: str | None, base: Path, root: Path | None) -> str | None:
    if path is None:
        return None
    p = Path(path)
    if p.is_absolute():
        return str(root / p.relative_to("/")) if root else str(p)
    return str((base / p).resolve())


def _resolve_paths(obj, base: Path, root: Path | None):
    changes = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name in _PATH_FIELDS and isinstance(value, str):
            changes[f.name] = _resolve(value, base, root)
        elif dataclasses.is_dataclass(value):
            changes[f.name] = _resolve_paths(value, base, root)
        elif isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            changes[f.name] = tuple(_resolve_paths(v, base, root) for v in value)
    return dataclasses.replace(obj, **changes)


def parse_config(data, *, base: Path, root: Path | None = None, source: str = "<config>") -> EngineConfig:
    """Build an EngineConfig from already-parsed YAML (a mapping)."""
    if isinstance(data, dict) and set(data) == {"engine"}:
        data = data["engine"]  # accept the spec's section wrapped in its key too
    cfg = _build(EngineConfig, data, "engine")
    _check(cfg)
    cfg = _resolve_paths(cfg, base, root)
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
