"""One contract for engine.yaml (issue 11 item 4): engine/config.schema.json
holds its keys, types and defaults; the engine loads engine.yaml with it and
a spec's engine: section is validated against it and rendered into
engine.yaml. Every key of the schema is loaded both ways here, and both must
give the same EngineConfig."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest
import yaml

from engine.config_schema import load_schema, resolve_ref
from engine.server.config import ConfigError, EngineConfig, ModelConfig, parse_config
from engine.units import UnitError, parse_size

ROOT = load_schema()
RENDERED = {"state_dir": "/var/lib/ai-engine", "log_dir": "/var/log/ai-engine", "hugepage_size": "2M"}
MODEL_PATH = "/opt/ai-engine/current/models/m.aie"  # where render points a model named m

# A value for every key of the schema, none of them the default, in a spec's
# terms (sizes and durations with units); test_every_schema_key_has_a_value
# fails when a key is added to the schema and not here.
EVERY_KEY = {
    "listen": "0.0.0.0", "http_port": 9000, "binary_port": 9001, "grpc_port": 9002, "threads": 3, "log_level": "debug",
    "plan_cache_size": 4,
    "arena": {"size": "128M", "hugepages": False, "mlock": False},
    "limits": {"max_body": "32M", "max_header_bytes": "32K", "max_headers": 50, "header_timeout_s": "5s",
               "idle_timeout_s": 30, "drain_timeout_s": "20s", "drain_delay_s": "500ms", "write_timeout_s": 20,
               "min_body_rate": "32K", "max_buffered_bytes": "128M", "max_unsent_bytes": "2M",
               "max_connections": 500, "max_connections_per_client": 100, "max_json_elements": 1000,
               "max_shm_regions": 16, "max_shm_bytes": "256M"},
    "auth": {"enabled": True, "algorithms": ["HS256", "ES512", "EdDSA"], "secret_file": "/etc/ai-engine/secret",
             "public_key_file": "/etc/ai-engine/jwt.pem", "audience": "aud", "issuer": "iss", "open_health": False,
             "open_metrics": False, "default_priority": 2, "require_exp": False, "scopes_claim": "scp",
             "priority_claim": "prio", "rate_limit": {"requests_per_s": 5, "burst": 3},
             "failure_limit": {"requests_per_s": 2, "burst": 4}, "leeway_s": 1.5},
    "tls": {"cert_file": "/etc/ai-engine/tls.crt", "key_file": "/etc/ai-engine/tls.key",
            "client_ca_file": "/etc/ai-engine/ca.pem"},
    "models": [{"name": "m", "version": 2, "max_batch_size": 16, "max_queue_delay_us": "auto",
                "preferred_batch_sizes": [4, 8], "queue_order": "fifo", "priority_levels": 3, "default_priority": 2,
                "default_timeout_us": 1000, "max_timeout_us": 5000, "max_queue_size": 64, "instances": 2,
                "threads": 2, "buckets": {"sizes": [16, 32], "inputs": {"ids": {"axis": 1, "pad": 1}},
                                          "outputs": {"y": 1}}}],
}
# Keys the engine keeps as the mapping they are (engine.server.buckets reads
# it): no dataclass names their sub-keys.
MAPPINGS = {"models[].buckets"}
NAME_MAPS = ("models[].buckets.inputs.", "models[].buckets.outputs.")  # keyed by the model's own tensor names


def schema_keys(schema: dict, prefix: str = "") -> set[str]:
    """Every key path of the schema, models' keys as models[]."""
    schema = resolve_ref(schema, ROOT)
    keys = set()
    for key, sub in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        keys.add(path)
        sub = resolve_ref(sub, ROOT)
        keys |= schema_keys(sub, path + ".")
        if isinstance(sub.get("items"), dict):
            keys |= schema_keys(sub["items"], path + "[].")
    return keys


