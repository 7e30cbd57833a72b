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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2, help="passes over lengths 7..128")
    ap.add_argument("--cache", type=int, default=8, help="plan_cache_size (engine.plan_cache_size default: 8)")
    args = ap.parse_args()
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
