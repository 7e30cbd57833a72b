"""Dynamic batching, priorities, deadlines and bounded queues, on a live server."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import numpy as np
import pytest

from kernel_mlp import reference
from serve_support import metric, wait_for, wait_queue_depth


def infer(server, model: str, x: np.ndarray, name: str = "x", **params) -> tuple[int, dict, dict]:
    body = {"inputs": [{"name": name, "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]}
    if params:
        body["parameters"] = params
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
    try:
        conn.request("POST", f"/v2/models/{model}/infer", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read()), dict(r.getheaders())
    finally:
        conn.close()


def in_thread(fn, *args, **kwargs):
    out = {}

    def run():
        out["t0"] = time.monotonic()
        out["result"] = fn(*args, **kwargs)
        out["t1"] = time.monotonic()
    t = threading.Thread(target=run)
    t.start()
    return t, out


def y_of(resp) -> np.ndarray:
    o = resp["outputs"][0]
    return np.array(o["data"], np.float32).reshape(o["shape"])


def test_concurrent_requests_are_batched_and_answered_in_order(serve_factory, run_gate, mlp_file):
    # The first request runs at once (an idle model does not wait) and is
    # held at the gate; the other eleven queue behind it (observed, not
    # timed), so how they batch depends on the policy alone.
    server = serve_factory([{"name": "m", "path": str(mlp_file), "instances": 1, "max_batch_size": 8,
                             "max_queue_delay_us": 100_000}], gate=run_gate)
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((b, 16)).astype(np.float32) for b in (1, 2, 3, 1, 1, 2, 1, 3, 1, 1, 2, 1)]
    threads = [in_thread(infer, server, "m", xs[0])]
    run_gate.wait_started(1)
    threads += [in_thread(infer, server, "m", x) for x in xs[1:]]
    wait_queue_depth(server, "m", len(xs) - 1)
    run_gate.release(len(xs))
    for t, _ in threads:
        t.join(30)
    for x, (_, out) in zip(xs, threads):
        status, resp, _ = out["result"]
        assert status == 200
        np.testing.assert_allclose(y_of(resp), reference(mlp_file, x), rtol=1e-5, atol=1e-5)
    stats = json.loads(server.get("/v2/models/m/stats")[1])["model_stats"][0]
    assert stats["inference_count"] == sum(len(x) for x in xs)
    # 18 queued items in batches of at most 8: three or four batches behind the first.
    assert 3 <= stats["execution_count"] - 1 <= 4, stats
    assert max(b["batch_size"] for b in stats["batch_stats"]) <= 8
    # A lone request waits for company no longer than the delay.
    run_gate.close()
    t0 = time.monotonic()
    assert infer(server, "m", xs[0])[0] == 200
    assert time.monotonic() - t0 < 0.1 + 0.5


def test_higher_priority_runs_first_fifo_within_a_level(serve_factory, run_gate, mlp_file):
    server = serve_factory([{"name": "m", "path": str(mlp_file), "instances": 1, "max_batch_size": 1,
                             "priority_levels": 3, "default_priority": 2}], gate=run_gate)
    x = np.full((1, 16), 0.5, np.float32)
    done: list[str] = []
    lock = threading.Lock()

    def tagged(tag, **params):
        status = infer(server, "m", x, **params)[0]
        with lock:
            done.append(tag)
        return status
    blocker = in_thread(tagged, "blocker")
    run_gate.wait_started(1)  # the blocker runs (held at the gate); the rest queue behind it
    order = [("low", 3), ("default-a", 0), ("high", 1), ("default-b", 0)]
    threads = []
    for queued, (tag, prio) in enumerate(order, 1):
        threads.append(in_thread(tagged, tag, **({"priority": prio} if prio else {})))
        wait_queue_depth(server, "m", queued)  # arrival order is the order above
    # One run at a time, each answered before the next may end: `done` is the order they ran in.
    for answered in range(1, len(order) + 2):
        run_gate.release(1)
        wait_for(lambda: len(done) >= answered, f"answer {answered}")
    for t, out in [blocker] + threads:
        t.join(30)
        assert out["result"] == 200
    assert done == ["blocker", "high", "default-a", "default-b", "low"]


def test_deadline_fires_while_a_long_batch_runs_and_the_request_never_runs(serve_factory, run_gate, mlp_file):
    server = serve_factory([{"name": "m", "path": str(mlp_file), "instances": 1, "max_batch_size": 1,
                             "max_timeout_us": 10_000_000}], gate=run_gate)
    x = np.full((1, 16), 0.25, np.float32)
    long_run = in_thread(infer, server, "m", x)
    run_gate.wait_started(1)  # the long batch runs until the test lets it end
    t0 = time.monotonic()
    status, resp, _ = infer(server, "m", x, timeout=200_000)
    waited = time.monotonic() - t0
    assert status == 504 and "deadline" in resp["error"] and "did not run" in resp["error"]
    # At its deadline; not when the batch ended, which it has not: it is still held.
    assert waited > 0.15, waited
    assert long_run[0].is_alive() and run_gate.started() == 1
    run_gate.release(1)
    long_run[0].join(30)
    assert long_run[1]["result"][0] == 200
    stats = json.loads(server.get("/v2/models/m/stats")[1])["model_stats"][0]
    assert stats["execution_count"] == 1 and stats["inference_count"] == 1  # the expired one never ran
    assert metric(server, "aie_request_timeouts_total", model="m") == 1
    assert metric(server, "aie_requests_total", code=504, model="m", protocol="http") == 1


def test_full_queue_rejects_at_once_with_429(serve_factory, run_gate, mlp_file):
    server = serve_factory([{"name": "m", "path": str(mlp_file), "instances": 1, "max_batch_size": 1,
                             "max_queue_size": 2}], gate=run_gate)
    x = np.full((1, 16), -0.5, np.float32)
    blocker = in_thread(infer, server, "m", x)
    run_gate.wait_started(1)
    queued = [in_thread(infer, server, "m", x) for _ in range(2)]
    wait_queue_depth(server, "m", 2)
    rejected = [in_thread(infer, server, "m", x) for _ in range(4)]
    for t, _ in rejected:
        t.join(30)
    for _, out in rejected:
        status, resp, headers = out["result"]
        assert status == 429 and "queue full" in resp["error"]
        assert int(headers["Retry-After"]) >= 1
    # At once: all four were answered while the queue could not move (its head is held at the gate).
    assert run_gate.started() == 1 and all(t.is_alive() for t, _ in [blocker] + queued)
    run_gate.release(3)
    for t, out in [blocker] + queued:
        t.join(30)
        assert out["result"][0] == 200
    assert metric(server, "aie_queue_rejections_total", model="m") == 4


def test_deadline_fires_while_its_batch_runs_and_the_result_is_discarded(serve_factory, run_gate, mlp_file):
    from kernel_mlp import reference

    from engine import wire

    server = serve_factory([{"name": "m", "path": str(mlp_file), "instances": 1, "max_batch_size": 2,
                             "max_queue_delay_us": 100_000, "max_timeout_us": 10_000_000}], gate=run_gate)
    rng = np.random.default_rng(5)
    xa, xb = (rng.standard_normal((1, 16)).astype(np.float32) for _ in range(2))
    # One write carrying both frames: they arrive within the 100 ms queue
    # delay, so they share one batch; B's deadline (0.3 s) passes while that
    # batch is held at the gate, which opens only once B has its answer.
    frames = wire.encode_infer(1, "m", {"x": xa}) + wire.encode_infer(2, "m", {"x": xb}, timeout_us=300_000)
    answers = {}
    with socket.create_connection(("127.0.0.1", server.binary_port), timeout=30) as s:
        t0 = time.monotonic()
        s.sendall(b"".join(frames))
        f = s.makefile("rb")
        for _ in range(2):
            op, length, _ = wire.parse_header(f.read(16), 1 << 30)
            payload = memoryview(f.read(length))
            at = time.monotonic() - t0
            if op == wire.OP_ERROR:
                rid, status, message = wire.decode_error(payload)
                answers[rid] = (at, status, message, run_gate.started())
                run_gate.release(1)
            else:
                rid, outputs = wire.decode_result(payload)
                answers[rid] = (at, 200, outputs["y"], run_gate.started())
    b_at, b_status, b_message, b_runs = answers[2]
    a_at, a_status, a_y, _ = answers[1]
    assert b_status == 504 and "while its batch was running" in b_message, b_message
    assert b_at > 0.25 and b_runs == 1, (b_at, b_runs)  # at its deadline, its batch started and still held
    assert a_status == 200 and a_at > b_at
    np.testing.assert_allclose(a_y, reference(mlp_file, xa), rtol=1e-4, atol=1e-4)
    stats = json.loads(server.get("/v2/models/m/stats")[1])["model_stats"][0]
    assert stats["execution_count"] == 1 and stats["inference_count"] == 2, stats  # B did run, with A
    assert metric(server, "aie_request_timeouts_total", model="m") == 1
    assert metric(server, "aie_requests_total", code=504, model="m", protocol="binary") == 1
    # Over HTTP, a lone request on an idle server starts at once and still gets its 504 at the deadline.
    t0 = time.monotonic()
    status, resp, _ = infer(server, "m", xa, timeout=300_000)
    waited = time.monotonic() - t0
    assert status == 504 and "while its batch was running" in resp["error"], resp
    assert waited > 0.25 and run_gate.started() == 2, waited
    run_gate.release(1)
