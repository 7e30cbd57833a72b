"""SSH trust and robustness against real sshd hosts in namespaces: host keys
(pinned, listed in deploy.known_hosts, recorded on first use; a mismatch is
refused, through a jump host too), a jump host given as user@host:port, and
an upload that stalls mid-transfer. Runs after test_fleet.py (file order),
whose deploys these reuse where a test needs a deployed host."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import JUMP_PORT, recording_reporter

pytestmark = pytest.mark.root


def _fingerprint(pub_line: str) -> str:
    """OpenSSH's own fingerprint of a public key line (not ours)."""
    out = subprocess.run(["ssh-keygen", "-l", "-f", "/dev/stdin"], input=pub_line + "\n", capture_output=True,
                         text=True, check=True).stdout.split()
    return out[1]  # "256 SHA256:… comment (ED25519)"


def test_a_wrong_pinned_key_is_refused(pipeline_for, ssh_hosts):
    h1, h2 = ssh_hosts["h1"], ssh_hosts["h2"]
    [r] = pipeline_for(["h1-wrong-pin"]).operate("status")
    assert r.status == "failed"
    assert r.reason.startswith(f"h1-wrong-pin: host key mismatch for {h1.address}: "), r.reason
    assert f"offered ssh-ed25519 {_fingerprint(h1.host_key_pub)}" in r.reason, r.reason
    assert f"expected ssh-ed25519 {_fingerprint(h2.host_key_pub)} (pinned in hosts[h1-wrong-pin].host_key)" \
        in r.reason, r.reason
    assert "refusing to connect" in r.reason


def test_a_wrong_key_at_the_jump_host_is_refused(pipeline_for, ssh_hosts):
    [r] = pipeline_for(["h3-via-wrong-jump"]).operate("status")
    assert r.status == "failed"
    assert f"host key mismatch for {ssh_hosts['h1'].address} (jump host h1-wrong-pin)" in r.reason, r.reason


def test_deploy_known_hosts_and_recorded_keys_are_enforced(ssh_hosts, fleet_spec, tmp_path, pipeline_for):
    h3, h4, h5 = ssh_hosts["h3"], ssh_hosts["h4"], ssh_hosts["h5"]
    # deploy.known_hosts lists h3 with h5's key.
    (tmp_path / "known_hosts").write_text(f"{h3.address} {h5.host_key_pub}\n")
    overlay = tmp_path / "known.yaml"
    overlay.write_text(yaml.safe_dump({"deploy": {"known_hosts": str(tmp_path / "known_hosts")}}))
    from engine.deploy.pipeline import Options, Pipeline
    from engine.deploy.report import Reporter

    opts = Options(specs=[*fleet_spec, overlay], hosts=["h3"], build_dir=tmp_path / "build")
    [r] = Pipeline(opts, Reporter(quiet=True)).operate("status")
    assert r.status == "failed" and "host key mismatch" in r.reason, r.reason
    assert f"(listed in deploy.known_hosts ({tmp_path / 'known_hosts'}))" in r.reason, r.reason

    # A key recorded on first use binds from then on: h4 recorded with h5's key.
    build = tmp_path / "tofu-build"
    (build / "deploy").mkdir(parents=True)
    (build / "deploy" / "known_hosts").write_text(f"{h4.address} {h5.host_key_pub}\n")
    [r] = pipeline_for(["h4"], build_dir=build).operate("status")
    assert r.status == "failed", r.reason
    assert f"(recorded on first use in {build / 'deploy' / 'known_hosts'})" in r.reason, r.reason


