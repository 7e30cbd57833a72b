"""A rollout through `invoke deploy` (the Pipeline) behind a real HAProxy
fails no request (issue 14): the SSH fleet's hosts h1, h3 and h4 (in their
network namespaces, already serving what test_fleet deployed) behind a
balancer host in its own namespace, reached over SSH like them (HAProxy
installed, started and driven through its runtime API over that SSH
connection), wired to each engine namespace directly (conftest's
balancer_host). A steady stream of KServe HTTP and binary-protocol
requests through the balancer runs while deploy provisions HAProxy and
rolls a new release out (each host drained, restarted, verified, put back),
every answer checked against the model's reference. Then, on the same
fleet: status with the balancer column, drain and undrain; a release that
fails verification; `kill -9` of an engine under the stream; last, a
config-only release deployed with a traffic-weighted canary (reloaded in
place, never drained).

Runs after test_fleet.py (file order) and reuses its hosts; the new release
shares the installed venv, so no host builds one."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import threading
import time

import numpy as np
import pytest
import yaml

from engine.client import Client
from engine.deploy import commands, verify
from engine.deploy.balancer_host import PIDFILE
from engine.deploy.pipeline import Options, Pipeline
from engine.deploy.supervise import PIDFILE as PIDFILE_ENGINE, wait_exit
from tests.deploy.conftest import HTTP_PORT, REPO, recording_reporter, write_site
from tests.deploy.test_fleet import _corrupt_bundle

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
pytestmark = [pytest.mark.root,
              pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (make sysdeps installs it)")]
ENGINES = ("h1", "h3", "h4")
MAX_REQUESTS, MAX_SECONDS = 100_000, 600    # every stream is bounded in count and time


BALANCED = ENGINES     # the engine hosts the balancer_host fixture wires to the balancer's namespace


@pytest.fixture(scope="module")
def lb_spec(ssh_hosts, balancer_host, tmp_path_factory, digits_model):
    """[default spec, site]: h1, h3, h4 behind an SSH balancer host in its
    own namespace; HAProxy is stopped when the module ends."""
    d = tmp_path_factory.mktemp("lbsite")
    key = ssh_hosts["h1"].root.parent.parent / "client_key"
    hosts = [{"name": "lb", "type": "ssh", "address": balancer_host.address, "user": "root", "key_file": str(key),
              "root": str(balancer_host.root), "role": "balancer"}]
    hosts += [{"name": n, "type": "ssh", "address": ssh_hosts[n].address, "user": "root", "key_file": str(key),
               "root": str(ssh_hosts[n].root)} for n in ENGINES]
    site = write_site(d / "site.yaml", hosts, listen="0.0.0.0", http_port=HTTP_PORT, extra={"parallel": 4})
    data = yaml.safe_load(site.read_text())
    # A drain delay as in production (default 5 s), shortened.
    data["engine"]["limits"] = {"drain_delay_s": 1}
    data["balancer"] = {"listen": balancer_host.address, "http_port": HTTP_PORT + 10, "binary_port": HTTP_PORT + 11,
                        "maxconn": 2000,   # within this sandbox's file limit (~2 fds a connection)
                        "runtime_socket": str(d / "admin.sock"),
                        "health": {"interval_s": "200ms", "rise": 1, "fall": 2}}
    site.write_text(yaml.safe_dump(data, sort_keys=False))
    yield [REPO / "sysconfig" / "spec.yaml", site], data
    try:
        pid = int((balancer_host.root / PIDFILE).read_text())
        os.kill(pid, signal.SIGTERM)   # HAProxy's master stops its workers
        wait_exit(pid, 10)
    except (OSError, ValueError):
        pass


class Stream(threading.Thread):
    """Requests through the balancer, back to back, each answer compared with
    the model's smoke reference (the converter's own run of the model)."""

    def __init__(self, protocol: str, address: str, port: int, reference: dict):
        super().__init__(daemon=True)
        self.protocol, self.address, self.port, self.ref = protocol, address, port, reference
        self.stop = threading.Event()
        self.ok, self.failures = 0, []
        self.body = json.dumps({"inputs": [{k: t[k] for k in ("name", "shape", "datatype", "data")}
                                           for t in reference["inputs"]]})
        self.arrays = {t["name"]: np.asarray(t["data"], np.float32).reshape(t["shape"]) for t in reference["inputs"]}

    def one(self, conn) -> None:
        if self.protocol == "http":
            conn.request("POST", f"/v2/models/{self.ref['model']}/infer", self.body,
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            doc = json.loads(r.read())
            if r.status != 200:
                raise AssertionError(f"HTTP {r.status}: {doc}")
            got = {o["name"]: o["data"] for o in doc["outputs"]}
        else:
            got = {k: np.asarray(v).ravel().tolist() for k, v in conn.infer(self.ref["model"], self.arrays).items()}
        for want in self.ref["outputs"]:
            diff = verify.compare(want["name"], got[want["name"]], want["data"], self.ref["rtol"], self.ref["atol"])
            if diff:
                raise AssertionError(diff)

    def run(self) -> None:
        t_end = time.monotonic() + MAX_SECONDS
        conn = http.client.HTTPConnection(self.address, self.port, timeout=60) if self.protocol == "http" \
            else Client(self.address, self.port, timeout=60)
        while not self.stop.is_set() and self.ok + len(self.failures) < MAX_REQUESTS and time.monotonic() < t_end:
            try:
                self.one(conn)
                self.ok += 1
            except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
                self.failures.append(f"{type(exc).__name__}: {exc}")
                conn.close()     # the next request opens a new connection
        conn.close()

    def wait_answers(self, n: int, timeout: float = 60) -> None:
        target, deadline = self.ok + n, time.monotonic() + timeout
        while self.ok < target:
            assert time.monotonic() < deadline and self.is_alive(), f"stream stalled at {self.ok} ({self.failures})"
            time.sleep(0.01)  # waiting for the stream's own count, bounded


def _reference(deploy_build) -> dict:
    return json.loads((deploy_build / "deploy" / "models" / "digits.smoke.json").read_text())


def _start_streams(data: dict, deploy_build, protocols=("http", "binary")) -> list[Stream]:
    """One stream per protocol through the balancer, each past its first answers."""
    b = data["balancer"]
    streams = [Stream(p, b["listen"], b[f"{p}_port"], _reference(deploy_build)) for p in protocols]
    for s in streams:
        s.start()
    for s in streams:
        s.wait_answers(10)
    return streams


def _pipeline(specs, deploy_build, kernels_lib, reporter=None) -> Pipeline:
    opts = Options(specs=specs, build_dir=deploy_build, lib_dir=kernels_lib)
    return Pipeline(opts, reporter or recording_reporter()[0])


def test_a_rollout_through_deploy_fails_no_request(lb_spec, deploy_build, kernels_lib, ssh_hosts, pipeline_for):
    specs, data = lb_spec
    reporter, output = recording_reporter()
    p = _pipeline(specs, deploy_build, kernels_lib, reporter)
    [balancer] = p.balancers()
    [started] = p.provision_balancers([balancer])
    assert started.status == "started", started
    api = balancer.api()
    if not all(api.wait_status(n, "UP", 10) for n in ENGINES):
        pipeline_for(list(ENGINES)).deploy()    # run alone: serve the fleet's release first, as test_fleet leaves it
    for name in ENGINES:
        assert api.wait_status(name, "UP", 30), api.stats()

    streams = _start_streams(data, deploy_build)
    before = {n: os.readlink(ssh_hosts[n].root / "opt/ai-engine/current") for n in ENGINES}
    t0 = time.monotonic()
    results = {r.name: r for r in p.deploy()}
    rollout_s = time.monotonic() - t0
    for s in streams:
        s.wait_answers(10)      # still served after the last host came back
        s.stop.set()
        s.join(60)
    answers, failures = sum(s.ok for s in streams), [f for s in streams for f in s.failures]
    print(f"\nrollout of {len(ENGINES)} hosts through deploy behind HAProxy under a steady HTTP + binary stream: "
          f"{answers} answers ({streams[0].ok} HTTP, {streams[1].ok} binary), {len(failures)} failed, "
          f"deploy {rollout_s:.1f} s")
    assert failures == [], failures[:5]

    version = p.bundle().version
    assert results["lb"].status == "unchanged", results["lb"]
    for name in ENGINES:
        r = results[name]
        assert r.status == "deployed" and r.active == version, (r.status, r.reason)
        assert os.readlink(ssh_hosts[name].root / "opt/ai-engine/current") != before[name]
        assert r.steps[0].startswith("drained on the balancer") and r.steps[-1].startswith("ready on the balancer")
        assert {s.status for s in api.server(name)} == {"UP"}
    text = output.getvalue()
    assert "at most 2 of the 3 engine hosts behind the balancer out at once (deploy.parallel 4 lowered" in text, text


def test_status_drain_and_undrain(lb_spec, deploy_build, kernels_lib, fleet_spec, capsys):
    specs, _ = lb_spec
    opts = Options(specs=specs, build_dir=deploy_build, lib_dir=kernels_lib)
    assert commands.operate(opts, "status") == 0
    table = capsys.readouterr().out
    assert "balancer" in table and table.count("UP weight 100") == len(ENGINES), table

    assert commands.drain(opts, "h3") == 0
    out = capsys.readouterr().out
    assert "h3: drained in" in out and "ai_engine_http DRAIN weight 100" in out, out
    [h3] = [r for r in _pipeline(specs, deploy_build, kernels_lib).status() if r.name == "h3"]
    assert {s.status for s in h3.data["balancer"]["lb"]} == {"DRAIN"}
    assert commands.undrain(opts, "h3") == 0
    assert "h3: back in the rotation, UP after" in capsys.readouterr().out

    for host, message in [("lb", "error: --host: 'lb' is a balancer host; drain and undrain take an engine host "
                                 "(engine hosts: h1, h3, h4)"),
                          ("nope", "error: --host: unknown host 'nope' (engine hosts: h1, h3, h4)")]:
        assert commands.drain(opts, host) == 1
        assert capsys.readouterr().err.splitlines() == [message]
    no_balancer = Options(specs=fleet_spec, build_dir=deploy_build, lib_dir=kernels_lib)
    assert commands.undrain(no_balancer, "h1") == 1
    assert capsys.readouterr().err.startswith("error: hosts: the spec has no balancer host")


def test_a_release_that_fails_verification_is_rolled_back_and_left_ready(lb_spec, deploy_build, kernels_lib,
                                                                        tmp_path):
    specs, _ = lb_spec
    p = _pipeline(specs, deploy_build, kernels_lib)
    good = p.bundle().version
    bad = _corrupt_bundle(p, tmp_path)
    opts = Options(specs=specs, hosts=["h3"], build_dir=deploy_build, lib_dir=kernels_lib, bundle=bad.path)
    results = {r.name: r for r in Pipeline(opts, recording_reporter()[0]).deploy()}
    h3 = results["h3"]
    assert h3.status == "rolled-back" and h3.active == good, h3.reason
    assert h3.reason.endswith(f"left ready on the balancer: release {good} serves again"), h3.reason
    [api] = [b.api() for b in p.balancers()]
    assert api.wait_status("h3", "UP", 30), api.server("h3")


def test_a_killed_engine_costs_at_most_its_requests_in_flight(lb_spec, deploy_build, kernels_lib, ssh_hosts):
    """kill -9 of h4's engine under the stream: what fails is at most the
    one request each client had in flight, and nothing once HAProxy marks
    h4 DOWN; a deploy of the same release brings it back into the rotation."""
    specs, data = lb_spec
    [balancer] = _pipeline(specs, deploy_build, kernels_lib).balancers()
    api = balancer.api()
    for name in ENGINES:
        assert api.wait_status(name, "UP", 30), api.stats()
    streams = _start_streams(data, deploy_build)
    pid = int((ssh_hosts["h4"].root / PIDFILE_ENGINE).read_text())
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    assert api.wait_status("h4", "DOWN", 10), api.server("h4")
    down_s = time.monotonic() - t0
    failed_before_down = sum(len(s.failures) for s in streams)
    for s in streams:
        s.wait_answers(30)             # after HAProxy marked it down: none may fail
        s.stop.set()
        s.join(60)
    failed = sum(len(s.failures) for s in streams)
    print(f"\nkill -9 of h4's engine behind the SSH balancer: DOWN after {down_s:.1f} s, {failed_before_down} "
          f"failed before, {failed - failed_before_down} after; {sum(s.ok for s in streams)} answers")
    assert failed_before_down <= len(streams), [f for s in streams for f in s.failures]   # one in flight per client
    assert failed == failed_before_down, [f for s in streams for f in s.failures]

    opts = Options(specs=specs, hosts=["h4"], build_dir=deploy_build, lib_dir=kernels_lib)
    [h4] = [r for r in Pipeline(opts, recording_reporter()[0]).deploy() if r.name == "h4"]
    assert h4.status == "restarted", (h4.status, h4.reason)
    assert api.wait_status("h4", "UP", 30), api.server("h4")


def test_a_config_only_release_is_reloaded_without_draining(lb_spec, deploy_build, kernels_lib, tmp_path):
    """max_batch_size 16 -> 32 only, deployed with a traffic-weighted canary
    (the full deploy: real installs, the ramp on the engines' /metrics): the
    canary widens to 100%, each host reloads (same pid) and stays UP in the
    balancer throughout, never DRAIN; the stream loses nothing."""
    specs, data = lb_spec
    overlay = tmp_path / "batch.yaml"
    overlay.write_text(yaml.safe_dump({
        "engine": {"models": [{**data["engine"]["models"][0], "max_batch_size": 32}]},
        # Shares follow weights with roundrobin (README); steps end on request counts.
        "balancer": {"algorithm": "roundrobin"},
        "deploy": {"canary": {"host": "h1", "steps": [50, 100], "step_s": 30, "min_requests": 20,
                              "max_p99_ratio": 10}}}))
    reporter, output = recording_reporter()
    p = _pipeline([*specs, overlay], deploy_build, kernels_lib, reporter)
    [balancer] = p.balancers()
    # The new algorithm is a balancer reload: done before the stream starts
    # (HAProxy 2.6 closes idle keep-alive connections at a reload, see README).
    assert p.provision_balancers([balancer])[0].status == "reloaded"
    api = balancer.api()
    for name in ENGINES:
        assert api.wait_status(name, "UP", 30), api.stats()
    seen: set[str] = set()
    done = threading.Event()

    def watch():   # HAProxy's view of the hosts, sampled until the deploy ends (bounded)
        t_end = time.monotonic() + MAX_SECONDS
        while not done.is_set() and time.monotonic() < t_end:
            seen.update(s.status for name in ENGINES for s in api.server(name))

    [stream] = _start_streams(data, deploy_build, ("http",))
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    t0 = time.monotonic()
    results = {r.name: r for r in p.deploy()}
    deploy_s = time.monotonic() - t0
    done.set()
    watcher.join(30)
    stream.wait_answers(10)
    stream.stop.set()
    stream.join(60)
    for name in ENGINES:
        r = results[name]
        assert r.status == "reloaded", (name, r.status, r.reason, r.steps)
        assert not any(step.startswith("drained") for step in r.steps), r.steps
    ramp = [step for step in results["h1"].steps if step.startswith("step ")]
    assert len(ramp) == 2 and ": widen" in ramp[0] and ": done" in ramp[1], results["h1"].steps
    assert results["lb"].status == "unchanged"
    print(f"\nconfig-only release with a canary behind the balancer: deploy {deploy_s:.1f} s, HAProxy saw "
          f"{sorted(seen)}, {stream.ok} answers, {len(stream.failures)} failed\n  " + "\n  ".join(ramp))
    assert seen == {"UP"}, seen
    assert "reloaded in place, left in the rotation" in output.getvalue()
    assert stream.failures == [], stream.failures[:5]
