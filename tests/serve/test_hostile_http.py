"""The HTTP front end under hostile clients (issue #16): strict parsing,
the token checked before any body byte, a server-wide budget for buffered
bodies, a write timeout, connection caps, bounded JSON decoding, and every
client mistake answered 4xx. Each test runs against a real server process."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time

import pytest

from engine import wire
from hostile_support import (unlimited_failures, Auth, HealthProbe, http_exchange, keep_alive_exchanges, log_events,
                             read_frame, read_until_close, rss_bytes, status_of, wait_for)
from kernel_mlp import write_mlp

MIB = 1 << 20
LIMITS = {"header_timeout_s": 2.0, "idle_timeout_s": 5.0, "drain_timeout_s": 10.0}
GOOD = json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32",
                               "data": [0.01] * 784}]}).encode()


@pytest.fixture(scope="module")
def server(module_serve_factory, zoo_mlp):
    return module_serve_factory([{"name": "mlp", "path": str(zoo_mlp.path), "max_batch_size": 8}], limits=LIMITS)


def post_head(path: str, length: int, extra: str = "") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n{extra}\r\n".encode()


def body_of(raw: bytes) -> dict:
    return json.loads(raw.split(b"\r\n\r\n", 1)[1])


# ---- 9, 12, 14: strict parsing -------------------------------------------------
@pytest.mark.parametrize("request_bytes, status", [
    (b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: \xb2\r\n\r\n", 400),   # '²' in latin-1
    (b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1\xb9\r\n\r\n", 400),  # '1¹
    (b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n", 400),
    (b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-A: a\nContent-Length: 5\r\n\r\n", 400),               # bare LF
    (b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400),                                # bare CR
    (b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n", 400),                                # NUL
    (b"GET /v2 HTTP/1.1\r\n\r\n", 400),                                                         # no Host
], ids=["superscript-length", "superscript-in-length", "signed-length", "bare-lf", "bare-cr", "nul", "no-host"])
def test_strict_head_parsing(server, request_bytes, status):
    raw, closed = http_exchange(server.http_port, request_bytes)
    assert status_of(raw) == status, raw[:300]
    assert closed and body_of(raw)["error"]
    assert "Traceback" not in server.log_path.read_text()
    assert server.get("/v2/health/live")[0] == 200


def test_inference_header_length_must_be_ascii_digits(server):
    status, resp, _ = server.post("/v2/models/mlp/infer", GOOD, {"Inference-Header-Content-Length": "\u00b2"})
    assert status == 400 and "Inference-Header-Content-Length" in json.loads(resp)["error"]


@pytest.mark.parametrize("path, statuses", [
    ("/v2/models/mlp%2Finfer", (400, 404)),
    ("/%6detrics", (404,)),
    ("/v2/models/ml%70/ready", (400, 404)),
])
def test_routing_uses_the_raw_path(server, path, statuses):
    head = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    if path.endswith("infer"):
        head = post_head(path, len(GOOD), "Connection: close\r\n") + GOOD
    raw, _ = http_exchange(server.http_port, head)
    assert status_of(raw) in statuses, raw[:300]
    assert b"aie_requests_total" not in raw


def test_http10_keep_alive_is_confirmed_and_kept(server):
    req = b"GET /v2/health/live HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
    for data in keep_alive_exchanges(server.http_port, req, 2):
        head = data.split(b"\r\n\r\n")[0].lower()
        assert data.startswith(b"HTTP/1.1 200") and b"\r\nconnection: keep-alive" in head, data


def test_a_stalled_body_is_cut_by_its_progress(server):
    t0 = time.monotonic()
    raw, closed = http_exchange(server.http_port, post_head("/v2/models/mlp/infer", len(GOOD)) + GOOD[:10])
    # One header_timeout_s window (2 s) without min_body_rate's share; before, idle_timeout_s (5 s) for any body.
    assert status_of(raw) == 408 and "min_body_rate" in body_of(raw)["error"] and closed
    assert time.monotonic() - t0 < 4


def test_a_slow_but_steady_body_may_outlast_the_header_timeout(server):
    body = json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32",
                                   "data": [0.123456789] * 784}], "id": "x" * 400_000}).encode()   # ~420 KB
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as s:
        s.sendall(post_head("/v2/models/mlp/infer", len(body), "Connection: close\r\n"))
        step = len(body) // 10 + 1
        for i in range(0, len(body), step):   # ~3 s at ~140 KB/s: past header_timeout_s, above min_body_rate
            s.sendall(body[i:i + step])
            time.sleep(0.3)  # the client's pace, not synchronisation
        raw, _ = read_until_close(s, 10)
    assert status_of(raw) == 200, raw[:300]


# ---- 10: client mistakes are 4xx, never 500 -------------------------------------
def _infer_doc(**item) -> bytes:
    base = {"name": "input", "shape": [1, 784], "datatype": "FP32", "data": [0.5] * 784}
    base.update(item)
    return json.dumps({"inputs": [base]}).encode()


@pytest.mark.parametrize("body, status, words", [
    (_infer_doc(data=[[0.5] * 784, [0.5] * 3]), 400, "values for shape"),
    (_infer_doc(shape=[2, 392], data=[[0.5] * 392, [0.5] * 391 + [[0.5]]]), 400, "ragged"),
    (_infer_doc(shape=[1] * 65 + [784]), 400, "at most 64"),
    (_infer_doc(shape=[1, 784], data=json.loads("[" * 70 + "0.5" + "]" * 70)), 400, "nests deeper than 64"),
    (b'{"inputs": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400, "depth"),
    (json.dumps({"inputs": [json.loads(_infer_doc())["inputs"][0]],
                 "outputs": [{"name": "logits", "parameters": [1]}]}).encode(), 400, "parameters must be an object"),
    (json.dumps({"inputs": [json.loads(_infer_doc())["inputs"][0]],
                 "parameters": {"timeout": 10 ** 400}}).encode(), 400, "'timeout' must be an integer"),
    (_infer_doc(datatype=["FP32"]), 400, "datatype"),
    (_infer_doc(shape=[10 ** 30, 784]), 400, "shape must be"),
    (_infer_doc(shape=[2 ** 62, 0], data=[]), 400, "too big"),
    (json.dumps({"inputs": [{"name": "input", "shape": [2 ** 62, 0], "datatype": "FP32",
                             "parameters": {"binary_data_size": 0}}]}).encode(), 400, "too big"),
], ids=["count", "ragged", "dims", "deep-data", "deep-json", "output-parameters", "huge-timeout", "list-datatype",
        "huge-dim", "empty-huge-dim", "empty-huge-dim-binary"])
def test_client_mistakes_are_4xx(server, body, status, words):
    before = len(log_events(server, "handler_crashed"))
    got, resp, _ = server.post("/v2/models/mlp/infer", body)
    assert got == status and words in json.loads(resp)["error"], resp[:300]
    assert len(log_events(server, "handler_crashed")) == before


# ---- 4: large JSON bodies: bounded decode, the loop stays free ----------------
def test_abusive_json_body_is_refused_without_stalling_the_loop(server):
    body = b'{"inputs": [' + b"[]," * (20 * MIB) + b"[]]}"      # 60 MiB, 20 million empty lists
    rss0 = rss_bytes(server.proc.pid)
    with HealthProbe(server) as probe:
        raw, _ = http_exchange(server.http_port, post_head("/v2/models/mlp/infer", len(body)) + body, wait=60)
    assert status_of(raw) == 413 and "max_json_elements" in body_of(raw)["error"]
    worst = probe.worst()
    assert len(probe.latencies) >= 10
    # Before the fix health waited 12-17 s. The figure is 50 ms; here
    # the worst probe was 11-19 ms, once 61 ms in a whole-suite run: this 2-core
    # host's scheduler alone can cost tens of ms, so the test bounds the stall
    # at 250 ms (a loop-blocking regression is seconds); the worst probe is
    # printed in the failure message so the figure can be read off a run.
    assert worst < 0.250, f"health waited {worst * 1e3:.1f} ms (median {sorted(probe.latencies)[len(probe.latencies) // 2] * 1e3:.1f})"
    # The body is held once (joined from its chunks); nothing is built from it.
    assert rss_bytes(server.proc.pid) - rss0 < 200 * MIB


# ---- 5: the token before the body; one budget for buffered bodies ----------------
@pytest.fixture(scope="module")
def auth_server(module_serve_factory, zoo_mlp, tmp_path_factory):
    auth = Auth(tmp_path_factory.mktemp("auth"))
    server = module_serve_factory([{"name": "mlp", "path": str(zoo_mlp.path)}], auth=unlimited_failures(auth.config()),
                                  limits={**LIMITS, "max_body": 8 * MIB, "max_buffered_bytes": 8 * MIB,
                                          "write_timeout_s": 1.0})
    server.auth = auth
    return server


def test_no_100_continue_and_no_body_read_without_a_token(auth_server):
    with socket.create_connection(("127.0.0.1", auth_server.http_port), timeout=5) as s:
        s.sendall(post_head("/v2/models/mlp/infer", 8 * MIB, "Expect: 100-continue\r\n"))
        raw, closed = read_until_close(s, 5)
    assert status_of(raw) == 401 and b"100 Continue" not in raw
    assert b"\r\nConnection: close" in raw and closed


def test_unauthenticated_bodies_do_not_grow_memory(auth_server):
    rss0 = rss_bytes(auth_server.proc.pid)
    chunk = b"\0" * MIB

    def push():
        with socket.create_connection(("127.0.0.1", auth_server.http_port), timeout=10) as s:
            s.sendall(post_head("/v2/models/mlp/infer", 8 * MIB))
            try:
                for _ in range(8):
                    s.sendall(chunk)
            except OSError:
                pass  # refused and closed: what we want
            raw, _ = read_until_close(s, 5)
            assert status_of(raw) == 401
    threads = [threading.Thread(target=push) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # Before: 16 bodies read in full before the 401 (1.17 GB in the run).
    assert rss_bytes(auth_server.proc.pid) - rss0 < 32 * MIB


def test_over_budget_bodies_get_503_with_retry_after(auth_server):
    auth = f"Authorization: Bearer {auth_server.auth.token()}\r\n"
    with socket.create_connection(("127.0.0.1", auth_server.http_port), timeout=10) as holder:
        # The holder announces the largest body and sends a part: the whole budget is reserved for it.
        holder.sendall(post_head("/v2/models/mlp/infer", 8 * MIB, auth) + b"\0" * 1024)
        raw, _ = wait_for(lambda: (r := http_exchange(auth_server.http_port,
                                                      post_head("/v2/models/mlp/infer", 1024, auth) + b"{" * 1024))
                          and status_of(r[0]) == 503 and r, "a 503 while the budget is held", 5)
        assert b"\r\nRetry-After: 1" in raw and "max_buffered_bytes" in body_of(raw)["error"]
    # The holder left: its reservation is returned and a request goes through.
    status, resp, _ = wait_for(lambda: (r := auth_server.post("/v2/models/mlp/infer", GOOD, {
        "Authorization": f"Bearer {auth_server.auth.token()}"})) and r[0] == 200 and r, "budget returned", 10)
    assert json.loads(resp)["outputs"][0]["shape"] == [1, 10]


def test_memory_returns_to_baseline_after_a_burst(auth_server):
    headers = {"Authorization": f"Bearer {auth_server.auth.token()}"}
    big = b'{"inputs": [' + b" " * (7 * MIB) + b"]}"  # a body that is read in full, then refused 400
    auth_server.post("/v2/models/mlp/infer", big, headers)  # warm-up: allocator arenas, code paths
    rss0 = rss_bytes(auth_server.proc.pid)
    answers = []

    def post():
        try:
            answers.append(auth_server.post("/v2/models/mlp/infer", big, headers)[0])
        except OSError:   # 503 and closed before the whole body was sent: the budget at work
            answers.append("closed")
    for _ in range(3):
        threads = [threading.Thread(target=post) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert status_of(http_exchange(auth_server.http_port, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n"
                                                          b"Connection: close\r\n\r\n")[0]) == 200
    assert 400 in answers and set(answers) <= {400, 503, "closed"}, answers
    assert rss_bytes(auth_server.proc.pid) - rss0 < 24 * MIB


# ---- 7: write timeout ------------------------------------------------------------
def test_client_that_stops_reading_is_cut_off(serve_factory, mlp_file):
    wide = mlp_file.with_name("wide.npz")
    write_mlp(wide, [16, 65536], seed=3)   # 256 KiB of outputs per row: JSON answers of ~1.3 MB
    server = serve_factory([{"name": "wide", "path": str(wide), "max_batch_size": 1}],
                           limits={**LIMITS, "write_timeout_s": 1.0, "drain_timeout_s": 20.0})
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0.1] * 16}]}).encode()
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", server.http_port))
    try:
        s.sendall((post_head("/v2/models/wide/infer", len(body)) + body) * 8)  # and never read
        wait_for(lambda: log_events(server, "write_timeout"), "a write_timeout log line", 15)
    finally:
        s.close()
    t0 = time.monotonic()
    server.signal(signal.SIGTERM)
    assert server.proc.wait(15) == 0 and time.monotonic() - t0 < 10


# ---- 11: connection caps -----------------------------------------------------------
def test_connection_caps_total_and_per_client(serve_factory, zoo_mlp):
    server = serve_factory([{"name": "mlp", "path": str(zoo_mlp.path)}],
                           limits={**LIMITS, "idle_timeout_s": 30.0, "max_connections": 6,
                                   "max_connections_per_client": 3})
    held = []
    try:
        def connect(source: str) -> socket.socket:
            s = socket.socket()
            s.bind((source, 0))
            s.connect(("127.0.0.1", server.http_port))
            held.append(s)
            return s

        def refused(s: socket.socket) -> bytes:
            raw, closed = read_until_close(s, 5)
            assert closed and status_of(raw) == 503, raw[:200]
            return raw

        for _ in range(3):
            connect("127.0.0.2")
        raw = refused(connect("127.0.0.2"))
        assert b"max_connections_per_client" in raw and b"Retry-After: 1" in raw
        for _ in range(3):
            connect("127.0.0.3")
        assert b"limits.max_connections" in refused(connect("127.0.0.4"))
        # The binary port shares the caps: an error frame, then close.
        b = socket.create_connection(("127.0.0.1", server.binary_port), timeout=5, source_address=("127.0.0.5", 0))
        held.append(b)
        op, payload = read_frame(b)
        rid, status, message = wire.decode_error(payload)
        assert (op, rid, status) == (wire.OP_ERROR, 0, 503) and "max_connections" in message
        lines = wait_for(lambda: log_events(server, "connection_refused"), "a connection_refused line", 5)
        assert "max_connections_per_client" in lines[0]["reason"]
    finally:
        for s in held:
            s.close()
    # Closing them frees the slots.
    wait_for(lambda: server.get("/v2/health/live")[0] == 200, "a free connection slot", 10)


def test_connection_cap_stays_below_the_open_file_limit():
    """1,100 idle connections under 1,024 descriptors failed health checks
    and reloads: the cap is clamped so the server keeps descriptors of its own."""
    import io
    import resource

    from engine.server.clientlimits import FD_RESERVE, ConnectionCaps
    from engine.server.config import LimitsConfig
    from engine.server.logs import JsonLogger

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_RESERVE + 10, hard))
    try:
        log = io.StringIO()
        caps = ConnectionCaps(JsonLogger("info", stream=log))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    limits = LimitsConfig(max_connections=1000, max_connections_per_client=1000)
    assert all(caps.admit(f"10.0.0.{i}", limits) is None for i in range(10))
    why = caps.admit("10.0.0.99", limits)
    assert why is not None and "open-file limit" in why
    assert json.loads(log.getvalue().splitlines()[0])["event"] == "connection_refused"
    caps.release("10.0.0.3")
    assert caps.admit("10.0.0.99", limits) is None
