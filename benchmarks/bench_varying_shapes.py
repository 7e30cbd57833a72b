"""Plan-build time vs run time for a model whose input width changes every
call (an OCR-style text-line recogniser: conv stack over [1, 1, 32, W],
then a per-column classifier), through InferenceSession.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_varying_shapes.py [--calls 60] [--threads 2]

Reports, per call: the run time when the plan for that width is cached,
the time of a call that builds its plan (the first at a width), and the
share of a stream of calls with random widths that went to plan builds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from engine.session import InferenceSession

CLASSES = 96


def ocr_model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x, cin = "image", 1
    for i, (cout, pool) in enumerate([(32, True), (64, True), (96, False), (128, False)]):
        w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) * (2.0 / (9 * cin)) ** 0.5
        inits += [helper.make_tensor(f"w{i}", TensorProto.FLOAT, w.shape, w.ravel()),
                  helper.make_tensor(f"b{i}", TensorProto.FLOAT, [cout], np.zeros(cout, np.float32))]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        x = f"r{i}"
        if pool:
            nodes.append(helper.make_node("MaxPool", [x], [f"p{i}"], kernel_shape=[2, 2], strides=[2, 2]))
            x = f"p{i}"
        cin = cout
    # [1, C, 8, W/4] -> mean over height -> [1, C, W/4] -> [1, W/4, C] -> classes per column
    fc = rng.standard_normal((cin, CLASSES)).astype(np.float32) / cin ** 0.5
    inits.append(helper.make_tensor("fc", TensorProto.FLOAT, fc.shape, fc.ravel()))
    nodes += [helper.make_node("ReduceMean", [x], ["m"], axes=[2], keepdims=0),
              helper.make_node("Transpose", ["m"], ["t"], perm=[0, 2, 1]),
              helper.make_node("MatMul", ["t", "fc"], ["logits"])]
    graph = helper.make_graph(nodes, "ocr", [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                                           [1, 1, 32, "width"])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "cols", CLASSES])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", type=int, default=16, help="plan_cache_size")
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as tmp:
        sess = InferenceSession(ocr_model(Path(tmp) / "ocr.onnx"), threads=args.threads, plan_cache_size=args.cache)
        widths = [int(w) for w in rng.integers(40, 400, args.calls) // 4 * 4]
        build_ms, hit_ms = [], []
        t_all = time.perf_counter()
        for w in widths:
            x = rng.standard_normal((1, 1, 32, w)).astype(np.float32)
            before = sess.plan_stats["builds"]
            t = time.perf_counter()
            sess.run(None, {"image": x})
            ms = (time.perf_counter() - t) * 1e3
            (build_ms if sess.plan_stats["builds"] > before else hit_ms).append(ms)
        total = (time.perf_counter() - t_all) * 1e3
        # the same widths again with their plans cached: the run time alone
        run_ms = []
        for w in widths[-min(len(widths), args.cache):]:
            x = rng.standard_normal((1, 1, 32, w)).astype(np.float32)
            sess.run(None, {"image": x})
            t = time.perf_counter()
            sess.run(None, {"image": x})
            run_ms.append((time.perf_counter() - t) * 1e3)
        stats = sess.plan_stats
    print(f"OCR-style conv model, widths 40..400 (random, {args.calls} calls), {args.threads} threads, "
          f"plan cache {args.cache}")
    print(f"  calls that built a plan: {len(build_ms)} (median {statistics.median(build_ms):.2f} ms)")
    if hit_ms:
        print(f"  calls on a cached plan:  {len(hit_ms)} (median {statistics.median(hit_ms):.2f} ms)")
    print(f"  run alone (cached plan): median {statistics.median(run_ms):.2f} ms")
    print(f"  plan build per miss:     ~{statistics.median(build_ms) - statistics.median(run_ms):.2f} ms")
    print(f"  whole stream: {total:.0f} ms; plan stats {stats}")


if __name__ == "__main__":
    main()
