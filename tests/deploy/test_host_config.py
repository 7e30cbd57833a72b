"""engine.deploy.host_config: the config step of an install, run by the
release venv's python the way install runs it, from a working directory that
holds the extracted bundle's own (installer-only) engine/ package. ~2 s."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine.deploy.host_config import main
from engine.deploy.hostroot import HostRoot
from engine.deploy.install import provision_config, unprovision_config


def _release(tmp_path: Path) -> HostRoot:
    host = HostRoot(tmp_path / "root", say=lambda message: None)
    conf = host.release("v1") / "rootfs" / "etc" / "aie-test" / "a.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("x = 1\n")
    (host.release("v1") / "venv").symlink_to(Path(sys.prefix))  # this venv stands in for the release's
    return host


def test_provision_and_undo_in_the_release_venv(tmp_path, monkeypatch):
    host = _release(tmp_path)
    bundle = tmp_path / "bundle"
    (bundle / "engine" / "deploy").mkdir(parents=True)
    for init in ("engine/__init__.py", "engine/deploy/__init__.py"):
        (bundle / init).write_text("")
    monkeypatch.chdir(bundle)  # its engine/ has no host_config: found only if the venv's engine is used
    assert provision_config(host, "v1") == 1
    assert (host.root / "etc/aie-test/a.conf").read_text() == "x = 1\n"
    assert provision_config(host, "v1") == 0
    unprovision_config(host, "v1")
    assert not (host.root / "etc/aie-test/a.conf").exists()


def test_failure_is_one_json_line(tmp_path, capsys):
    assert main(["provision", str(tmp_path / "missing"), str(tmp_path / "root")]) == 1
    assert "not a directory" in json.loads(capsys.readouterr().out)["error"]


def test_usage():
    done = subprocess.run([sys.executable, "-P", "-m", "engine.deploy.host_config", "bogus"], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 2 and done.stderr.startswith("usage: python -m engine.deploy.host_config")


def test_memory_auto_is_read_from_the_release_models(tmp_path, zoo, capsys):
    from engine import aie_format
    from engine.convert import PrecisionOptions, convert_file
    from engine.deploy.host_config import host_spec
    from hostspec.hugepages import hugepage_plan

    host = _release(tmp_path)
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\nhost:\n  hugepages: {count: auto, headroom: 0%}\nengine:\n  arena: {size: 8M}\n"
                    f"  models:\n    - {{name: mlp, source: {zoo('mlp')}, memory: auto}}\n")
    tree = host.release("v1") / "rootfs"
    # no converted model in the release: one JSON line, before anything is installed
    assert main(["provision", str(tree), str(host.root), str(spec)]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert "engine.models[0].memory: auto needs the converted model" in error and "\n" not in error
    assert not (host.root / "etc/aie-test/a.conf").exists()
    aie = host.release("v1") / "models" / "mlp.aie"
    aie.parent.mkdir()
    convert_file(zoo("mlp"), aie, precision=PrecisionOptions(max_shapes={"input": [64, 784]}))
    resolved = host_spec(tree, [spec])
    assert resolved.data["engine"]["models"][0]["memory"] == aie_format.planned_memory(aie)
    assert hugepage_plan(resolved).count == -(-((8 << 20) + aie_format.planned_memory(aie)) // (2 << 20))