def value_keys(data: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in data.items():
        keys.add(f"{prefix}{key}")
        if isinstance(value, dict):
            keys |= value_keys(value, f"{prefix}{key}.")
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            keys |= value_keys(value[0], f"{prefix}{key}[].")
    return keys


def dataclass_keys(cls, prefix: str = "") -> set[str]:
    keys = set()
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name == "source":
            continue
        path = f"{prefix}{f.name}"
        keys.add(path)
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            keys |= dataclass_keys(tp, path + ".")
        elif typing.get_origin(tp) is tuple and dataclasses.is_dataclass(typing.get_args(tp)[0]):
            keys |= dataclass_keys(typing.get_args(tp)[0], path + "[].")
    return keys


def test_the_dataclasses_name_exactly_the_schema_keys():
    below_mappings = {k for k in schema_keys(ROOT) if any(k.startswith(m + ".") for m in MAPPINGS)}
    assert dataclass_keys(EngineConfig) == schema_keys(ROOT) - below_mappings


def test_every_schema_key_has_a_value():
    engine_only = {"models[].path"} | set(RENDERED)
    values = {k for k in value_keys(EVERY_KEY) if not k.startswith(NAME_MAPS)}
    assert values == schema_keys(ROOT) - engine_only


def engine_way(engine: dict, tmp_path: Path) -> EngineConfig:
    """engine.yaml written by hand."""
    data = {**engine, **RENDERED, "models": [{**m, "path": MODEL_PATH} for m in engine["models"]]}
    (tmp_path / "engine.yaml").write_text(yaml.safe_dump(data))
    return parse_config(yaml.safe_load((tmp_path / "engine.yaml").read_text()), base=tmp_path)


def spec_way(engine: dict, tmp_path: Path) -> EngineConfig:
    """engine.yaml rendered from a spec by provisioning."""
    from hostspec.loader import load_spec
    from hostspec.render import engine_config

    (tmp_path / "m.onnx").write_bytes(b"")
    spec = tmp_path / "spec.yaml"
    models = [{**m, "source": "m.onnx"} for m in engine["models"]]
    spec.write_text(yaml.safe_dump({"version": 1, "engine": {**engine, "models": models}}))
    rendered = yaml.safe_dump(engine_config(load_spec([spec])), sort_keys=False)
    return parse_config(yaml.safe_load(rendered), base=tmp_path)


def test_every_key_loads_the_same_from_engine_yaml_and_from_a_spec(tmp_path):
    by_engine, by_spec = engine_way(EVERY_KEY, tmp_path), spec_way(EVERY_KEY, tmp_path)
    assert by_spec == by_engine
    # and the values were read, not defaulted
    assert by_engine.limits.header_timeout_s == 5.0 and by_engine.limits.drain_delay_s == 0.5
    assert by_engine.models[0].max_queue_delay_us is None and by_engine.models[0].version == "2"
    assert by_engine.auth.rate_limit.burst == 3 and by_engine.arena.size == 128 << 20


def lowest_priority_explicit(cfg: EngineConfig) -> EngineConfig:
    """default_priority 0 (engine) and priority_levels (rendered from the spec's null) both mean the lowest."""
    models = tuple(dataclasses.replace(m, default_priority=m.default_priority or m.priority_levels)
                   for m in cfg.models)
    return dataclasses.replace(cfg, models=models)


def test_the_defaults_are_the_same_both_ways(tmp_path):
    minimal = {"models": [{"name": "m"}]}
    by_engine, by_spec = engine_way(minimal, tmp_path), spec_way(minimal, tmp_path)
    assert lowest_priority_explicit(by_spec) == lowest_priority_explicit(by_engine)
    # the values `make deploy` has always rendered (issue 11 listed them as drifted)
    assert by_engine.plan_cache_size == 8 and by_engine.arena.hugepages is True
    assert by_engine.models[0].max_batch_size == 64 and by_engine.auth.rate_limit.burst == 10
    assert by_engine.limits.max_header_bytes == 64 << 10


def test_dataclass_defaults_are_the_schema_defaults():
    """Code that builds a section directly (tests, tools) gets what engine.yaml would."""
    assert parse_config({"models": [{"name": "m", "path": "/m.aie"}]}, base=Path("/")).models[0] == \
        ModelConfig(name="m", path="/m.aie")
    cfg = parse_config({"models": [{"name": "m", "path": "/m.aie"}]}, base=Path("/"))
    assert dataclasses.replace(cfg, source="") == EngineConfig(models=(ModelConfig(name="m", path="/m.aie"),))


@pytest.mark.parametrize("text", ["2M", "2MiB", "1.5G", "4096", "2m", "4GB", "2 M", "1.1K"])
def test_the_schema_and_the_size_parser_read_the_same_sizes(tmp_path, text):
    """engine.units is the one size parser; the schema's size pattern must not
    let through what it refuses, nor refuse what it reads."""
    try:
        expected = parse_size(text, where="x")
    except UnitError:
        expected = None
    try:
        got = parse_config({"models": [{"name": "m", "path": "m.aie"}], "arena": {"size": text}},
                           base=tmp_path).arena.size
    except ConfigError as exc:
        assert "engine.arena.size" in str(exc)
        got = None
    assert got == expected


@pytest.mark.parametrize("engine, key, message", [
    ({"limits": {"max_body": "64M", "max_buffered_bytes": "32M"}}, "limits.max_buffered_bytes", "is below max_body"),
    ({"limits": {"max_unsent_bytes": 0}}, "limits.max_unsent_bytes", "must be >= 1, got 0"),
    ({"limits": {"write_timeout_s": 0}}, "limits.write_timeout_s", "must be > 0 seconds, got 0"),
    ({"http_port": 9000, "binary_port": 9000}, "binary_port", "same port as engine.http_port (9000)"),
    ({"auth": {"enabled": True, "algorithms": ["EdDSA"]}}, "auth.public_key_file", "required by the RS*/ES*/EdDSA"),
    ({"tls": {"cert_file": "/etc/ai-engine/tls.crt"}}, "tls.key_file", "TLS needs both cert_file and key_file"),
    ({"models": [{"name": "m", "max_batch_size": 4, "preferred_batch_sizes": [8]}]},
     "models[0].preferred_batch_sizes[0]", "8 is larger than max_batch_size 4"),
    ({"models": [{"name": "m", "priority_levels": 2, "default_priority": 3}]}, "models[0].default_priority",
     "3 is outside 1..priority_levels (2)"),
    ({"models": [{"name": "m", "default_timeout_us": 9, "max_timeout_us": 5}]}, "models[0].default_timeout_us",
     "larger than max_timeout_us (5)"),
    ({"models": [{"name": "m", "buckets": {"sizes": [32, 16], "inputs": {"ids": {"axis": 1}}}}]},
     "models[0].buckets.sizes", "must be ascending without repeats, got [32, 16]"),
    ({"plan_cache_size": 2,
      "models": [{"name": "m", "buckets": {"sizes": [8, 16, 32], "inputs": {"ids": {"axis": 1}}}}]},
     "models[0].buckets.sizes", "3 buckets, more than engine.plan_cache_size (2)"),
])
def test_a_spec_is_refused_where_the_engine_would_refuse_its_engine_yaml(tmp_path, engine, key, message):
    """One set of cross-key rules (engine.config_rules): the spec reports the
    problem at its line before anything is rendered, the engine at start-up."""
    from hostspec.errors import SpecError
    from hostspec.loader import load_spec

    engine = {"models": [{"name": "m"}], **engine}
    with pytest.raises(ConfigError) as by_engine:
        parse_config({**engine, "models": [{**m, "path": "m.aie"} for m in engine["models"]]}, base=tmp_path)
    assert by_engine.value.where == f"engine.{key}" and message in str(by_engine.value)
    (tmp_path / "m.onnx").write_bytes(b"")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"version": 1, "engine": {
        **engine, "models": [{**m, "source": "m.onnx"} for m in engine["models"]]}}))
    with pytest.raises(SpecError) as by_spec:
        load_spec([spec])
    assert [p.path for p in by_spec.value.problems] == [f"engine.{key}"]
    assert message in str(by_spec.value)
