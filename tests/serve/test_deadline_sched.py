"""Deadline-aware scheduling on a live server: EDF against FIFO under the
same open-loop load, hopeless deadlines refused at once, the scheduler's
decisions exposed in /health and /metrics, and the accuracy of the
sub-millisecond wait."""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import time

import numpy as np
import pytest

from serve_support import REPO, parse_prometheus, slow_model

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_deadlines import (WINDOWS, pattern_summary, run_load, service_time, summarize, verdict,  # noqa: E402
                             wait_errors)


def infer_binary(server, model: str, x: np.ndarray, timeout_us: int = 0) -> tuple[int, float, str]:
    """(status, seconds, error message) of one request over the binary protocol."""
    import socket

    from engine import wire

    with socket.create_connection(("127.0.0.1", server.binary_port), timeout=30) as s:
        t0 = time.monotonic()
        s.sendall(b"".join(wire.encode_infer(1, model, {"x": x}, timeout_us=timeout_us)))
        f = s.makefile("rb")
        op, length, _ = wire.parse_header(f.read(16), 1 << 30)
        payload = memoryview(f.read(length))
        took = time.monotonic() - t0
    if op == wire.OP_ERROR:
        _, status, message = wire.decode_error(payload)
        return status, took, message
    return 200, took, ""


def clumps(rng: random.Random, service_s: float, count: int, size: int = 8, load: float = 0.8):
    """Arrival times and deadlines: `count` clumps of `size` requests sent
    together, one clump every size * service / load seconds (80% load on
    average), each clump holding one tight deadline (3x the service time)
    at a random place among loose ones (20x). Clumps make the queue form
    whatever the host's noise; FIFO then runs the tight request after the
    ones ahead of it in its clump, EDF first."""
    times, limits, period = [], [], size * service_s / load
    for c in range(count):
        tight = rng.randrange(size)
        for i in range(size):
            times.append(c * period)
            limits.append((3 if i == tight else 20) * service_s)
    return times, limits


