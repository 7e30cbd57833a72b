"""Rules of engine.yaml that span several keys (the schema sees one value at a
time). Both readers of the engine's config apply these same rules: the
engine's loader (engine.server.config refuses the first) and hostspec's spec
checks (which report every one at the spec line that set it), so a spec that
passes never renders an engine.yaml the engine refuses to start with.

They run on the engine section as a mapping, validated against
engine/config.schema.json with defaults filled in, sizes in bytes and
durations in seconds. A model's default_priority may be null (a spec's
"lowest") or 0 (engine.yaml's "lowest").
"""

from __future__ import annotations

from engine.config_schema import KeyPath

Rule = tuple[KeyPath, str, str | None]  # (key path inside engine:, what is wrong, hint)

# limits of the shared size type, which allows 0, where the servers need at least 1 byte
_AT_LEAST_ONE = ("max_body", "max_header_bytes", "min_body_rate", "max_buffered_bytes", "max_unsent_bytes")
# timeouts where 0 would close every connection at once; drain_delay_s may be 0
_POSITIVE_SECONDS = ("header_timeout_s", "idle_timeout_s", "drain_timeout_s", "write_timeout_s")


def engine_problems(engine: dict) -> list[Rule]:
    """Every cross-key problem of an engine section, in key order."""
    out: list[Rule] = []
    if engine["binary_port"] is not None and engine["binary_port"] == engine["http_port"]:
        out.append((("binary_port",), f"same port as engine.http_port ({engine['http_port']})", None))
    if engine["grpc_port"] is not None:
        for other in ("http_port", "binary_port"):
            if engine["grpc_port"] == engine[other]:
                out.append((("grpc_port",), f"same port as engine.{other} ({engine[other]})", None))
    limits = engine["limits"]
    out += [(("limits", key), f"must be >= 1, got {limits[key]}", None) for key in _AT_LEAST_ONE if limits[key] < 1]
    if limits["max_buffered_bytes"] < limits["max_body"]:
        out.append((("limits", "max_buffered_bytes"), f"{limits['max_buffered_bytes']} is below max_body "
                    f"({limits['max_body']}): a largest request could never be admitted", None))
    out += [(("limits", key), f"must be > 0 seconds, got {limits[key]}", None)
            for key in _POSITIVE_SECONDS if limits[key] <= 0]
    auth = engine["auth"]
    if auth["enabled"]:
        if any(a.startswith("HS") for a in auth["algorithms"]) and not auth["secret_file"]:
            out.append((("auth", "secret_file"), "required by the HS* algorithms when auth is enabled", None))
        if any(not a.startswith("HS") for a in auth["algorithms"]) and not auth["public_key_file"]:
            out.append((("auth", "public_key_file"), "required by the RS*/ES*/EdDSA algorithms when auth is enabled",
                        None))
    tls = engine["tls"]
    if (tls["cert_file"] is None) != (tls["key_file"] is None):
        missing = "key_file" if tls["key_file"] is None else "cert_file"
        out.append((("tls", missing), "TLS needs both cert_file and key_file", "set both, or neither for plain TCP"))
    if tls["client_ca_file"] is not None and tls["cert_file"] is None:
        out.append((("tls", "client_ca_file"), "mutual TLS needs cert_file and key_file too", None))
    for i, m in enumerate(engine["models"]):
        out += _model_problems(m, ("models", i))
        out += _bucket_problems(m.get("buckets"), engine["plan_cache_size"], ("models", i, "buckets"))
    return out


def _model_problems(m: dict, at: KeyPath) -> list[Rule]:
    out: list[Rule] = []
    for j, size in enumerate(m["preferred_batch_sizes"]):
        if size > max(1, m["max_batch_size"]):  # max_batch_size 0 (no batching) still runs batches of 1
            out.append((at + ("preferred_batch_sizes", j), f"{size} is larger than max_batch_size {m['max_batch_size']}",
                        None))
    if m["default_priority"] is not None and m["default_priority"] > m["priority_levels"]:
        out.append((at + ("default_priority",),
                    f"{m['default_priority']} is outside 1..priority_levels ({m['priority_levels']})", None))
    if m["max_timeout_us"] and m["default_timeout_us"] > m["max_timeout_us"]:
        out.append((at + ("default_timeout_us",), f"larger than max_timeout_us ({m['max_timeout_us']})", None))
    return out


def _bucket_problems(buckets: dict | None, plan_cache_size: int, at: KeyPath) -> list[Rule]:
    """What the model is not needed for (engine.server.buckets checks the rest at load)."""
    if not buckets:
        return []
    sizes = list(buckets["sizes"])
    if sizes != sorted(set(sizes)):
        return [(at + ("sizes",), f"must be ascending without repeats, got {sizes}", None)]
    if len(sizes) > plan_cache_size:
        return [(at + ("sizes",), f"{len(sizes)} buckets, more than engine.plan_cache_size ({plan_cache_size}): "
                 "their plans would evict each other", "raise engine.plan_cache_size or use fewer buckets")]
    return []
