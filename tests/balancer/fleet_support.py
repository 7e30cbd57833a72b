"""Real engines behind a real HAProxy configured by the rendered
haproxy.cfg, for the balancer tests (the rollout and kill tests, the canary
ramp): `Fleet` starts the engines on loopback aliases (127.0.0.2-4: the
same ports on several addresses, as several hosts would have) and HAProxy
on 127.0.0.1; `Stream` is a steady, bounded client stream through it whose
every answer is checked against the model in float64."""

from __future__ import annotations

import http.client
import json
import shutil
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
needs_haproxy = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (make sysdeps installs it)")
ENGINES = {"e1": "127.0.0.2", "e2": "127.0.0.3", "e3": "127.0.0.4"}
MAX_REQUESTS, MAX_SECONDS = 20000, 120     # every stream is bounded in count and time


class Fleet:
    """`names`: which of ENGINES run; `balancer`: keys over the rendered
    balancer section (e.g. the algorithm)."""

    def __init__(self, serve_factory, mlp_file, tmp_path, names=tuple(ENGINES), balancer=None):
        self.serve_factory, self.mlp_file, self.tmp = serve_factory, mlp_file, tmp_path
        self.names = list(names)
        self.http_port, self.binary_port, lb_http, lb_binary = ports_free_on(
            ["127.0.0.1", *(ENGINES[n] for n in self.names)], 4)
        self.engines = {name: self.start_engine(name) for name in self.names}
        spec = tmp_path / "fleet.yaml"
        spec.write_text(json.dumps({
            "version": 1,
            "engine": {"listen": "0.0.0.0", "http_port": self.http_port, "binary_port": self.binary_port},
            "hosts": [{"name": "lb", "type": "ssh", "address": "127.0.0.1", "role": "balancer"}] +
                     [{"name": n, "type": "ssh", "address": ENGINES[n]} for n in self.names],
            # maxconn within this sandbox's file limit (HAProxy needs ~2 fds a connection)
            "balancer": {"listen": "127.0.0.1", "http_port": lb_http, "binary_port": lb_binary, "maxconn": 2000,
                         "runtime_socket": str(tmp_path / "admin.sock"),
                         "health": {"interval_s": "100ms", "rise": 1, "fall": 2}, **(balancer or {})}}))
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
                if all(self.api.wait_status(n, "UP", 0) for n in self.names):
                    break
            except Exception:  # noqa: BLE001 - the socket appears once haproxy has parsed its config
                pass
            assert time.monotonic() < deadline, "HAProxy did not report every engine UP in 30 s"
            time.sleep(0.05)  # polling HAProxy's state, bounded by the deadline

    def start_engine(self, name, model=None):
        """`model`: another model file for the same name (a new release)."""
        # A drain delay as in production (default 5 s), shortened: a binary
        # client that sent a request as the GOODBYE left reads it before the
        # idle connection closes (with 0, that request races the close).
        return self.serve_factory([{"name": "mlp", "path": str(model or self.mlp_file), "max_batch_size": 1}],
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

    # An idle keep-alive connection HAProxy closes as a reload's old worker
    # stops: a request written as it closes never reached a server, and an
    # HTTP client resends it on a new connection (RFC 9112 9.3.1; inference is
    # idempotent). HAProxy 2.6 has no idle-close-on-response to avoid it.
    CLOSED_IDLE = (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected)

    def __init__(self, fleet, protocol, resend_on_idle_close=False):
        super().__init__(daemon=True)
        self.fleet, self.protocol = fleet, protocol
        self.resend_on_idle_close = resend_on_idle_close and protocol == "http"
        self.stop = threading.Event()
        self.ok, self.failures, self.resent = 0, [], 0
        self.failed_inputs: list[np.ndarray] = []     # the input of each failure, in order
        self.rng = np.random.default_rng(7)

    def one(self, conn):
        x = self.x = self.rng.standard_normal((1, 16)).astype(np.float32)
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
        used = False      # whether conn has answered a request already (kept alive since)
        while not self.stop.is_set() and self.ok + len(self.failures) < MAX_REQUESTS and time.monotonic() < t_end:
            try:
                try:
                    self.one(conn)
                except self.CLOSED_IDLE:
                    if not (self.resend_on_idle_close and used):
                        raise
                    self.resent += 1
                    conn.close()
                    self.one(conn)     # http.client reconnects; a second failure counts
                self.ok += 1
                used = True
            except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
                used = False
                self.failures.append(f"{type(exc).__name__}: {exc}")
                self.failed_inputs.append(self.x)
                conn.close()     # the next request opens a new connection
        conn.close()

    def wait_answers(self, n, timeout=30):
        target = self.ok + n
        deadline = time.monotonic() + timeout
        while self.ok < target:
            assert time.monotonic() < deadline and self.is_alive(), f"stream stalled at {self.ok} ({self.failures})"
            time.sleep(0.01)  # waiting for the stream's own count, bounded


def start_streams(fleet, protocol: str, answers: int, n: int = 2) -> list[Stream]:
    """n streams through the balancer, each past its first `answers` answers."""
    streams = [Stream(fleet, protocol) for _ in range(n)]
    for s in streams:
        s.start()
    for s in streams:
        s.wait_answers(answers)
    return streams


def stop_streams(streams: list[Stream]) -> None:
    for s in streams:
        s.stop.set()
    for s in streams:
        s.join(30)
