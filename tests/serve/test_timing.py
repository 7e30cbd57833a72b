"""The five latency phases (engine.server.timing) on every protocol: in the
Server-Timing header, the request log and /metrics, adding up to the
server's end-to-end latency and contained in the client's.

Tolerances come from what each figure counts, not from timing luck:
- log: the five *_us fields are contiguous spans truncated to whole
  microseconds, so their sum is latency_us minus at most 5 us (one
  truncation each) and never more than latency_us + 1;
- client: the client's clock starts before it sends the first byte and
  stops after it read the last, so everything the server counts up to the
  moment it starts writing (Server-Timing's five, or the first four phases)
  fits inside it. encode_write's end is not compared with the client: the
  client may hold the bytes before the server's write call returns.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import numpy as np
import pytest

from engine import wire
from serve_support import metric, parse_prometheus, wait_for, wait_log, wait_queue_depth

PHASES = ("network", "decode", "queue", "compute", "encode_write")
X = np.random.default_rng(11).standard_normal((3, 16)).astype(np.float32)


def json_body(x: np.ndarray) -> tuple[bytes, dict]:
    body = json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()
    return body, {"Content-Type": "application/json"}


def binary_body(x: np.ndarray) -> tuple[bytes, dict]:
    head = json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                   "parameters": {"binary_data_size": x.nbytes}}],
                       "parameters": {"binary_data_output": True}}).encode()
    return head + x.tobytes(), {"Content-Type": "application/octet-stream",
                                "Inference-Header-Content-Length": str(len(head))}


def http_infer(server, body: bytes, headers: dict, trace: str) -> tuple[int, dict, float]:
    """(status, response headers, client-side seconds from the first byte sent to the last read) on a
    connection opened beforehand (connecting is not part of the request)."""
    host, port = server.url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.connect()
    try:
        t0 = time.monotonic()
        conn.request("POST", "/v2/models/m/infer", body, {**headers, "traceparent": trace})
        resp = conn.getresponse()
        resp.read()
        took = time.monotonic() - t0
        return resp.status, dict(resp.getheaders()), took
    finally:
        conn.close()


def server_timing(value: str) -> dict[str, float]:
    """Server-Timing's metrics in ms."""
    out = {}
    for item in value.split(","):
        name, _, dur = item.strip().partition(";dur=")
        out[name] = float(dur)
    return out


def check_log(rec: dict) -> list[int]:
    spans = [rec[f"{p}_us"] for p in PHASES]
    assert all(isinstance(s, int) and s >= 0 for s in spans), rec
    assert rec["latency_us"] - len(PHASES) <= sum(spans) <= rec["latency_us"] + 1, rec
    return spans


@pytest.fixture(scope="module")
def server(module_serve_factory, module_mlp_file):
    return module_serve_factory([{"name": "m", "path": str(module_mlp_file), "max_queue_delay_us": 0}])


@pytest.mark.parametrize("encoding", [json_body, binary_body], ids=["json", "binary-tensors"])
def test_http_phases_in_header_log_and_client_latency(server, encoding):
    trace = f"00-{'%032x' % (1 + (encoding is binary_body))}-00f067aa0ba902b7-01"
    status, headers, client_s = http_infer(server, *encoding(X), trace)
    assert status == 200
    timing = server_timing(headers["Server-Timing"])
    assert list(timing) == ["network", "decode", "queue", "compute", "encode"]
    assert all(v >= 0 for v in timing.values()) and timing["compute"] > 0, timing
    rec = wait_log(server, "request", trace_id=trace[3:35])
    spans = check_log(rec)
    # The header and the log are the same stamps (ms to 3 decimals vs whole us).
    for name, us in zip(PHASES[:4], spans):
        assert abs(timing[name] * 1e3 - us) <= 1, (name, timing, rec)
    # Contained: first byte -> encoded (the header's five) within the client's
    # send -> receive, and within the server's first byte -> written.
    header_us = sum(timing.values()) * 1e3
    assert header_us <= client_s * 1e6 + len(timing) * 0.5, (timing, client_s)
    assert header_us <= rec["latency_us"] + len(timing) * 0.5 + 1, (timing, rec)


