"""An LSTM (input 64, hidden 128, batch 1 by default) at several sequence
lengths: our plan's arena and time per call against onnxruntime, same
process, same thread count.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_recurrent.py [--seq 16 1000] [--threads 2] [--op LSTM]

Prints per sequence length: arena bytes of the plan, the best block median
of ours and of onnxruntime (ms per call) and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from engine.session import InferenceSession
from models.recurrent import lstm_model


def _best_median(fn, blocks: int, calls: int) -> float:
    fn()
    best = float("inf")
    for _ in range(blocks):
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        best = min(best, statistics.median(times))
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, nargs="+", default=[16, 1000])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--op", choices=["LSTM", "GRU", "RNN"], default="LSTM")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    print(f"{args.op} input 64 hidden 128 batch {args.batch}, {args.threads} threads")
    print(f"{'seq':>6} {'arena bytes':>12} {'ours ms':>9} {'ort ms':>9} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rnn.onnx"
        onnx.save(lstm_model(op=args.op, batch_first=False), str(path))
        ours = InferenceSession(path, threads=args.threads)
        peer = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        for seq in args.seq:
            feeds = {"x": rng.standard_normal((seq, args.batch, 64)).astype(np.float32)}
            got, want = ours.run(None, feeds), peer.run(None, feeds)
            assert all(np.allclose(g, w, rtol=1e-3, atol=1e-4) for g, w in zip(got, want)), "answers differ"
            arena = ours.plans()[-1].arena_bytes
            t_ours = _best_median(lambda: ours.run(None, feeds), args.blocks, args.calls)
            t_ort = _best_median(lambda: peer.run(None, feeds), args.blocks, args.calls)
            print(f"{seq:>6} {arena:>12} {t_ours:>9.3f} {t_ort:>9.3f} {t_ours / t_ort:>6.2f}")


if __name__ == "__main__":
    main()
