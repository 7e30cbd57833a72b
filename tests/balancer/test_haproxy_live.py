"""Real engines behind a real HAProxy, configured by the rendered
haproxy.cfg (issue 14): a rollout that drains each host through the runtime
API answers every request of a steady stream, over HTTP and the binary
protocol; a host killed with SIGKILL costs at most the requests in flight on
it, none after HAProxy marks it down.

Topology: three engines on 127.0.0.2-4 (one machine, loopback aliases: the
same ports on three addresses, as three hosts would have), HAProxy on
127.0.0.1. Every answer is checked against the model in float64."""

from __future__ import annotations

import http.client
import json
import shutil
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

from engine.client import Client
from engine.deploy.haproxy import RuntimeAPI
from hostspec.loader import load_spec
from hostspec.render import render_tree
from kernel_mlp import reference
from serve_support import ports_free_on

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if shutil.os.path.exists("/usr/sbin/haproxy") else None)
pytestmark = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (make sysdeps installs it)")
ENGINES = {"e1": "127.0.0.2", "e2": "127.0.0.3", "e3": "127.0.0.4"}
MAX_REQUESTS, MAX_SECONDS = 20000, 120     # every stream is bounded in count and time


class Fleet:
    def __init__(self, serve_factory, mlp_file, tmp_path):
        self.serve_factory, self.mlp_file, self.tmp = serve_factory, mlp_file, tmp_path
        self.http_port, self.binary_port, lb_http, lb_binary = ports_free_on(
            ["127.0.0.1", *ENGINES.values()], 4)
        self.engines = {name: self.start_engine(name) for name in ENGINES}
        spec = tmp_path / "fleet.yaml"
        spec.write_text(json.dumps({
            "version": 1,
            "engine": {"listen": "0.0.0.0", "http_port": self.http_port, "binary_port": self.binary_port},
            "hosts": [{"name": "lb", "type": "ssh", "address": "127.0.0.1", "role": "balancer"}] +
                     [{"name": n, "type": "ssh", "address": a} for n, a in ENGINES.items()],
            # maxconn within this sandbox's file limit (HAProxy needs ~2 fds a connection)
            "balancer": {"listen": "127.0.0.1", "http_port": lb_http, "binary_port": lb_binary, "maxconn": 2000,
                         "runtime_socket": str(tmp_path / "admin.sock"),
                         "health": {"interval_s": "100ms", "rise": 1, "fall": 2}}}))
        cfg = tmp_path / "haproxy.cfg"
        cfg.write_bytes(render_tree(load_spec([str(spec)]), role="balancer")["etc/haproxy/haproxy.cfg"].content)
        self.lb_http, self.lb_binary = lb_http, lb_binary
        self.log = open(tmp_path / "haproxy.log", "wb")
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", str(cfg)], stdout=self.log, stderr=subprocess.STDOUT)
        self.api = RuntimeAPI(str(tmp_path / "admin.sock"))
        deadline = time.monotonic() + 30
        while True:
            assert self.proc.poll() is None, (tmp_path / "haproxy.log").read_text()
            try:
                if all(self.api.wait_status(n, "UP", 0) for n in ENGINES):
                    break
            except Exception:  # noqa: BLE001 - the socket appears once haproxy has parsed its config
                pass
            assert time.monotonic() < deadline, "HAProxy did not report every engine UP in 30 s"
            time.sleep(0.05)  # polling HAProxy's state, bounded by the deadline

    def start_engine(self, name):
        # A drain delay as in production (default 5 s), shortened: a binary
        # client that sent a request as the GOODBYE left reads it before the
        # idle connection closes (with 0, that request races the close).
        return self.serve_factory([{"name": "mlp", "path": str(self.mlp_file), "max_batch_size": 1}],
                                  listen=ENGINES[name], http_port=self.http_port, binary_port=self.binary_port,
                                  limits={"drain_delay_s": 0.5})

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


@pytest.fixture
def fleet(serve_factory, mlp_file, tmp_path):
    f = Fleet(serve_factory, mlp_file, tmp_path)
    yield f
    f.close()


