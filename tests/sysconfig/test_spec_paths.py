"""Path-valued keys (schema x-path): a relative path means the directory of the
spec file that wrote it, the merged spec holds absolute paths, and a missing
local file is reported at the overlay's file:line (issue 10 item 5)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hostspec.errors import SpecError
from hostspec.loader import load_spec
from engine.config_schema import resolve_ref
from hostspec.schema import load_schema

REPO = Path(__file__).resolve().parents[2]
BASE = "version: 1\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


@pytest.fixture
def site(tmp_path, monkeypatch):
    """base.yaml in tmp/, an overlay in tmp/sites/eu/ with its own files beside it;
    the working directory is a third place, so nothing resolves against it."""
    monkeypatch.chdir(write(tmp_path / "cwd" / ".keep", "").parent)
    base = write(tmp_path / "base.yaml", """
        version: 1
        engine:
          models:
            - {name: base_model, source: models/base.onnx}
        """)
    eu = tmp_path / "sites" / "eu"
    for rel in ("models/m.onnx", "keys/id_ed25519", "keys/known_hosts", "pins/box.known_hosts"):
        write(eu / rel, "x\n")
    overlay = write(eu / "site.yaml", """
        engine:
          models:
            - {name: m, source: models/m.onnx}
        hosts:
          - {name: here, type: local, root: out/root}
          - name: box
            type: ssh
            address: 192.0.2.7
            key_file: keys/id_ed25519
            host_key: pins/box.known_hosts
            root: srv/ai
          - {name: pinned, type: ssh, address: 192.0.2.8, host_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA pinned"}
        deploy:
          known_hosts: keys/known_hosts
        """)
    return tmp_path, base, overlay


def test_relative_paths_resolve_against_the_file_that_wrote_them(site):
    tmp, base, overlay = site
    spec = load_spec([base, overlay], require_files=True)
    eu = tmp / "sites" / "eu"
    here, box, pinned = spec.data["hosts"]
    assert spec.data["engine"]["models"][0]["source"] == str(eu / "models" / "m.onnx")
    assert here["root"] == str(eu / "out" / "root")
    assert box["key_file"] == str(eu / "keys" / "id_ed25519")
    assert box["host_key"] == str(eu / "pins" / "box.known_hosts")
    assert spec.data["deploy"]["known_hosts"] == str(eu / "keys" / "known_hosts")
    # an ssh host's root is a path on that host, a pinned key line is not a path
    assert box["root"] == "srv/ai"
    assert pinned["host_key"] == "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA pinned"


def test_a_path_the_overlay_leaves_alone_stays_relative_to_the_base(site, tmp_path):
    tmp, base, _ = site
    write(tmp / "models" / "base.onnx", "x\n")
    ports = write(tmp / "sites" / "ports.yaml", "engine: {http_port: 9000, binary_port: 9001}\n")
    spec = load_spec([base, ports], require_files=True)
    assert spec.data["engine"]["models"][0]["source"] == str(tmp / "models" / "base.onnx")


def test_the_digest_does_not_depend_on_where_the_spec_lives(tmp_path):
    text = "version: 1\nengine:\n  models:\n    - {name: m, source: m.onnx}\n"
    a, b = write(tmp_path / "a" / "s.yaml", text), write(tmp_path / "b" / "c" / "s.yaml", text)
    spec_a, spec_b = load_spec([a]), load_spec([b])
    assert spec_a.data != spec_b.data and spec_a.digest == spec_b.digest


def test_a_missing_file_is_an_error_at_the_overlays_line(site):
    tmp, base, overlay = site
    (tmp / "sites" / "eu" / "keys" / "id_ed25519").unlink()
    write(overlay, overlay.read_text().replace("models/m.onnx", "modles/m.onnx"))
    with pytest.raises(SpecError) as info:
        load_spec([base, overlay], require_files=True)
    eu = tmp / "sites" / "eu"
    hint = "(relative paths are relative to the spec file that sets them)"
    assert [str(p) for p in info.value.problems] == [
        f"{overlay}:3: engine.models[0].source: {eu / 'modles' / 'm.onnx'} does not exist {hint}",
        f"{overlay}:9: hosts[1].key_file: {eu / 'keys' / 'id_ed25519'} does not exist {hint}",
    ]
    # without require_files (render, provision on a host) the same lines are warnings
    spec = load_spec([base, overlay])
    assert [str(w).replace(" warning:", "") for w in spec.warnings] == [str(p) for p in info.value.problems]


def test_invoke_render_reports_a_missing_source_with_the_overlays_line(site):
    tmp, base, overlay = site
    write(overlay, overlay.read_text().replace("models/m.onnx", "modles/m.onnx"))
    out = subprocess.run([sys.executable, "-m", "invoke", "--search-root", str(REPO), "render",
                          "--spec", str(base), "--spec", str(overlay), "--out", str(tmp / "rootfs")],
                         cwd=tmp, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"{overlay}:3: engine.models[0].source: warning: {tmp / 'sites/eu/modles/m.onnx'} does not exist" \
        in out.stderr
    assert "Traceback" not in out.stderr


def test_host_paths_are_absolute_and_never_resolved(tmp_path):
    f = write(tmp_path / "s.yaml", """
        version: 1
        engine:
          auth: {enabled: true, secret_file: /etc/ai-engine/secret}
        """)
    assert load_spec([f], require_files=True).data["engine"]["auth"]["secret_file"] == "/etc/ai-engine/secret"
    write(f, f.read_text().replace("/etc/ai-engine/secret", "secret"))
    with pytest.raises(SpecError, match=r"s.yaml:3: engine.auth.secret_file: expected null or an absolute path"):
        load_spec([f])


def _leaves(schema: dict, root: dict, path: str = ""):
    schema = resolve_ref(schema, root)
    for key, sub in schema.get("properties", {}).items():
        yield from _leaves(sub, root, f"{path}.{key}" if path else key)
    if isinstance(schema.get("items"), dict) and "properties" in resolve_ref(schema["items"], root):
        yield from _leaves(schema["items"], root, path + "[]")
    elif "properties" not in schema:
        yield path, schema


# Leaves whose description says "file" or "path" without holding one.
NOT_PATHS = {"service.limit_nofile", "service.hardening.protect_system", "engine.limits.max_connections",
             "balancer.health.path"}  # a URL path on the engine, not a file


def test_every_key_described_as_a_path_or_file_is_marked_x_path():
    """A new path-valued key without x-path would be left relative to whatever
    the working directory is; its description gives it away."""
    root = load_schema()
    words = re.compile(r"\b(paths?|file)\b", re.IGNORECASE)
    seen = set()
    for key, schema in _leaves(root, root):
        items = resolve_ref(schema["items"], root) if isinstance(schema.get("items"), dict) else {}
        marked = schema.get("x-path") or items.get("x-path")
        described = bool(words.search(schema.get("description", "")))
        if marked:
            seen.add(key)
            assert marked in ("spec-file", "spec-dir", "host"), \
                f"{key}: x-path must be spec-file, spec-dir or host (see hostspec/specpaths.py), not {marked!r}"
            assert described, f"{key}: x-path {marked}, but its description does not say it is a path"
        elif key not in NOT_PATHS:
            assert not described, f"{key}: its description names a path or file; mark it with x-path"
    assert {"engine.models[].source", "hosts[].root", "hosts[].key_file", "hosts[].host_key", "deploy.known_hosts",
            "engine.auth.secret_file", "engine.auth.public_key_file"} <= seen
