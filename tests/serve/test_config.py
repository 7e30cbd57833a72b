"""engine.yaml loading: defaults, validation messages, path resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.server.config import ConfigError, load_config, parse_config

MODEL = {"name": "mlp", "path": "models/mlp.aie"}


def test_defaults_and_relative_paths(tmp_path):
    (tmp_path / "engine.yaml").write_text("models:\n  - name: mlp\n    path: models/mlp.aie\n")
    cfg = load_config(tmp_path / "engine.yaml")
    assert cfg.http_port == 8000 and cfg.binary_port == 8001 and cfg.limits.max_body == 64 << 20
    assert cfg.models[0].path == str(tmp_path / "models" / "mlp.aie")
    assert cfg.models[0].max_queue_size == 1024 and not cfg.auth.enabled


def test_root_prefixes_absolute_paths(tmp_path):
    cfg = parse_config({"models": [{"name": "m", "path": "/var/lib/ai-engine/m.aie"}],
                        "auth": {"secret_file": "/etc/ai-engine/secret"}}, base=tmp_path, root=Path("/srv/root"))
    assert cfg.models[0].path == "/srv/root/var/lib/ai-engine/m.aie"
    assert cfg.auth.secret_file == "/srv/root/etc/ai-engine/secret"
    assert cfg.state_dir == "/srv/root/var/lib/ai-engine"


def test_sizes_accept_bytes_and_units(tmp_path):
    cfg = parse_config({"models": [MODEL], "arena": {"size": "256M"}, "limits": {"max_body": 1024},
                        "threads": "auto"}, base=tmp_path)
    assert cfg.arena.size == 256 << 20 and cfg.limits.max_body == 1024 and cfg.threads == 0


@pytest.mark.parametrize("data, where, message", [
    ({"models": [MODEL], "lisen": "0.0.0.0"}, "engine.lisen", "unknown key (did you mean 'listen'?)"),
    ({"models": [dict(MODEL, max_batch=2)]}, "engine.models[0].max_batch", "unknown key"),
    ({"models": [MODEL], "limits": {"max_body": "lots"}}, "engine.limits.max_body", "expected a size"),
    ({"models": [MODEL], "auth": {"algorithms": ["none"]}}, "engine.auth.algorithms[0]", "must be one of HS256"),
    ({"models": [MODEL], "auth": {"enabled": True, "algorithms": ["RS256"]}}, "engine.auth.public_key_file",
     "required by the RS*/ES*/EdDSA algorithms"),
    ({"models": [dict(MODEL, priority_levels=2, default_priority=3)]}, "engine.models[0].default_priority",
     "3 is outside 1..priority_levels (2)"),
    ({"models": [MODEL, MODEL]}, "engine.models[1].name", "listed twice"),
    ({"models": [dict(MODEL, name="a/b")]}, "engine.models[0].name", "appears in URLs"),
    ({"models": [{"name": "m"}]}, "engine.models[0]", "missing required key 'path'"),
    ({"models": [dict(MODEL, max_batch_size=True)]}, "engine.models[0].max_batch_size", "expected an integer"),
])
def test_errors_name_the_key(tmp_path, data, where, message):
    with pytest.raises(ConfigError) as err:
        parse_config(data, base=tmp_path)
    assert err.value.where == where and message in str(err.value), str(err.value)


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [\n")
    with pytest.raises(ConfigError, match="not valid YAML") as err:
        load_config(bad)
    assert str(bad) in str(err.value)
