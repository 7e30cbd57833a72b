"""Python cost per request of the five-phase latency timing (issue 15
item 3): what a request's stamps, its Server-Timing header, its five
histogram observations and its log fields cost, against what the server did
before the phases existed (two clock reads, two histogram observations).

    .venv/bin/python benchmarks/bench_timing_overhead.py [--calls 20000] [--blocks 5]

Each variant runs --blocks blocks of --calls calls, in rotation; the best
block's mean per call is printed (the least disturbed block of a shared host).
"""

from __future__ import annotations

import argparse
import time

from engine.server import timing
from engine.server.metrics import Histogram, Metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--blocks", type=int, default=5)
    args = parser.parse_args()
    metrics, clock = Metrics(), timing.clock
    queue, compute = Histogram(), Histogram()

    def phases():
        log = {"t_first": clock(), "t_read": clock()}
        log["t_admitted"], log["t_started"], log["t_done"] = clock(), clock(), clock()
        log["t_encoded"] = clock()
        header = timing.server_timing(log)
        log["t_written"] = clock()
        spans = timing.phases(log)
        metrics.observe_phases("m", "http", spans)
        return header, timing.log_fields(spans)

    def before():
        t0 = time.monotonic()
        queue.observe(1e-4)
        compute.observe(2e-4)
        return {"queue_us": 1, "compute_us": 2, "latency_us": int((time.monotonic() - t0) * 1e6)}

    best = {f.__name__: float("inf") for f in (phases, before)}
    for _ in range(args.blocks):
        for f in (phases, before):
            t0 = time.perf_counter()
            for _ in range(args.calls):
                f()
            best[f.__name__] = min(best[f.__name__], (time.perf_counter() - t0) / args.calls)
    for name, seconds in best.items():
        print(f"{name:8s} {seconds * 1e6:6.2f} us per request")
    print(f"added    {(best['phases'] - best['before']) * 1e6:6.2f} us per request")


if __name__ == "__main__":
    main()
