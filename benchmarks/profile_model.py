"""Where a zoo model's time goes: ai-engine per step vs onnxruntime per node type.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/profile_model.py cnn_bn
        [--batch 1] [--threads 1] [--top 15] [--repeats 5] [--precision fp32|bf16] [--a-conversion]

ai-engine: InferenceSession.profile (each plan step run alone, best of
--repeats; a step's time includes one ctypes call, ~1-3 us). Steps are
grouped by kind (op name, and for conv: kernel RxS, stride, C->K, input
HxW). onnxruntime: its own profiler (SessionOptions.enable_profiling), the
median per node over --repeats runs, summed per op type. Prints both tables
and each side's total, so the gap can be read per op family.

--a-conversion (bf16): what fp32 activations cost the bf16 steps, i.e. what
bf16 activations between ops could save there, as thread CPU time (best of
--repeats x 20: robust to a loaded machine). GEMM steps: the step's shape
timed with an fp32 A and with the same A as bf16 (the GEMM reads both), the
difference measured. Conv steps (the conv reads only fp32): a bound, the
same kernel on the step's input with 32 output columns (a 1x1 conv: every
value read as fp32, converted and packed once, next to no products) minus
a call on a tiny input; the packing copy stays with bf16 activations, and
strided 1x1 convs convert only the pixels they read. Convs over fewer than
32 channels are left out: that is the model's input image (the stem), fp32
at the boundary whatever runs between ops.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def step_label(row: dict) -> str:
    ints = row["ints"]
    if row["op_name"] in ("conv", "conv_transpose", "conv_bf16", "conv_bf16_io", "conv_dw_pw") and len(ints) >= 16:
        N, H, W, C, K, R, S, sh, sw = ints[:9]
        g = ints[15]
        kind = "dw" if g == C == K and g > 1 else (f"g{g}" if g > 1 else "")
        if row["op_name"] == "conv_dw_pw" and len(ints) >= 23:  # the depthwise params (18 words), then the 1x1's
            return f"conv_dw_pw {R}x{S}/{sh} dw{C}->{ints[22]} @{H}x{W}"
        return f"{row['op_name']} {R}x{S}/{sh} {kind}{C}->{K} @{H}x{W}"
    if row["op_name"] in ("matmul", "gemm_packed", "gemm_bf16_packed") and len(ints) >= 3:
        return f"{row['op_name']} {ints[0]}x{ints[1]}x{ints[2]}"
    return row["op_name"]


def engine_profile(sess, feeds, repeats: int):
    rows = sess.profile(feeds, repeats=repeats)
    groups = defaultdict(lambda: [0, 0])
    for r in rows:
        g = groups[step_label(r)]
        g[0] += r["ns"]
        g[1] += 1
    return rows, groups


def a_conversion(rows: list[dict], repeats: int) -> dict:
    """What fp32 activations cost the bf16 steps, in seconds of one thread
    (see the module doc): conv steps' bound, GEMM steps' fp32-A and bf16-A
    times, and the step counts."""
    import time

    from engine.kernels.conv_lowp import conv2d_bf16, pack_conv_weights_bf16
    from engine.kernels.gemm_lowp import matmul_bf16, pack_b_bf16

    rng = np.random.default_rng(0)

    def best(f) -> float:
        times = []
        for _ in range(20 * repeats):
            t0 = time.thread_time()
            f()
            times.append(time.thread_time() - t0)
        return min(times)

    def conv_cost(n, h, w, c) -> float:
        x = rng.standard_normal((n, h, w, c)).astype(np.float32)
        wts = pack_conv_weights_bf16(rng.standard_normal((32, c, 1, 1)).astype(np.float32))
        out = np.empty((n, h, w, 32), np.float32)
        return best(lambda: conv2d_bf16(x, wts, threads=1, out=out))

    def gemm_costs(m, n, k) -> tuple[float, float]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        a16 = (a.view(np.uint32) >> 16).astype(np.uint16)  # the same A as bf16 bit patterns
        b = pack_b_bf16(rng.standard_normal((k, n)).astype(np.float32))
        out = np.empty((m, n), np.float32)
        return tuple(best(lambda x=x: matmul_bf16(x, b, out=out, threads=1)) for x in (a, a16))

    got = {"conv_bound": 0.0, "conv_steps": 0, "gemm_fp32_a": 0.0, "gemm_bf16_a": 0.0, "gemm_steps": 0}
    fixed = conv_cost(1, 1, 1, 32)
    for r in rows:
        ints = r["ints"]
        if r["op_name"] == "conv_bf16" and len(ints) >= 4 and ints[3] >= 32:
            got["conv_bound"] += max(0.0, conv_cost(*ints[:4]) - fixed)
            got["conv_steps"] += 1
        elif r["op_name"] == "gemm_bf16_packed" and len(ints) >= 3:
            f32, b16 = gemm_costs(*ints[:3])
            got["gemm_fp32_a"] += f32
            got["gemm_bf16_a"] += b16
            got["gemm_steps"] += 1
    return got


def ort_profile(src: Path, feeds, threads: int, repeats: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.enable_profiling = True
    so.profile_file_prefix = str(Path(tempfile.mkdtemp(prefix="aie-ortprof-")) / "ort")
    sess = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    for _ in range(repeats + 1):
        sess.run(None, feeds)
    path = sess.end_profiling()
    events = json.load(open(path))
    os.unlink(path)
    per_node = defaultdict(list)
    op_of = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            node = e["name"][: -len("_kernel_time")]
            per_node[node].append(e["dur"] * 1000)  # us -> ns
            op_of[node] = ort_label(e.get("args", {}))
    groups = defaultdict(lambda: [0, 0])
    for node, durs in per_node.items():
        durs = durs[1:] or durs  # the first run builds caches
        g = groups[op_of[node]]
        g[0] += float(np.median(durs))
        g[1] += 1
    return groups


def ort_label(args: dict) -> str:
    """The engine's step label for an onnxruntime Conv node (from the shapes in
    its profile event), so the two tables line up per layer kind."""
    op = args.get("op_name", "?")
    try:
        shapes = [next(iter(d.values())) for d in args["input_type_shape"]]
        out = next(iter(args["output_type_shape"][0].values()))
    except (KeyError, IndexError, StopIteration, AttributeError):
        return op
    if op in ("Conv", "FusedConv") and len(shapes) >= 2 and len(shapes[0]) == 4 and len(out) == 4:
        _, c, h, w = shapes[0]
        k, cg, r, s = shapes[1]
        sh = max(1, round(h / out[2])) if out[2] else 1
        kind = "dw" if cg == 1 and k == c and c > 1 else ("" if cg == c else f"g{c // cg}")
        return f"conv {r}x{s}/{sh} {kind}{c}->{k} @{h}x{w}"
    return op


def print_groups(title: str, groups, top: int) -> float:
    total = sum(v[0] for v in groups.values())
    print(f"\n{title}: total {total / 1e6:.3f} ms")
    print(f"{'ms':>9} {'share':>6} {'n':>4}  kind")
    for label, (ns, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{ns / 1e6:>9.3f} {100 * ns / max(total, 1):>5.1f}% {n:>4}  {label}")
    return total


def main(argv=None) -> int:
    from engine.session import InferenceSession
    from models import zoo

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", choices=zoo.NAMES)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--algo", choices=("auto", "gemm", "direct"), default="auto",
                   help="convolution path where the params allow it (aie_conv2d_set_algo)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="profile the model converted in this precision (ai-engine convert --precision)")
    p.add_argument("--a-conversion", action="store_true",
                   help="bf16: also measure what fp32 activations cost the bf16 steps (module doc)")
    args = p.parse_args(argv)
    if args.algo != "auto":
        import ctypes

        from engine.kernels._lib import lib

        lib().aie_conv2d_set_algo.argtypes = [ctypes.c_int]
        lib().aie_conv2d_set_algo({"gemm": 1, "direct": 2}[args.algo])
    src = zoo.ensure(args.model, Path(tempfile.gettempdir()) / "aie-profile-zoo")
    feeds = zoo.random_inputs(args.model, batch=args.batch, seed=0)
    model = src
    if args.precision != "fp32":
        from engine.convert import PrecisionOptions, convert_file

        model = Path(tempfile.mkdtemp(prefix="aie-profile-")) / f"{args.model}.aie"
        convert_file(src, model, precision=PrecisionOptions(args.precision))
    sess = InferenceSession(model, threads=args.threads)
    sess.run(None, feeds)
    print(f"{args.model} {args.precision} batch {args.batch}, {args.threads} thread(s), load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    rows, groups = engine_profile(sess, feeds, args.repeats)
    total = print_groups("ai-engine (per step kind, best of repeats)", groups, args.top)
    if args.a_conversion:
        c = a_conversion(rows, args.repeats)
        print(f"\nfp32 activations, one thread's CPU: {c['conv_steps']} bf16 conv steps' fp32 A read + conversion + "
              f"packing at most {c['conv_bound'] * 1e3:.3f} ms; {c['gemm_steps']} bf16 GEMM steps "
              f"{c['gemm_fp32_a'] * 1e3:.3f} ms with fp32 A, {c['gemm_bf16_a'] * 1e3:.3f} ms with bf16 A "
              f"(profile total over {args.threads} threads {total / 1e6:.3f} ms)")
    print_groups("onnxruntime (per op type, median per node)", ort_profile(src, feeds, args.threads, args.repeats),
                 args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