def binary_infer(server, rid: int, x: np.ndarray) -> float:
    with socket.create_connection(("127.0.0.1", server.binary_port), timeout=30) as s:
        frame = b"".join(wire.encode_infer(rid, "m", {"x": x}))
        f = s.makefile("rb")
        t0 = time.monotonic()
        s.sendall(frame)
        op, length, _ = wire.parse_header(f.read(16), 1 << 30)
        f.read(length)
        took = time.monotonic() - t0
    assert op == wire.OP_RESULT
    return took


def test_binary_protocol_phases_in_log_and_client_latency(server):
    client_s = binary_infer(server, 7001, X)
    rec = wait_log(server, "request", protocol="binary", request_id=7001)
    spans = check_log(rec)
    assert spans[3] > 0
    assert sum(spans[:4]) <= client_s * 1e6, (rec, client_s)


def test_metrics_have_each_phase_by_protocol_and_they_add_up(server):
    """Every answered request is in each phase histogram under its protocol,
    and the phases' sums add up to the request duration's sum (every request
    to this server is answered 200)."""
    for i, encoding in enumerate((json_body, binary_body)):
        assert http_infer(server, *encoding(X[:1]), f"00-{'%032x' % (9 + i)}-00f067aa0ba902b7-01")[0] == 200
        binary_infer(server, 7002 + i, X[:1])
    text = server.get("/metrics")[1].decode()
    m = parse_prometheus(text)
    answered = {p: m[("aie_requests_total", (("code", "200"), ("model", "m"), ("protocol", p)))]
                for p in ("http", "binary")}
    assert answered["http"] >= 2 and answered["binary"] >= 2
    for protocol, n in answered.items():
        labels = (("model", "m"), ("protocol", protocol))
        assert m[("aie_request_duration_seconds_count", labels)] == n
        sums = []
        for phase in PHASES:
            assert m[(f"aie_{phase}_duration_seconds_count", labels)] == n, (phase, protocol)
            assert m[(f"aie_{phase}_duration_seconds_bucket", (("le", "+Inf"), *labels))] == n
            sums.append(m[(f"aie_{phase}_duration_seconds_sum", labels)])
        assert all(s >= 0 for s in sums)
        # Rendered to 9 decimals each: 6 roundings of at most 0.5 ns.
        assert sum(sums) == pytest.approx(m[("aie_request_duration_seconds_sum", labels)], abs=3e-9 * 2 * 6)
    # One queue and one compute family (the names scraped before the phases existed), no second one.
    assert text.count("# TYPE aie_queue_duration_seconds histogram") == 1
    assert "queue_seconds" not in text and "aie_compute_duration_seconds_count" in text


def test_a_request_held_behind_a_running_batch_shows_its_wait_in_queue(serve_factory, run_gate, mlp_file):
    server = serve_factory([{"name": "m", "path": str(mlp_file), "instances": 1, "max_batch_size": 8,
                             "max_queue_delay_us": 0}], gate=run_gate)
    results: dict[str, tuple] = {}

    def send(key: str, trace: str) -> None:
        results[key] = http_infer(server, *json_body(X), trace)

    blocker = threading.Thread(target=send, args=("blocker", f"00-{'a' * 32}-00f067aa0ba902b7-01"))
    blocker.start()
    run_gate.wait_started(1)   # the blocker's batch runs, held at the gate
    held = threading.Thread(target=send, args=("held", f"00-{'b' * 32}-00f067aa0ba902b7-01"))
    held.start()
    wait_queue_depth(server, "m", 1)   # the second is admitted and waits behind it
    queued_at = time.monotonic()
    # Still waiting: nothing ran since (observed, not assumed).
    assert run_gate.started() == 1 and metric(server, "aie_queue_depth", model="m") == 1 and held.is_alive()
    released_at = time.monotonic()
    run_gate.release(2)
    blocker.join(30)
    held.join(30)
    assert results["blocker"][0] == 200 and results["held"][0] == 200
    rec = wait_log(server, "request", trace_id="b" * 32)
    check_log(rec)
    # Admitted before queued_at, its batch could start only after the release
    # (CLOCK_MONOTONIC is one clock for both processes).
    assert rec["queue_us"] >= int((released_at - queued_at) * 1e6), rec
    assert server_timing(results["held"][1]["Server-Timing"])["queue"] * 1e3 >= rec["queue_us"] - 1
    blocked = wait_log(server, "request", trace_id="a" * 32)
    assert blocked["compute_us"] >= int((released_at - queued_at) * 1e6), blocked
    wait_for(lambda: metric(server, "aie_queue_duration_seconds_count", model="m", protocol="http") == 2,
             "both requests in the queue histogram")