def test_edf_meets_more_deadlines_than_fifo_at_80_percent_load(serve_factory, tmp_path, record_property):
    model = slow_model(tmp_path / "slow.npz", 0.015)
    # Batches of one: the comparison is about order alone.
    common = {"path": str(model), "max_batch_size": 1, "instances": 1, "threads": 1, "max_queue_size": 4096}
    server = serve_factory([{"name": "edf", **common}, {"name": "fifo", "queue_order": "fifo", **common}])
    x = np.full((1, 256), 0.5, np.float32)
    for name in ("edf", "fifo"):  # compute measured: the hopeless rule applies from the start
        assert infer_binary(server, name, x)[0] == 200
    results, service = {"edf": [], "fifo": []}, {"edf": [], "fifo": []}
    # Slices taken in turn, each sized from the service time measured just
    # before it (the host is shared and its speed drifts by 2x over seconds).
    for chunk in range(6):
        name = ("edf", "fifo")[chunk % 2]
        service_s = service_time(server.binary_port, name, x, 8)
        times, limits = clumps(random.Random(chunk // 2), service_s, count=8)
        results[name].append(run_load(server.binary_port, name, x, times, limits))
        service[name].append(round(service_s * 1e3, 1))
    summary = {name: {**summarize(slices), "service_ms": service[name]} for name, slices in results.items()}
    health = json.loads(server.get("/health")[1])["models"]
    summary["compute_us"] = {n: health[n]["scheduler"]["compute_us_by_batch"] for n in ("edf", "fifo")}
    record_property("deadline_met", json.dumps(summary))
    print(f"\ndeadline-met at 80% load (EDF vs FIFO): {summary}")
    assert summary["edf"]["tight_met"] > summary["fifo"]["tight_met"], summary
    assert summary["edf"]["met"] > summary["fifo"]["met"], summary


def test_a_hopeless_deadline_is_refused_at_once_and_counted(serve_factory, tmp_path):
    model = slow_model(tmp_path / "slow.npz", 0.3)
    server = serve_factory([{"name": "slow", "path": str(model), "max_batch_size": 1, "max_timeout_us": 10_000_000}])
    x = np.full((1, 256), 0.25, np.float32)
    assert infer_binary(server, "slow", x)[0] == 200
    # The rule works from the compute time the server measured (whatever this
    # host's speed is now): a deadline a quarter of it away is hopeless.
    compute_us = json.loads(server.get("/health")[1])["models"]["slow"]["scheduler"]["compute_us_by_batch"]["1"]
    status, _, message = infer_binary(server, "slow", x, timeout_us=max(1000, int(compute_us) // 4))
    # Refused on arrival ("cannot be met ... did not run"), not expired at its deadline ("deadline passed").
    assert status == 504 and "cannot be met" in message and "did not run" in message, message
    stats = json.loads(server.get("/v2/models/slow/stats")[1])["model_stats"][0]
    assert stats["execution_count"] == 1
    m = parse_prometheus(server.get("/metrics")[1].decode())
    assert m[("aie_deadline_rejections_total", (("model", "slow"),))] == 1
    assert m[("aie_request_timeouts_total", (("model", "slow"),))] == 0
    health = json.loads(server.get("/health")[1])["models"]["slow"]["scheduler"]
    assert health["deadline_rejections"] == 1


def test_decisions_are_exposed_per_model(serve_factory, mlp_file):
    server = serve_factory([{"name": "auto", "path": str(mlp_file), "max_queue_delay_us": "auto",
                             "priority_levels": 2},
                            {"name": "fixed", "path": str(mlp_file), "max_queue_delay_us": 700}])
    x = np.zeros((1, 16), np.float32)
    for _ in range(5):
        assert infer_binary(server, "auto", x)[0] == 200
    health = json.loads(server.get("/health")[1])["models"]
    assert health["auto"]["scheduler"]["window"] == "auto"
    assert health["auto"]["scheduler"]["arrival_rate_per_s"] > 0
    assert health["auto"]["scheduler"]["queue_depth_by_priority"] == {"1": 0, "2": 0}
    # The window's costs per measured size (engine.server.window), the line's until two sizes ran back to back.
    sched = health["auto"]["scheduler"]
    assert set(sched["window_costs_us"]) == set(sched["compute_us_by_batch"])
    assert health["fixed"]["scheduler"]["window"] == "fixed"
    assert health["fixed"]["scheduler"]["window_us"] == 700
    m = parse_prometheus(server.get("/metrics")[1].decode())
    assert m[("aie_batch_window_seconds", (("model", "fixed"),))] == pytest.approx(700e-6)
    assert m[("aie_arrival_rate", (("model", "auto"),))] > 0
    assert m[("aie_queue_depth_priority", (("model", "auto"), ("priority", "2")))] == 0
    assert m[("aie_deadline_rejections_total", (("model", "auto"),))] == 0
    config = json.loads(server.get("/v2/models/auto/config")[1])
    assert config["dynamic_batching"]["max_queue_delay_auto"] is True


def test_sub_millisecond_waits_are_never_early_and_end_when_the_batch_fills():
    """The scheduler's wait (a timer for all but the last SPIN_S, then yields
    re-checking the clock) for 300-800 us targets: it never returns before
    its target, and a set event (the batch filled) ends it at once. How close
    to the target it ends depends on how soon the host runs this thread
    again, so it is printed here and measured in benchmarks/bench_deadlines.py
    (docs/PERFORMANCE.md), not asserted: a timed assert is a flaky test."""
    uvloop = pytest.importorskip("uvloop", reason="the server runs on uvloop when installed; measured there")
    from engine.server.scheduler import wait_until

    async def measure():
        errs = await wait_errors(60)
        filled = asyncio.Event()
        asyncio.get_running_loop().call_soon(filled.set)
        t0 = time.monotonic()
        await wait_until(filled, t0 + 3600)      # an hour: only the event can end it
        return errs["wait_until"], errs["loop timer"], time.monotonic() - t0

    ours, timer, filled_after = uvloop.run(measure())
    err_ours = statistics.median(abs(e) for e in ours)
    err_timer = statistics.median(abs(e) for e in timer)
    print(f"\nwait error, median |actual - target|: ours {err_ours * 1e6:.0f} us, loop timer {err_timer * 1e6:.0f} us")
    assert min(ours) >= 0                       # never early
    assert filled_after < 3600


def _repeats(rng: np.random.Generator, scale_ms: float, met: float, reps: int = 5, n: int = 400) -> list[dict]:
    """Repeats of one cell: latencies lognormal around scale_ms, a fraction met of them within deadline."""
    out = []
    for k in range(reps):
        lat = rng.lognormal(np.log(scale_ms * 1e-3), 0.4, n) * (1 + 0.2 * k)   # drift: later repeats slower
        limits = [1.0 if i < met * n else 1e-9 for i in range(n)]
        out.append(summarize([{"raw": [(200, v) for v in lat], "limits": limits}])
                   | {"raw": [(200, v) for v in lat], "limits": limits})
    return out


def test_the_benchmark_summary_says_met_missed_or_not_decided_with_its_noise():
    """bench_deadlines' verdict per pattern: the Must (auto within 10% of the
    best fixed window's p99) is 'met' only when the paired ratio's interval
    lies below 1.10, 'missed' when above, else 'not decided'; EDF - FIFO is
    paired per repeat; the best fixed window is the lowest p99 over its
    repeats (geometric mean)."""
    rng = np.random.default_rng(3)
    cells = {k: _repeats(rng, 10.0, 0.9) for k in WINDOWS if k != "auto"}
    cells["2ms"] = _repeats(rng, 8.0, 0.9)
    batches = {k: 1.0 for k in list(WINDOWS) + ["fifo-auto"]}
    for auto_ms, expected in ((8.0, "met"), (12.0, "missed")):
        reps = dict(cells, auto=_repeats(rng, auto_ms, 0.95), **{"fifo-auto": _repeats(rng, 8.0, 0.9)})
        s = pattern_summary("steady", reps, batches)
        assert s["best"] == "2ms" and verdict(s) == expected, s
        assert len(s["paired"]) == 5 and s["ci"][0] <= s["ratio"] <= s["ci"][1]
        assert s["edf_wins"] == 5 and s["edf_gain"] == pytest.approx([0.05] * 5, abs=2e-3)
    few = {k: _repeats(rng, 10.0, 0.9, reps=3, n=40) for k in list(WINDOWS) + ["fifo-auto"]}
    assert verdict(pattern_summary("sine", few, batches)) == "not decided"