def test_first_use_records_the_key_once(pipeline_for, ssh_hosts, tmp_path):
    h5 = ssh_hosts["h5"]
    store = tmp_path / "deploy" / "known_hosts"
    reporter, output = recording_reporter()
    [r] = pipeline_for(["h5"], reporter=reporter, build_dir=tmp_path).operate("status")
    # h5's first deploy failed on purpose in test_fleet: connecting is what counts here.
    assert "mismatch" not in r.reason and r.status != "unreachable", r.reason
    assert store.read_text() == f"{h5.address} {' '.join(h5.host_key_pub.split()[:2])}\n"
    assert (f"h5: trust on first use: accepted {h5.address}'s host key ssh-ed25519 "
            f"{_fingerprint(h5.host_key_pub)}, recorded in {store}") in output.getvalue(), output.getvalue()

    reporter, output = recording_reporter()
    pipeline_for(["h5"], reporter=reporter, build_dir=tmp_path).operate("status")
    assert "trust on first use" not in output.getvalue()
    assert len(store.read_text().splitlines()) == 1


def test_jump_host_given_as_user_at_host_and_port(pipeline_for, ssh_hosts, deploy_build):
    """h2 reached through root@h2:2222 (its sshd's second port): a deploy
    through it finds h2 as test_fleet left it (or installs it when run alone)."""
    h2 = ssh_hosts["h2"]
    p = pipeline_for(["h2-via-port-jump"])
    [r] = p.deploy()
    assert r.status in ("unchanged", "deployed"), r.reason
    assert os.readlink(h2.root / "opt/ai-engine/current").endswith(p.bundle().version)
    [s] = p.operate("status")
    assert s.ok and s.data["health"] == "ready", s.reason
    assert s.data["pid"] == int((h2.root / "run/ai-engine.pid").read_text())
    # The jump's key was checked too: first use of [address]:port, OpenSSH's name for it.
    recorded = (deploy_build / "deploy" / "known_hosts").read_text()
    assert f"[{h2.address}]:{JUMP_PORT} {' '.join(h2.host_key_pub.split()[:2])}\n" in recorded, recorded


def _netns_pids(netns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


class Freezer(threading.Thread):
    """SIGSTOPs every process of a namespace (sshd and its sessions) once the
    upload has written `threshold` bytes: the TCP stream stays open and
    simply stops moving, like a hung host."""

    def __init__(self, netns: str, incoming: Path, threshold: int = 256 * 1024, timeout_s: float = 60.0):
        super().__init__(daemon=True)
        self.netns, self.incoming, self.threshold, self.timeout_s = netns, incoming, threshold, timeout_s
        self.frozen_at: int | None = None
        self.pids: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not self.stop.is_set() and time.monotonic() < deadline:
            sizes = [f.stat().st_size for f in self.incoming.glob("*.tar.gz")] if self.incoming.is_dir() else []
            if sizes and max(sizes) >= self.threshold:
                self.pids = _netns_pids(self.netns)
                for pid in self.pids:
                    os.kill(pid, signal.SIGSTOP)
                self.frozen_at = max(sizes)
                return
            time.sleep(0.005)

    def thaw(self) -> None:
        self.stop.set()
        self.join(timeout=5)
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def test_a_stalled_upload_fails_within_the_transfer_timeout(pipeline_for, ssh_hosts):
    stall = ssh_hosts["stall"]
    p = pipeline_for(["stall", "h1"])
    p.settings.transfer_timeout_s = 4
    bundle = p.bundle()
    freezer = Freezer(stall.netns, stall.root / "opt/ai-engine/incoming")
    freezer.start()
    try:
        t0 = time.monotonic()
        results = {r.name: r for r in p.deploy()}
        elapsed = time.monotonic() - t0
    finally:
        freezer.thaw()
    assert freezer.frozen_at is not None, "the upload never reached the freeze threshold"
    assert freezer.frozen_at < bundle.size, "the upload finished before the host froze"
    r = results["stall"]
    assert r.status == "failed", r.reason
    assert "uploading the bundle did not finish within 4 s (deploy.transfer_timeout_s)" in r.reason, r.reason
    assert r.seconds < 4 + 10, r.seconds  # connect and the first commands, plus the 4 s limit
    assert not (stall.root / "opt/ai-engine/releases" / bundle.version).exists()  # nothing half-installed
    assert results["h1"].ok, results["h1"].reason  # the other host went on
    assert elapsed < 120
