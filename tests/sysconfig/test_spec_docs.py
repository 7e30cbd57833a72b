"""The schema documents every key, its defaults are the embedded spec's, and
README's generated sections match what the generator produces now."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostspec import docs
from hostspec.loader import load_spec
from engine.config_schema import resolve_ref
from hostspec.schema import load_schema

REPO = Path(__file__).resolve().parents[2]


def _properties(schema: dict, root: dict, path: str = ""):
    s = resolve_ref(schema, root)
    for key, sub in s.get("properties", {}).items():
        yield f"{path}.{key}".lstrip("."), sub, key in s.get("required", [])
        rs = resolve_ref(sub, root)
        yield from _properties(rs, root, f"{path}.{key}")
        if isinstance(rs.get("items"), dict):
            yield from _properties(rs["items"], root, f"{path}.{key}[]")


def test_every_key_has_a_description_and_a_default_or_is_required():
    root = load_schema()
    missing = [p for p, sub, required in _properties(root, root)
               if not sub.get("description") or not (required or "default" in sub or p.startswith("hosts[]"))]
    assert missing == []


def test_embedded_spec_values_are_the_schema_defaults(tmp_path):
    """README documents schema defaults; the embedded spec must not silently differ."""
    (tmp_path / "min.yaml").write_text("version: 1\n")
    defaults, embedded = load_spec([tmp_path / "min.yaml"]).data, load_spec().data
    assert embedded["host"] == defaults["host"]
    assert embedded["service"] == defaults["service"]
    assert {k: v for k, v in embedded["engine"].items() if k != "models"} == \
        {k: v for k, v in defaults["engine"].items() if k != "models"}
    assert embedded["deploy"] == defaults["deploy"]


def test_readme_spec_reference_matches_the_schema():
    readme = (REPO / "README.md").read_text()
    assert docs.splice(readme, {"spec-reference": docs.spec_reference()}) == readme, \
        f"README spec reference is stale: run `.venv/bin/{docs.REGEN}`"


def test_readme_task_list_matches_invoke_list():
    readme = (REPO / "README.md").read_text()
    assert docs.splice(readme, {"tasks": docs.tasks_listing()}) == readme, \
        f"README task list is stale: run `.venv/bin/{docs.REGEN}`"


def test_reference_lists_every_key():
    text = docs.spec_reference()
    for key in ("host.hugepages.count", "service.hardening.read_write_paths", "engine.models[].max_queue_delay_us",
                "engine.auth.rate_limit.burst", "hosts[].jump_host", "deploy.health_timeout_s"):
        assert f"| `{key}` |" in text, key


def test_splice_names_missing_markers():
    with pytest.raises(ValueError, match="README lacks the markers of section 'tasks'"):
        docs.splice("no markers here", {"tasks": "x"})
