"""Zoo model latency: ai-engine vs onnxruntime in the same run.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_models.py
        [--models resnet18,mlp] [--batches 1,64] [--threads 1,2] [--runs 30] [--steady-state]

Prints p50/p99 per (model, batch, threads) for both engines and the ratio
(median over runs of engine time / onnxruntime time, the two run
alternately so a shared host's load hits both alike; <= 1.0 means faster),
ResNet-18 conversion time and .aie load time. --steady-state adds minor page faults over 1,000
runs and RSS before/after 10,000 runs of the MLP.

onnxruntime runs with session.intra_op.allow_spinning = 0 unless --ort-spinning:
by default its idle intra-op workers keep spinning on a CPU for a long time
after each run (~1 s), so in a process that alternates the two engines the
engine's second thread would find its CPU taken by onnxruntime's spinning
worker (measured: ResNet-18 batch 1 on 2 threads, engine 15.2 ms alone, 24-27
ms beside a spinning onnxruntime). The engine's own pool sleeps after 50 us.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def paired(fn_a, fn_b, runs: int) -> tuple[float, float, float, float, float]:
    """Alternate the two engines run by run (the host is shared: load then
    hits both alike). Returns p50/p99 of each in ms and the median of the
    per-pair ratios a/b, which is what the table reports."""
    fn_a(), fn_b()  # warm-up: plans, arenas, caches
    ta, tb = [], []
    for _ in range(runs):
        t = time.perf_counter()
        fn_a()
        ta.append(time.perf_counter() - t)
        t = time.perf_counter()
        fn_b()
        tb.append(time.perf_counter() - t)
    ratio = float(np.median(np.array(ta) / np.array(tb)))
    return (float(np.percentile(ta, 50) * 1e3), float(np.percentile(ta, 99) * 1e3),
            float(np.percentile(tb, 50) * 1e3), float(np.percentile(tb, 99) * 1e3), ratio)


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))


def main(argv=None) -> int:
    import onnxruntime as ort

    from engine.convert import convert_file
    from engine.session import InferenceSession
    from models import zoo

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(n for n in zoo.NAMES))
    p.add_argument("--batches", default="1,64")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--steady-state", action="store_true")
    p.add_argument("--ort-spinning", action="store_true",
                   help="leave onnxruntime's intra-op spinning on (it then holds a CPU between its runs)")
    p.add_argument("--conv-algo", choices=("auto", "gemm", "direct"), default="auto",
                   help="force convolutions onto one path where the params allow it (aie_conv2d_set_algo), "
                        "to compare the paths end to end; default: the library's own choice")
    args = p.parse_args(argv)
    if args.conv_algo != "auto":
        import ctypes

        from engine.kernels._lib import lib

        lib().aie_conv2d_set_algo.argtypes = [ctypes.c_int]
        lib().aie_conv2d_set_algo({"gemm": 1, "direct": 2}[args.conv_algo])
    tmp = Path(tempfile.mkdtemp(prefix="aie-bench-"))
    rows = []
    print(f"load average {' '.join(f'{x:.1f}' for x in __import__('os').getloadavg())}, conv algo {args.conv_algo}, "
          f"onnxruntime spinning {'on' if args.ort_spinning else 'off'}")
    print(f"{'model':<12} {'batch':>5} {'thr':>3} {'aie p50':>9} {'aie p99':>9} {'ort p50':>9} {'ort p99':>9} {'ratio':>6}")
    for name in args.models.split(","):
        src = zoo.ensure(name, tmp)
        t = time.perf_counter()
        convert_file(src, tmp / f"{name}.aie")
        conv_s = time.perf_counter() - t
        t = time.perf_counter()
        InferenceSession(tmp / f"{name}.aie", threads=1)
        load_ms = (time.perf_counter() - t) * 1e3
        for threads in (int(x) for x in args.threads.split(",")):
            sess = InferenceSession(tmp / f"{name}.aie", threads=threads)
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            if not args.ort_spinning:
                so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            osess = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
            for batch in (int(x) for x in args.batches.split(",")):
                feeds = zoo.random_inputs(name, batch=batch, seed=0)
                runs = max(3, args.runs // (4 if batch > 8 else 1))
                a50, a99, o50, o99, ratio = paired(lambda: sess.run(None, feeds), lambda: osess.run(None, feeds),
                                                   runs)
                rows.append((name, batch, threads, a50, a99, o50, o99, ratio))
                print(f"{name:<12} {batch:>5} {threads:>3} {a50:>9.3f} {a99:>9.3f} {o50:>9.3f} {o99:>9.3f} {ratio:>6.2f}",
                      flush=True)
        print(f"{name:<12} conversion {conv_s:.2f} s, .aie load {load_ms:.1f} ms", flush=True)
    if args.steady_state:
        sess = InferenceSession(zoo.ensure("mlp", tmp), threads=1)
        feeds = zoo.random_inputs("mlp", batch=8)
        for _ in range(100):
            sess.run(None, feeds)
        f0, r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, rss_kib()
        for _ in range(1000):
            sess.run(None, feeds)
        f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(9000):
            sess.run(None, feeds)
        print(f"steady state (mlp, batch 8): {f1 - f0} minor faults over 1,000 runs; "
              f"RSS {r0} KiB -> {rss_kib()} KiB over 10,000 runs")
    worst = max(rows, key=lambda r: r[-1]) if rows else None
    if worst:
        print(f"worst ratio: {worst[-1]:.2f} ({worst[0]} batch {worst[1]} threads {worst[2]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