def test_recovery_time_is_where_the_sliding_p99_returns_within_the_threshold():
    from engine.deploy import bench as load

    plan = load.phases(10.0, 0.0, 2.0, 1.0, 3.0)   # steady 0-2 s, spike 2-3 s, recovery 3-6 s
    result = load.BenchResult(url="-", model="m", plan=plan)
    # Steady: every answer in 10 ms. After the spike, a backlog: answers sent
    # before 4.5 s take 100 ms, later ones 11 ms (within 1.2 x 10 ms).
    result.samples = [load.Sample(i / 100, 0.010, load.OK, "steady") for i in range(200)]
    result.samples += [load.Sample(2 + i / 100, 0.100, load.OK, "spike") for i in range(100)]
    result.samples += [load.Sample(3 + i / 100, 0.100 if i < 150 else 0.011, load.OK, "recovery")
                       for i in range(300)]
    rec = load.recovery(result)
    assert rec["steady_p99_ms"] == pytest.approx(10.0) and rec["spike_end_s"] == 3.0
    assert rec["recovery_s"] == pytest.approx(1.5) and rec["window_p99_ms"] == pytest.approx(11.0)
    # Never back within the threshold: not recovered.
    result.samples = [s for s in result.samples if s.phase != "recovery" or s.sent_at < 4.5]
    result.samples += [load.Sample(4.5 + i / 100, 0.013, load.OK, "recovery") for i in range(150)]
    assert load.recovery(result)["recovery_s"] is None
    assert load.parse_server_timing("network;dur=0.1, decode;dur=0.2, queue;dur=0, compute;dur=1.5, "
                                    "encode;dur=0.05") == (0.1, 0.2, 0.0, 1.5, 0.05)
    assert load.parse_server_timing("network;dur=0.1") is None and load.parse_server_timing(None) is None


def test_bench_reports_layers_p999_recovery_and_plots_them(server, module_mlp_file, tmp_path):
    """The bench's load against a real server (a few seconds, at a low rate):
    every answer checked, Server-Timing read from each, the report's tables
    and the per-layer PNG written."""
    from engine.deploy import bench as load
    from kernel_mlp import reference

    x = X[:2]
    ref = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}],
           "outputs": [{"name": "y", "shape": [2, 4], "datatype": "FP32",
                        "data": reference(module_mlp_file, x).ravel().tolist()}], "rtol": 1e-4, "atol": 1e-5}
    plan = load.phases(40.0, 0.1, 0.5, 0.3, 0.6)
    result = load.run_load(f"http://{server.url}", "m", plan, load.reference_requests(ref), workers=4)
    assert result.samples and all(s.ok for s in result.samples), result.examples
    assert all(s.layers is not None and len(s.layers) == 5 for s in result.samples)
    path = load.write_report(result, tmp_path, "box")
    text = path.read_text()
    assert "| p99.9 ms |" in text and "| p50 | p90 | p99 | p99.9 |" in text
    for layer in (*load.LAYERS, "end-to-end"):
        assert f"| steady | {layer} | " in text and f"| recovery | {layer} | " in text
    assert "Recovery time: " in text and "steady-state p99" in text
    png = tmp_path / "bench-box-layers.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "![layers](bench-box-layers.png)" in text
