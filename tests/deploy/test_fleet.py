"""Deploying to real sshd hosts in network namespaces: parallel rollout, an
unreachable host, a release that fails verification and is rolled back,
a redeploy that changes nothing, an on-demand rollback, a failed first
deploy. Tests run in file order and build on each other's hosts (each
deploy costs a venv install, so hosts are reused rather than recreated)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest

from engine.deploy import verify
from engine.deploy.bundle import build_bundle
from engine.deploy.hostroot import INSTALLED
from engine.deploy.pipeline import Pipeline
from tests.deploy.conftest import HTTP_PORT, REPO, assert_runtime_only, recording_reporter

TIMES = REPO / "build" / "reports" / "deploy-times.json"
pytestmark = pytest.mark.root


def _engine_url(host) -> str:
    return f"http://{host.address}:{HTTP_PORT}"


def _active(host) -> str | None:
    link = host.root / "opt/ai-engine/current"
    return os.readlink(link).split("/")[-1] if link.is_symlink() else None


def _pid(host) -> int:
    return int((host.root / "run/ai-engine.pid").read_text())


def _serves(pipeline: Pipeline, host) -> None:
    """The engine answers the smoke inference from the deployer, matching the reference."""
    reference = json.loads((pipeline.work / "models" / "digits.smoke.json").read_text())
    verify.smoke(_engine_url(host), reference)


def _record_time(key: str, seconds: float) -> None:
    TIMES.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(TIMES.read_text()) if TIMES.is_file() else {}
    data[key] = round(seconds, 1)
    data["cpus"] = os.cpu_count()
    TIMES.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"deploy time {key}: {seconds:.1f} s")


def _by_name(results):
    return {r.name: r for r in results}


def test_one_host_then_three_in_parallel_with_an_unreachable_one(pipeline_for, ssh_hosts, deploy_build):
    """Also the host-key policy on first contact: h1 (pinned key line) and h2
    (pinned known_hosts file) deploy and are not recorded; h3 and h4 are
    trusted on first use, said in the output and recorded."""
    p1 = pipeline_for(["h1"])
    t0 = time.monotonic()
    [r] = p1.deploy()
    _record_time("deploy_1_host_s", time.monotonic() - t0)
    assert r.status == "deployed", r.reason
    assert _active(ssh_hosts["h1"]) == p1.bundle().version
    _serves(p1, ssh_hosts["h1"])
    assert_runtime_only(ssh_hosts["h1"].root / "opt/ai-engine/current/venv")  # built over SSH by the host's python3

    reporter, output = recording_reporter()
    p3 = pipeline_for(["h2", "h3", "h4", "dead"], reporter=reporter)
    t0 = time.monotonic()
    results = _by_name(p3.deploy())
    _record_time("deploy_3_hosts_parallel_plus_unreachable_s", time.monotonic() - t0)
    for name in ("h2", "h3", "h4"):
        assert results[name].status == "deployed", results[name].reason
        assert _active(ssh_hosts[name]) == p3.bundle().version
        _serves(p3, ssh_hosts[name])
    dead = results["dead"]
    assert dead.status == "unreachable"
    assert "cannot connect to 10.233." in dead.reason and "timed out" in dead.reason.lower(), dead.reason
    # connect_timeout_s is 3: the dead host must not hold the fleet up for long.
    assert dead.seconds < 3 + 10, dead.seconds

    recorded = (deploy_build / "deploy" / "known_hosts").read_text()
    for name in ("h3", "h4"):
        host = ssh_hosts[name]
        assert f"{host.address} {' '.join(host.host_key_pub.split()[:2])}\n" in recorded, recorded
        assert f"{name}: trust on first use: accepted {host.address}'s host key ssh-ed25519 SHA256:" \
               in output.getvalue(), output.getvalue()
    for name in ("h1", "h2"):
        assert ssh_hosts[name].host_key_pub.split()[1] not in recorded  # pinned: nothing to record
        assert f"{name}: trust on first use" not in output.getvalue()


def test_redeploy_without_changes_restarts_nothing(pipeline_for, ssh_hosts):
    p = pipeline_for(["h1", "h2", "h3", "h4"])
    before = {n: _pid(ssh_hosts[n]) for n in ("h1", "h2", "h3", "h4")}
    results = _by_name(p.deploy())
    for name, pid in before.items():
        assert results[name].status == "unchanged", results[name].reason
        assert results[name].pid == pid
        assert _pid(ssh_hosts[name]) == pid
        assert (ssh_hosts[name].root / "run/ai-engine.pid").exists()


def _corrupt_bundle(pipeline: Pipeline, out: Path):
    """The fleet bundle's inputs with a damaged digits.aie (the engine refuses
    to load it), under its own version."""
    inputs, _ = pipeline.bundle_inputs()
    aie, smoke = inputs.models["digits"]
    data = bytearray(aie.read_bytes())
    data[:16] = b"\0" * 16  # the magic and header: unloadable, not merely wrong
    bad_aie = out / "digits.aie"
    bad_aie.write_bytes(bytes(data))
    return build_bundle(dataclasses.replace(inputs, models={"digits": (bad_aie, smoke)}), out, version="corrupt-model")


@pytest.fixture(scope="module")
def corrupt_bundle(pipeline_for, tmp_path_factory):
    """The one damaged bundle both failing installs below take: it depends on
    the fleet spec only, not on the host, so it is built once."""
    return _corrupt_bundle(pipeline_for(["h2"]), tmp_path_factory.mktemp("corrupt"))


def test_failed_verification_rolls_back_to_the_previous_release(pipeline_for, ssh_hosts, corrupt_bundle):
    p = pipeline_for(["h2"])
    good = p.bundle().version
    [target] = p.targets()
    result = target.install(corrupt_bundle, lambda host, msg: None)
    target.close()
    assert result.status == "rolled-back", result.reason
    assert "rolled back to " + good in result.reason
    assert result.active == good and _active(ssh_hosts["h2"]) == good
    assert (ssh_hosts["h2"].root / f"opt/ai-engine/releases/corrupt-model/{INSTALLED}").is_file()
    _serves(p, ssh_hosts["h2"])


def test_first_deploy_failing_leaves_no_current(pipeline_for, ssh_hosts, corrupt_bundle):
    p = pipeline_for(["h5"])
    [target] = p.targets()
    result = target.install(corrupt_bundle, lambda host, msg: None)
    target.close()
    assert result.status == "failed"
    assert "no previous release" in result.reason and "inactive" in result.reason, result.reason
    h5 = ssh_hosts["h5"]
    assert not (h5.root / "opt/ai-engine/current").exists()
    assert (h5.root / f"opt/ai-engine/releases/corrupt-model/{INSTALLED}").is_file()
    assert not (h5.root / "run/ai-engine.pid").exists()  # stopped, nothing left running
    # The config this deploy provisioned is taken back (the files did not exist before).
    assert not (h5.root / "etc/ai-engine/engine.yaml").exists()
    assert any(step.startswith("config restored: ") for step in result.steps), result.steps
    # A release that never served is nothing to roll back to.
    [r] = p.operate("rollback")
    assert r.status == "failed" and r.reason == "no previous release to roll back to", r.reason


def test_rollback_on_demand(pipeline_for, ssh_hosts):
    first = pipeline_for(["h3"])
    v1 = first.bundle().version
    second = pipeline_for(["h3"], version="second")
    [r] = second.deploy()
    assert r.status == "deployed" and _active(ssh_hosts["h3"]) == "second", r.reason
    pid_second = _pid(ssh_hosts["h3"])

    [r] = second.operate("rollback")
    assert r.status == "switched" and r.ok, r.reason
    assert _active(ssh_hosts["h3"]) == v1
    assert _pid(ssh_hosts["h3"]) != pid_second
    _serves(first, ssh_hosts["h3"])

    [s] = second.operate("status")
    assert s.data["active"] == v1 and s.data["health"] == "ready" and s.data["pid"] == _pid(ssh_hosts["h3"])
    assert set(s.data["releases"]) >= {v1, "second"}


def test_status_through_a_jump_host(pipeline_for, ssh_hosts):
    [s] = pipeline_for(["h1-via-jump"]).operate("status")
    h1 = ssh_hosts["h1"]
    assert s.ok, s.reason
    assert s.data["active"] == _active(h1) and s.data["pid"] == _pid(h1) and s.data["health"] == "ready"


def test_stop_and_logs_over_ssh(pipeline_for, ssh_hosts):
    p = pipeline_for(["h4"])
    [logs] = p.operate("logs", "--lines", "5")
    assert logs.ok and '"event"' in logs.data["text"]
    [r] = p.operate("stop")
    assert r.status == "stopped", r.reason
    assert not (ssh_hosts["h4"].root / "run/ai-engine.pid").exists()
    [s] = p.operate("status")
    assert s.data["pid"] is None and s.data["health"] == "stopped"
    # Starting again is a redeploy: the release is active but the engine is down.
    [r] = p.deploy()
    assert r.status == "restarted", r.reason
    _serves(p, ssh_hosts["h4"])