class Stream(threading.Thread):
    """A steady stream of requests through the balancer, each answer checked."""

    def __init__(self, fleet, protocol):
        super().__init__(daemon=True)
        self.fleet, self.protocol = fleet, protocol
        self.stop = threading.Event()
        self.ok, self.failures = 0, []
        self.rng = np.random.default_rng(7)

    def one(self, conn):
        x = self.rng.standard_normal((1, 16)).astype(np.float32)
        if self.protocol == "http":
            body = json.dumps({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32",
                                           "data": x.ravel().tolist()}]})
            conn.request("POST", "/v2/models/mlp/infer", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            doc = json.loads(r.read())
            if r.status != 200:
                raise AssertionError(f"status {r.status}: {doc}")
            y = np.asarray(doc["outputs"][0]["data"], np.float64).reshape(doc["outputs"][0]["shape"])
        else:
            y = next(iter(conn.infer("mlp", {"x": x}).values()))
        np.testing.assert_allclose(y, reference(self.fleet.mlp_file, x), rtol=1e-4, atol=1e-5)

    def run(self):
        t_end = time.monotonic() + MAX_SECONDS
        conn = http.client.HTTPConnection("127.0.0.1", self.fleet.lb_http, timeout=30) if self.protocol == "http" \
            else Client("127.0.0.1", self.fleet.lb_binary, timeout=30)
        while not self.stop.is_set() and self.ok + len(self.failures) < MAX_REQUESTS and time.monotonic() < t_end:
            try:
                self.one(conn)
                self.ok += 1
            except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
                self.failures.append(f"{type(exc).__name__}: {exc}")
                conn.close()     # the next request opens a new connection
        conn.close()

    def wait_answers(self, n, timeout=30):
        target = self.ok + n
        deadline = time.monotonic() + timeout
        while self.ok < target:
            assert time.monotonic() < deadline and self.is_alive(), f"stream stalled at {self.ok} ({self.failures})"
            time.sleep(0.01)  # waiting for the stream's own count, bounded


@pytest.mark.parametrize("protocol", ["http", "binary"])
def test_a_rollout_that_drains_each_host_fails_no_request(fleet, protocol):
    streams = [Stream(fleet, protocol) for _ in range(2)]
    for s in streams:
        s.start()
    for s in streams:
        s.wait_answers(20)
    t0 = time.monotonic()
    for name in ENGINES:
        # What deploy does per host: drain, wait for its connections, restart, re-enable.
        fleet.api.set_state(name, "drain")
        if protocol == "http":
            assert fleet.api.wait_drained(name, timeout_s=10), fleet.api.server(name)
        old = fleet.engines[name]
        assert old.stop() == 0        # SIGTERM: the engine answers what it holds (binary: then GOODBYE)
        fleet.engines[name] = fleet.start_engine(name)
        fleet.api.set_state(name, "ready")
        assert fleet.api.wait_status(name, "UP", 10), fleet.api.server(name)
        for s in streams:
            s.wait_answers(10)        # traffic flows between hosts
    rollout_s = time.monotonic() - t0
    for s in streams:
        s.stop.set()
        s.join(30)
    total = sum(s.ok for s in streams)
    print(f"\nrollout of 3 hosts under a steady {protocol} stream: {total} answers, "
          f"{sum(len(s.failures) for s in streams)} failed, {rollout_s:.1f} s")
    assert [f for s in streams for f in s.failures] == []
    assert total >= 2 * (20 + 3 * 10)


def test_a_killed_host_costs_at_most_its_requests_in_flight(fleet):
    streams = [Stream(fleet, "http") for _ in range(2)]
    for s in streams:
        s.start()
    for s in streams:
        s.wait_answers(20)
    fleet.engines["e2"].proc.send_signal(signal.SIGKILL)
    assert fleet.api.wait_status("e2", "DOWN", 10), fleet.api.server("e2")
    failed_before_down = sum(len(s.failures) for s in streams)
    for s in streams:
        s.wait_answers(50)            # after HAProxy marked it down: none may fail
    for s in streams:
        s.stop.set()
        s.join(30)
    failed = sum(len(s.failures) for s in streams)
    print(f"\nkill -9 of one of 3 hosts: {failed_before_down} failed before it was marked down, "
          f"{failed - failed_before_down} after; {sum(s.ok for s in streams)} answers")
    assert failed_before_down <= len(streams)        # at most one request in flight per client
    assert failed == failed_before_down
