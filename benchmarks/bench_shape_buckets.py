"""What a sequence length that changes every call costs bert_mini, with the
plan cache alone (a plan built per new length, LRU of --cache plans) and
with shape buckets (engine.session.ShapeBuckets: lengths padded to 16, 32,
64 or 128 with attention_mask 0, outputs cut back).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_shape_buckets.py [--rounds 2] [--cache 8]

The stream cycles through lengths 7..128 (122 lengths, more than the
cache holds), each call a different length, the two sessions interleaved
call by call so load on a shared host hits both alike. Times are CPU time
of the calling thread (threads=1: the kernels run on it), per call.
Prints: the first call at a new length (plan build + run, or the padded
run), the steady per-call cost over the stream, plan builds, and the
largest difference between the two sessions' outputs.

    ... bench_shape_buckets.py --serve [--rounds 2] [--cache 8]

The same stream through `ai-engine serve` (the binary protocol, one request
at a time): two servers of bert_mini, one with engine.yaml buckets (the
sizes above) and one without, requests alternating between them. Prints per
server: plan builds at load (warm-up) and while serving, server CPU time
per request (the process's utime+stime, /proc) and client latency per request
(median and mean, ms), and the largest difference between their outputs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import zoo  # noqa: E402

from engine.session import InferenceSession, ShapeBuckets  # noqa: E402

BUCKETS = ShapeBuckets(sizes=(16, 32, 64, 128), inputs={"input_ids": (1, 0), "attention_mask": (1, 0)},
                       outputs={"last_hidden_state": 1})
LENGTHS = range(7, 129)


def feeds(rng, seq: int) -> dict[str, np.ndarray]:
    return {"input_ids": rng.integers(1, 8192, (1, seq)).astype(np.int64),
            "attention_mask": np.ones((1, seq), np.int64)}


def timed(sess, f) -> tuple[float, list[np.ndarray]]:
    t = time.thread_time()
    out = sess.run(None, f)
    return (time.thread_time() - t) * 1e3, out


def serve_stream(args) -> None:
    """The stream through two servers, buckets and none (see the module doc)."""
    import json
    import os
    import shutil
    import tempfile
    import urllib.request

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_serve import free_port, start_engine, stop_processes, wait_http

    from engine.client import Client

    path = zoo.ensure("bert_mini", zoo.DEFAULT_OUT)
    spec = {"sizes": list(BUCKETS.sizes), "inputs": {n: {"axis": a, "pad": p} for n, (a, p) in BUCKETS.inputs.items()},
            "outputs": dict(BUCKETS.outputs)}
    work = Path(tempfile.mkdtemp(prefix="bench-buckets-"))
    servers, procs = {}, []
    try:
        for name in ("plain", "buckets"):
            d = work / name
            d.mkdir()
            http, binary = free_port(), free_port()
            model = {"name": "bert", "path": str(path), "max_batch_size": 8}
            if name == "buckets":
                model["buckets"] = spec
            config = {"listen": "127.0.0.1", "http_port": http, "binary_port": binary, "threads": 1,
                      "plan_cache_size": args.cache, "state_dir": str(d / "state"), "log_dir": str(d / "log"),
                      "models": [model]}
            log = open(d / "server.log", "wb")
            procs.append(start_engine(d, config, sorted(os.sched_getaffinity(0)), log))
            wait_http(f"http://127.0.0.1:{http}/v2/health/ready")
            servers[name] = (procs[-1], http, Client(port=binary))

        def plan_builds(name):
            with urllib.request.urlopen(f"http://127.0.0.1:{servers[name][1]}/v2/models/bert/stats") as r:
                return json.loads(r.read())["model_stats"][0]["plan_builds"]

        def cpu_s(name):
            fields = Path(f"/proc/{servers[name][0].pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        warm = {n: plan_builds(n) for n in servers}
        cpu0 = {n: cpu_s(n) for n in servers}
        wall = {n: [] for n in servers}
        rng, worst, calls = np.random.default_rng(0), 0.0, 0
        for _ in range(args.rounds):
            for seq in LENGTHS:
                f = feeds(rng, seq)
                outs = {}
                for name, (_, _, client) in servers.items():
                    t = time.perf_counter()
                    outs[name] = client.infer("bert", f)
                    wall[name].append((time.perf_counter() - t) * 1e3)
                worst = max(worst, *(float(np.max(np.abs(outs["plain"][k] - outs["buckets"][k])))
                                     for k in outs["plain"]))
                calls += 1
        print(f"bert_mini served (binary protocol, one request at a time), lengths 7..128 each request different, "
              f"{args.rounds} rounds ({calls} requests per server), threads 1, plan cache {args.cache}")
        for name in servers:
            builds = plan_builds(name)
            print(f"  {name:8s} plans built at load {warm[name]['warm']}, "
                  f"while serving {builds['built'] - warm[name]['built']}; "
                  f"server CPU {(cpu_s(name) - cpu0[name]) / calls * 1e3:.2f} ms/request; latency median "
                  f"{statistics.median(wall[name]):.2f} ms, mean {statistics.mean(wall[name]):.2f} ms")
        print(f"  largest |plain - buckets| over every output: {worst:.3g}")
    finally:
        for _, _, client in servers.values():
            client.close()
        stop_processes(procs)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2, help="passes over lengths 7..128")
    ap.add_argument("--cache", type=int, default=8, help="plan_cache_size (engine.plan_cache_size default: 8)")
    ap.add_argument("--serve", action="store_true", help="through two servers, buckets and none")
    args = ap.parse_args()
    if args.serve:
        return serve_stream(args)
    path = zoo.ensure("bert_mini", zoo.DEFAULT_OUT)
    plain = InferenceSession(path, threads=1, plan_cache_size=args.cache)
    bucketed = InferenceSession(path, threads=1, plan_cache_size=args.cache, buckets=BUCKETS)
    rng = np.random.default_rng(0)
    first = {"plain": [], "buckets": []}
    steady = {"plain": [], "buckets": []}
    cached_run = []
    worst = 0.0
    for r in range(args.rounds):
        for seq in LENGTHS:
            f = feeds(rng, seq)
            ms_p, out_p = timed(plain, f)
            ms_b, out_b = timed(bucketed, f)
            worst = max(worst, *(float(np.max(np.abs(a - b))) for a, b in zip(out_p, out_b)))
            if r == 0:
                first["plain"].append(ms_p)
                first["buckets"].append(ms_b)
            else:
                steady["plain"].append(ms_p)
                steady["buckets"].append(ms_b)
            if r == 0 and seq % 16 == 0:
                cached_run.append(timed(plain, f)[0])  # the same length again: its plan is cached
    print(f"bert_mini, lengths 7..128 each call different, {args.rounds} rounds, threads 1, "
          f"plan cache {args.cache}; CPU ms per call (mean)")
    print(f"  run alone on a cached plan (lengths 16..128): {statistics.mean(cached_run):.2f}")
    for name in ("plain", "buckets"):
        s = bucketed if name == "buckets" else plain
        line = f"  {name:8s} first call at a new length {statistics.mean(first[name]):.2f}"
        if steady[name]:
            line += f", steady {statistics.mean(steady[name]):.2f}"
        print(line + f"; plan builds {s.plan_stats['builds']}")
    print(f"  largest |plain - buckets| over every output: {worst:.3g}")


if __name__ == "__main__":
    main()
