"""Per-call cost of InferenceSession.run on small models, against
onnxruntime in the same run (issue 13 item 6).

    .venv/bin/python benchmarks/bench_call_overhead.py [--models tiny,mlp,cnn_bn,digits]
        [--threads 2] [--calls 2000] [--blocks 5]

`tiny` is one Add on [1, 4]: its compute is ~0, so its time is the per-call
overhead. For it the table also gives the bare foreign call (aie_exec_run
with arguments prepared once): run() minus that is the Python side
(validation, plan lookup, pointer marshalling, output allocation). Every
model is timed through run(None, feeds) (new output arrays per call),
run(..., out=...) (caller's arrays) and an IOBinding, and onnxruntime
through run() and its IOBinding. Each runner is timed in --blocks blocks of
--calls calls, runners in rotation; the table gives the best block's mean
per call in microseconds (the least disturbed block of a shared host) and
the ratio to onnxruntime's run() (<= 1.0: ai-engine is faster).
onnxruntime runs with all graph optimisations and without spinning.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def tiny_model(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper
    c = helper.make_tensor("c", TensorProto.FLOAT, [1, 4], [1.0, 2.0, 3.0, 4.0])
    g = helper.make_graph([helper.make_node("Add", ["x", "c"], ["y"])], "tiny",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [c])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def timed(runners: dict, calls: int, blocks: int) -> dict[str, float]:
    """Best block's mean microseconds per call, runners in rotation."""
    for fn in runners.values():
        for _ in range(50):
            fn()
    best = {name: float("inf") for name in runners}
    for _ in range(blocks):
        for name, fn in runners.items():
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t) / calls * 1e6)
    return best


def runners_for(src: Path, feeds: dict[str, np.ndarray], threads: int) -> dict:
    import onnxruntime as ort

    from engine.convert import convert_file
    from engine.session import InferenceSession

    aie = src.with_suffix(".aie")
    convert_file(src, aie)
    sess = InferenceSession(aie, threads=threads)
    outs = [np.empty_like(o) for o in sess.run(None, feeds)]
    binding = sess.io_binding()
    for name, arr in feeds.items():
        binding.bind_cpu_input(name, arr)
    for o, arr in zip(sess.get_outputs(), outs):
        binding.bind_output(o.name, arr)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    ref = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    ort_binding = ref.io_binding()
    for name, arr in feeds.items():
        ort_binding.bind_cpu_input(name, arr)
    for o in ref.get_outputs():
        ort_binding.bind_output(o.name, "cpu")
    got, want = sess.run(None, feeds), ref.run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)
    runners = {
        "ort run": lambda: ref.run(None, feeds),
        "ort iobinding": lambda: ref.run_with_iobinding(ort_binding),
        "aie run": lambda: sess.run(None, feeds),
        "aie run out=": lambda: sess.run(None, feeds, out=outs),
        "aie iobinding": lambda: sess.run_with_iobinding(binding),
    }
    return runners, sess


def bare_call(sess, feeds) -> callable:
    """aie_exec_run alone, its arguments prepared once (what no Python can beat)."""
    arrays = sess._check_feeds(feeds)
    plan = sess._plan(arrays)
    bound = plan.bind(sess._weights_ptr, arrays)
    args, call, threads = bound.args, plan._call, sess.threads
    return lambda: call(*args, threads)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="tiny,mlp,cnn_bn,digits")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--blocks", type=int, default=5)
    args = ap.parse_args(argv)
    from models import zoo

    print(f"threads {args.threads}, best of {args.blocks} blocks of {args.calls} calls; "
          f"load average {os.getloadavg()[0]:.2f} (figures under load rank, they do not measure)")
    print(f"{'model':8} {'runner':15} {'us/call':>9} {'vs ort run':>10}")
    with tempfile.TemporaryDirectory(prefix="aie-call-") as tmp:
        tmp = Path(tmp)
        for name in args.models.split(","):
            if name == "tiny":
                src, feeds = tiny_model(tmp / "tiny.onnx"), {"x": np.ones((1, 4), np.float32)}
            else:
                src, feeds = zoo.ensure(name, tmp), zoo.random_inputs(name, batch=1)
            runners, sess = runners_for(src, feeds, args.threads)
            if name == "tiny":
                runners["aie bare C call"] = bare_call(sess, feeds)
            res = timed(runners, args.calls, args.blocks)
            for runner, us in res.items():
                print(f"{name:8} {runner:15} {us:9.2f} {us / res['ort run']:10.2f}")
            if name == "tiny":
                print(f"{name:8} {'python side':15} {res['aie run'] - res['aie bare C call']:9.2f}   "
                      "(aie run - bare C call)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
