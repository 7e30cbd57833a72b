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
