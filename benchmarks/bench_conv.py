"""Convolution speed: engine.kernels.conv2d_packed vs onnxruntime running the same
single-Conv ONNX model (ORT_ENABLE_ALL, the same intra-op thread count).

Shapes: ResNet-18's convolutions (stem 7x7 s2, 3x3 s1 at 64/128/256/512
channels, the stage-entry 3x3 s2, the 1x1 s2 downsamples) and MobileNetV2's
depthwise 3x3 and a few pointwise 1x1 layers, the zoo detector's ("yolo")
strided, small-channel and 1x1 convolutions, batch 1, 1 and 2 threads. Each
side runs in its native layout (engine NHWC with weights packed once, ORT
NCHW); the two alternate in timed blocks of iterations, and the table gives
the median per-call time of each and the median of the per-block ratios.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_conv.py
    ... --quick            (fewer repeats, for a smoke run)
    ... --filter dw        (only shapes whose name contains "dw")
    ... --weight-sets 8    (rotate 8 copies of the weights, both sides: the
                            weights come from memory as inside a model,
                            not from cache as in a loop over one layer)
    ... --algo winograd    (Winograd packing for every 3x3 stride-1 layer)
    ... --silu             (SiLU after each conv: fused on our side, Sigmoid + Mul on
                            onnxruntime's)
    ... --bf16             (add our bf16 conv, conv2d_bf16, on every group-1 layer: its time
                            and the speed-up over our fp32 conv, timed as a pair)

The "path" column is the engine's algorithm for the layer: the library's
own choice (auto), including Winograd where aie_conv2d_winograd_wins says so.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import time

import numpy as np

# name, (H, W, C), K, (R, S), stride, pad, group
SHAPES = [
    ("resnet stem 7x7 s2", (224, 224, 3), 64, (7, 7), 2, 3, 1),
    ("resnet 3x3 64@56", (56, 56, 64), 64, (3, 3), 1, 1, 1),
    ("resnet 3x3 s2 64->128@56", (56, 56, 64), 128, (3, 3), 2, 1, 1),
    ("resnet 3x3 128@28", (28, 28, 128), 128, (3, 3), 1, 1, 1),
    ("resnet 3x3 256@14", (14, 14, 256), 256, (3, 3), 1, 1, 1),
    ("resnet 3x3 512@7", (7, 7, 512), 512, (3, 3), 1, 1, 1),
    ("resnet 1x1 s2 64->128@56", (56, 56, 64), 128, (1, 1), 2, 0, 1),
    ("resnet 1x1 s2 256->512@14", (14, 14, 256), 512, (1, 1), 2, 0, 1),
    ("mbv2 dw 32@112", (112, 112, 32), 32, (3, 3), 1, 1, 32),
    ("mbv2 dw s2 96@112", (112, 112, 96), 96, (3, 3), 2, 1, 96),
    ("mbv2 dw 144@56", (56, 56, 144), 144, (3, 3), 1, 1, 144),
    ("mbv2 dw 192@28", (28, 28, 192), 192, (3, 3), 1, 1, 192),
    ("mbv2 dw 384@14", (14, 14, 384), 384, (3, 3), 1, 1, 384),
    ("mbv2 dw s2 576@14", (14, 14, 576), 576, (3, 3), 2, 1, 576),
    ("mbv2 dw 960@7", (7, 7, 960), 960, (3, 3), 1, 1, 960),
    ("mbv2 pw 1x1 16->96@112", (112, 112, 16), 96, (1, 1), 1, 0, 1),
    ("mbv2 pw 1x1 144->24@56", (56, 56, 144), 24, (1, 1), 1, 0, 1),
    ("mbv2 pw 1x1 960->160@7", (7, 7, 960), 160, (1, 1), 1, 0, 1),
    # the zoo's YOLO-style detector at 320x320 (input sizes): strided 3x3s,
    # 16/32-channel 3x3s and small 1x1s, where AVX2 lost most to onnxruntime
    ("yolo stem 3x3 s2 3->16@320", (320, 320, 3), 16, (3, 3), 2, 1, 1),
    ("yolo 3x3 s2 16->32@160", (160, 160, 16), 32, (3, 3), 2, 1, 1),
    ("yolo 3x3 s2 32->64@80", (80, 80, 32), 64, (3, 3), 2, 1, 1),
    ("yolo 3x3 s2 64->128@40", (40, 40, 64), 128, (3, 3), 2, 1, 1),
    ("yolo 3x3 16@80", (80, 80, 16), 16, (3, 3), 1, 1, 1),
    ("yolo 3x3 32@40", (40, 40, 32), 32, (3, 3), 1, 1, 1),
    ("yolo 3x3 96->64@40", (40, 40, 96), 64, (3, 3), 1, 1, 1),
    ("yolo 1x1 48->32@80", (80, 80, 48), 32, (1, 1), 1, 0, 1),
    ("yolo 1x1 96->64@40", (40, 40, 96), 64, (1, 1), 1, 0, 1),
]


def _ort_session(x_shape_nchw, w, b, stride, pad, group, threads, silu=False):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if silu else "y"], strides=[stride, stride],
                              pads=[pad] * 4, group=group, kernel_shape=list(w.shape[2:]))]
    if silu:  # as exported by YOLO-style networks (onnxruntime fuses the pair into QuickGelu)
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape_nchw))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    # Idle onnxruntime workers spin for ~1 s after a run and would hold the
    # CPU our second thread needs in the next (alternated) call.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _paired_seconds(fn_a, fn_b, repeats: int, budget_s: float) -> tuple[float, float, float]:
    """Median per-call times of fn_a and fn_b and the median of their per-repeat
    ratio. The two alternate block by block, so load from other processes on a
    shared machine hits both sides alike instead of skewing the ratio."""
    iters = []
    for fn in (fn_a, fn_b):
        fn()
        t0 = time.perf_counter()
        fn()
        one = max(time.perf_counter() - t0, 1e-6)
        iters.append(max(1, int(budget_s / 2 / repeats / one)))
    a, b = [], []
    for _ in range(repeats):
        for fn, n, out in ((fn_a, iters[0], a), (fn_b, iters[1], b)):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            out.append((time.perf_counter() - t0) / n)
    return statistics.median(a), statistics.median(b), statistics.median(x / y for x, y in zip(a, b))


_ALGO_NAMES = {0: "auto", 1: "gemm", 2: "direct", 3: "depthwise"}


def _path(kernels, x_shape, w_shape, stride, pad, group, winograd: bool) -> str:
    import ctypes

    from engine.kernels._lib import lib
    from engine.kernels.conv import ConvParams

    if winograd:
        return "winograd"
    n, h, w, c = x_shape
    k, cg, r, s = w_shape
    p = ConvParams(n, h, w, c, k, r, s, stride, stride, 1, 1, pad, pad, pad, pad, group, 0, 0)
    fn = lib().aie_conv2d_algo
    fn.argtypes, fn.restype = [ctypes.POINTER(ConvParams)], ctypes.c_int
    return _ALGO_NAMES.get(fn(ctypes.byref(p)), "?")


def run(threads_list=(1, 2), repeats=11, budget_s=2.0, name_filter="", weight_sets=1, algo="auto", bf16=False,
        silu=False):
    from engine import kernels
    from engine.kernels.conv_lowp import conv2d_bf16, pack_conv_weights_bf16

    rng = np.random.default_rng(0)
    rows = []
    for name, (h, w_, c), k, (r, s), stride, pad, group in SHAPES:
        if name_filter and name_filter not in name:
            continue
        x = rng.standard_normal((1, h, w_, c), dtype=np.float32)
        wts = [(rng.standard_normal((k, c // group, r, s), dtype=np.float32) * 0.1).astype(np.float32)
               for _ in range(max(1, weight_sets))]
        wt = wts[0]
        b = rng.standard_normal(k, dtype=np.float32)
        possible = (r, s) == (3, 3) and stride == 1 and group == 1
        if algo == "winograd":
            wino = possible
        elif algo == "auto":
            wino = kernels.winograd_wins(x.shape, wt.shape, strides=(stride, stride), pads=(pad,) * 4, group=group)
        else:
            wino = False
        packs = [kernels.pack_conv_weights(w, group=group, winograd=wino) for w in wts]
        path = _path(kernels, x.shape, wt.shape, stride, pad, group, wino)
        x_nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
        p = (h + 2 * pad - r) // stride + 1
        q = (w_ + 2 * pad - s) // stride + 1
        flops = 2.0 * p * q * k * (c // group) * r * s
        out = np.empty((1, p, q, k), np.float32)
        for nt in threads_list:
            sessions = [_ort_session(x_nchw.shape, w, b, stride, pad, group, nt, silu) for w in wts]
            feed = {"x": x_nchw}
            want = sessions[0].run(None, feed)[0].transpose(0, 2, 3, 1)
            kw = dict(strides=(stride, stride), pads=(pad,) * 4, threads=nt, out=out,
                      activation="silu" if silu else None)
            got = kernels.conv2d_packed(x, packs[0], b, **kw)
            err = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) + 1e-30))
            turn = {"ours": 0, "ort": 0}

            def ours():
                turn["ours"] = (turn["ours"] + 1) % len(packs)
                kernels.conv2d_packed(x, packs[turn["ours"]], b, **kw)

            def theirs():
                turn["ort"] = (turn["ort"] + 1) % len(sessions)
                sessions[turn["ort"]].run(None, feed)

            t_ours, t_ort, ratio = _paired_seconds(ours, theirs, repeats, budget_s)
            rows.append(dict(name=name, threads=nt, path=path, ours_ms=t_ours * 1e3, ort_ms=t_ort * 1e3,
                             ratio=ratio, gflops=flops / t_ours / 1e9, ort_gflops=flops / t_ort / 1e9, err=err))
            print(f"  {name:28s} t={nt}  {path:9s} ours {t_ours * 1e3:8.3f} ms  ort {t_ort * 1e3:8.3f} ms  "
                  f"ratio {ratio:5.2f}  max rel err {err:.1e}", flush=True)
            if bf16 and group == 1:
                packs16 = [pack_conv_weights_bf16(w) for w in wts]
                out16 = np.empty_like(out)
                err16 = float(np.max(np.abs(conv2d_bf16(x, packs16[0], b, **dict(kw, out=out16)) - want))
                              / (np.max(np.abs(want)) + 1e-30))
                turn["bf16"] = 0

                def ours_bf16():
                    turn["bf16"] = (turn["bf16"] + 1) % len(packs16)
                    conv2d_bf16(x, packs16[turn["bf16"]], b, **dict(kw, out=out16))

                t16, t32, r16 = _paired_seconds(ours_bf16, ours, repeats, budget_s)
                rows[-1].update(bf16_ms=t16 * 1e3, bf16_speedup=1 / r16, bf16_err=err16)
                print(f"  {'':28s}      bf16      ours {t16 * 1e3:8.3f} ms  fp32 {t32 * 1e3:8.3f} ms  "
                      f"speed-up {1 / r16:5.2f}  max rel err {err16:.1e}", flush=True)
    return rows


def markdown(rows) -> str:
    lines = ["| layer | threads | path | engine ms | onnxruntime ms | ratio (engine/ORT) | engine GFLOP/s | "
             "ORT GFLOP/s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['threads']} | {r['path']} | {r['ours_ms']:.3f} | {r['ort_ms']:.3f} | "
                     f"{r['ratio']:.2f} | {r['gflops']:.1f} | {r['ort_gflops']:.1f} |")
    for nt in sorted({r["threads"] for r in rows}):
        ratios = [r["ratio"] for r in rows if r["threads"] == nt]
        geo = float(np.exp(np.mean(np.log(ratios))))
        lines.append(f"\nGeometric mean ratio at {nt} thread(s): {geo:.2f} over {len(ratios)} layers.")
    bf16 = [r for r in rows if "bf16_ms" in r]
    if bf16:
        lines += ["", "| layer | threads | engine fp32 ms | engine bf16 ms | bf16 speed-up | bf16 GFLOP/s | "
                  "bf16 max rel err |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['name']} | {r['threads']} | {r['ours_ms']:.3f} | {r['bf16_ms']:.3f} | "
                  f"{r['bf16_speedup']:.2f} | {r['gflops'] * r['ours_ms'] / r['bf16_ms']:.1f} | {r['bf16_err']:.1e} |"
                  for r in bf16]
    return "\n".join(lines)


def header() -> str:
    from engine import kernels

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=False).stdout.strip() or "unknown"
    except OSError:
        commit = "unknown"
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import onnxruntime

    return (f"Date {datetime.date.today()}, commit {commit}, {cpu} ({os.cpu_count()} CPUs), "
            f"{platform.python_version()}, ISA {kernels.isa()}, onnxruntime {onnxruntime.__version__}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--quick", action="store_true", help="5 repeats, ~0.6 s per case")
    ap.add_argument("--filter", default="", help="only layers whose name contains this text")
    ap.add_argument("--algo", choices=("auto", "gemm", "direct", "winograd"), default="auto",
                    help="force the general convolutions onto one path where the params allow it "
                         "(aie_conv2d_set_algo, or Winograd packing for 3x3 stride-1 layers; default auto: "
                         "the library's own choice)")
    ap.add_argument("--weight-sets", type=int, default=1,
                    help="copies of the weights rotated call by call on both sides (default 1; 8: weights "
                         "come from memory, as inside a model)")
    ap.add_argument("--silu", action="store_true",
                    help="SiLU after every conv: ours fused into the conv's epilogue, onnxruntime's "
                         "Conv -> Sigmoid -> Mul (what a YOLO-style model runs)")
    ap.add_argument("--bf16", action="store_true",
                    help="add our bf16 conv (conv2d_bf16) on every group-1 layer, timed against our fp32 conv")
    args = ap.parse_args()
    threads = tuple(int(t) for t in args.threads.split(","))
    repeats, budget = (5, 0.6) if args.quick else (11, 2.0)
    if args.algo in ("gemm", "direct"):
        import ctypes

        from engine.kernels._lib import lib

        lib().aie_conv2d_set_algo.argtypes = [ctypes.c_int]
        lib().aie_conv2d_set_algo({"gemm": 1, "direct": 2}[args.algo])
    rows = run(threads, repeats, budget, args.filter, args.weight_sets, args.algo, args.bf16, args.silu)
    print()
    print(header() + (f", {args.weight_sets} weight sets in rotation" if args.weight_sets > 1 else "")
          + (f", algo {args.algo}" if args.algo != "auto" else "") + (", SiLU after each conv" if args.silu else ""))
    print()
    print(markdown(rows))


if __name__ == "__main__":
    main()
