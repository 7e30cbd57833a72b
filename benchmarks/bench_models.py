"""Zoo model latency: ai-engine against the runtimes a user would install
instead, in the same run.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_models.py
        [--models resnet18,mlp] [--batches 1,64] [--threads 1,2] [--runs 20] [--blocks 3]
        [--peers ort,ov-fp32,ov,aie-fp32] [--pause 1.0] [--steady-state] [--precision fp32|bf16] [--int8 resnet18]

Peers: `ort` onnxruntime fp32 (CPU provider, all graph optimisations),
`ov-fp32` OpenVINO with INFERENCE_PRECISION_HINT f32, `ov` OpenVINO in its
default precision (bf16 on AMX / AVX-512 BF16 hosts: what a user gets
without a setting). Each runner is timed in blocks of --runs calls, the
runners taken in rotation --blocks times, with --pause seconds of idle
between blocks: every runtime's intra-op workers spin for a while after a
call (onnxruntime ~1 s unless told not to, OpenVINO's TBB arena too), and a
block started beside them would find its second core taken. The table gives,
per runner, the best block's median (the least disturbed block of a shared
host) and the p99 over every call, and the ratio of ai-engine's best-block
median to each peer's (<= 1.0: ai-engine is faster). For the OpenVINO
default-precision peer it also gives the max relative error of its output
against ai-engine's fp32 output (which matches onnxruntime's): what that
peer's speed costs in accuracy.

--precision bf16 converts ai-engine's model in bf16 (`ai-engine convert
--precision bf16`): the `aie` column is then bf16, the note gives its max
relative error against ai-engine's fp32 output, and the `aie-fp32` peer
puts our fp32 beside it in the same run.

--int8 resnet18,cnn_bn adds, per model, its QDQ form quantised by
onnxruntime.quantization.quantize_static (uint8 activations per tensor,
int8 weights per channel, 4 random calibration inputs) run by ai-engine
(the int8 kernels, engine/passes/qdq_fuse.py) against onnxruntime's int8
execution of the same file (--int8-formats QDQ,QOperator: both of
quantize_static's formats), with the max difference of the outputs, and against ai-engine's bf16 of the same fp32
model in the same blocks (`aie bf16` column).

onnxruntime runs with session.intra_op.allow_spinning = 0 unless
--ort-spinning. ResNet-18 conversion time and .aie load time are printed per
model. --steady-state adds minor page faults over 1,000 runs and RSS
before/after 10,000 runs of the MLP.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PEERS = ("ort", "ov-fp32", "ov", "aie-fp32")


def blocks(runners: dict[str, Callable[[], object]], runs: int, count: int, pause: float) -> dict[str, tuple]:
    """Each runner timed in `count` blocks of `runs` calls, runners in
    rotation, `pause` seconds idle before each block. Returns, per runner,
    (best block median ms, p99 ms over every call)."""
    for fn in runners.values():
        fn()  # warm-up: plans, arenas, compiled kernels
    times: dict[str, list[list[float]]] = {name: [] for name in runners}
    for _ in range(count):
        for name, fn in runners.items():
            time.sleep(pause)  # the previous runtime's spinning workers give the cores back
            block = []
            for _ in range(runs):
                t = time.perf_counter()
                fn()
                block.append(time.perf_counter() - t)
            times[name].append(block)
    return {name: (min(float(np.median(b)) for b in bs) * 1e3,
                   float(np.percentile([t for b in bs for t in b], 99)) * 1e3) for name, bs in times.items()}


def max_rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / max |ref|: relative to the output's scale, so a
    near-zero logit does not dominate."""
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(np.asarray(got, np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def ort_runner(src: Path, threads: int, spinning: bool):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if not spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    return lambda feeds: sess.run(None, feeds)


def ov_runner(src: Path, threads: int, feeds: dict[str, np.ndarray], fp32: bool):
    """OpenVINO compiled for these feeds' shapes (a model with symbolic
    dimensions is reshaped first, as a user of a static batch would)."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(src))
    model.reshape({name: list(a.shape) for name, a in feeds.items()})
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
    if fp32:
        config["INFERENCE_PRECISION_HINT"] = "f32"
    compiled = core.compile_model(model, "CPU", config)
    request = compiled.create_infer_request()
    outputs = compiled.outputs

    def run(feeds):
        request.infer(feeds)
        return [request.get_tensor(o).data for o in outputs]
    return run, compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()


def ort_quantized(name: str, src: Path, dst: Path, fmt: str = "QDQ") -> Path:
    """src quantised by onnxruntime.quantization.quantize_static (fmt: QDQ or QOperator, per channel),
    as users bring them."""
    from onnxruntime import quantization

    from models import zoo

    samples = iter([zoo.random_inputs(name, batch=1, seed=s) for s in range(4)])

    class Reader(quantization.CalibrationDataReader):
        def get_next(self):
            return next(samples, None)

    quantization.quantize_static(str(src), str(dst), Reader(), quant_format=getattr(quantization.QuantFormat, fmt),
                                 per_channel=True, activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8)
    return dst


def int8_rows(names: list[str], threads_list, batches, args, tmp: Path) -> None:
    """ai-engine against onnxruntime on the same onnxruntime-quantised QDQ model (int8 on both sides)."""
    import logging

    from engine.convert import PrecisionOptions, convert_file
    from engine.session import InferenceSession
    from models import zoo

    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's advice on pre-processing
    print(f"{'int8 model':<12} {'batch':>5} {'thr':>3} {'aie ms':>9} {'aie p99':>9} {'ort int8 ms':>12} {'ratio':>6} "
          f"{'aie bf16 ms':>12} {'ratio':>6}  notes")
    for name, fmt in ((n, f) for n in names for f in args.int8_formats.split(",")):
        q = ort_quantized(name, zoo.ensure(name, tmp), tmp / f"{name}.{fmt.lower()}.onnx", fmt)
        convert_file(q, tmp / f"{name}.int8.aie")
        # our bf16 of the same fp32 model in the same blocks: int8 should beat it (twice the AMX throughput)
        convert_file(zoo.ensure(name, tmp), tmp / f"{name}.bf16.aie", precision=PrecisionOptions("bf16"))
        for threads in threads_list:
            sess = InferenceSession(tmp / f"{name}.int8.aie", threads=threads)
            bf16 = InferenceSession(tmp / f"{name}.bf16.aie", threads=threads)
            ort_run = ort_runner(q, threads, args.ort_spinning)
            for batch in batches:
                feeds = zoo.random_inputs(name, batch=batch, seed=0)
                diff = max(float(np.abs(np.asarray(a, np.float64) - r).max())
                           for a, r in zip(sess.run(None, feeds), ort_run(feeds)))
                res = blocks({"aie": lambda: sess.run(None, feeds), "ort": lambda: ort_run(feeds),
                              "bf16": lambda: bf16.run(None, feeds)},
                             max(3, args.runs // (4 if batch > 8 else 1)), args.blocks, args.pause)
                (a50, a99), (o50, _), (b50, _) = res["aie"], res["ort"], res["bf16"]
                print(f"{name + ('' if fmt == 'QDQ' else ' QOp'):<12} {batch:>5} {threads:>3} {a50:>9.3f} {a99:>9.3f} {o50:>12.3f} {a50 / o50:>6.2f} "
                      f"{b50:>12.3f} {a50 / b50:>6.2f}  max |aie - ort| {diff:.3g}", flush=True)


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))


def main(argv=None) -> int:
    from engine.convert import PrecisionOptions, convert_file
    from engine.session import InferenceSession
    from models import zoo

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(n for n in zoo.NAMES))
    p.add_argument("--batches", default="1,64")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--runs", type=int, default=20, help="calls per block (a quarter of it at batch > 8)")
    p.add_argument("--blocks", type=int, default=3, help="blocks per runner, taken in rotation")
    p.add_argument("--pause", type=float, default=1.0, help="idle seconds before each block")
    p.add_argument("--peers", default="ort,ov-fp32,ov",
                   help=f"comma-separated peers from {', '.join(PEERS)} (an empty string: ai-engine alone)")
    p.add_argument("--steady-state", action="store_true")
    p.add_argument("--int8", default="", help="models to also run quantised (QDQ from onnxruntime.quantization), "
                                              "against onnxruntime int8, e.g. resnet18")
    p.add_argument("--int8-formats", default="QDQ", help="quantize_static's formats for --int8: QDQ, QOperator "
                                                         "or both (QDQ,QOperator)")
    p.add_argument("--ort-spinning", action="store_true",
                   help="leave onnxruntime's intra-op spinning on (it then holds a CPU between its runs)")
    p.add_argument("--conv-algo", choices=("auto", "gemm", "direct"), default="auto",
                   help="force convolutions onto one path where the params allow it (aie_conv2d_set_algo), "
                        "to compare the paths end to end; default: the library's own choice")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="what ai-engine's model is converted in (the aie column); aie-fp32 adds fp32 beside it")
    args = p.parse_args(argv)
    peers = [x for x in args.peers.split(",") if x]
    unknown = [x for x in peers if x not in PEERS]
    if unknown:
        p.error(f"--peers: unknown {', '.join(unknown)} (expected some of: {', '.join(PEERS)})")
    if args.conv_algo != "auto":
        import ctypes

        from engine.kernels._lib import lib

        lib().aie_conv2d_set_algo.argtypes = [ctypes.c_int]
        lib().aie_conv2d_set_algo({"gemm": 1, "direct": 2}[args.conv_algo])
    tmp = Path(tempfile.mkdtemp(prefix="aie-bench-"))
    worst = None
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}, ai-engine {args.precision}, "
          f"conv algo {args.conv_algo}, "
          f"onnxruntime spinning {'on' if args.ort_spinning else 'off'}; best block median of "
          f"{args.blocks} x {args.runs} calls, {args.pause} s pause before each block")
    cols = "".join(f" {peer + ' ms':>12} {'ratio':>6}" for peer in peers)
    print(f"{'model':<12} {'batch':>5} {'thr':>3} {'aie ms':>9} {'aie p99':>9}{cols}  notes")
    for name in (n for n in args.models.split(",") if n):
        src = zoo.ensure(name, tmp)
        t = time.perf_counter()
        convert_file(src, tmp / f"{name}.aie", precision=PrecisionOptions(args.precision))
        conv_s = time.perf_counter() - t
        fp32_aie = tmp / f"{name}.aie"
        if args.precision != "fp32":
            fp32_aie = tmp / f"{name}.fp32.aie"
            convert_file(src, fp32_aie)
        t = time.perf_counter()
        InferenceSession(tmp / f"{name}.aie", threads=1)
        load_ms = (time.perf_counter() - t) * 1e3
        for threads in (int(x) for x in args.threads.split(",")):
            sess = InferenceSession(tmp / f"{name}.aie", threads=threads)
            ref = sess if fp32_aie == tmp / f"{name}.aie" else InferenceSession(fp32_aie, threads=threads)
            ort_run = ort_runner(src, threads, args.ort_spinning) if "ort" in peers else None
            for batch in (int(x) for x in args.batches.split(",")):
                feeds = zoo.random_inputs(name, batch=batch, seed=0)
                runners = {"aie": lambda: sess.run(None, feeds)}
                notes = []
                if ort_run is not None:
                    runners["ort"] = lambda: ort_run(feeds)
                if "aie-fp32" in peers:
                    runners["aie-fp32"] = lambda: ref.run(None, feeds)
                if ref is not sess:
                    err = max(max_rel_err(o, a) for o, a in zip(sess.run(None, feeds), ref.run(None, feeds)))
                    notes.append(f"aie {sess.precision} {','.join(sess.kernel_paths.values())}, max rel err {err:.1e}")
                for peer in ("ov-fp32", "ov"):
                    if peer in peers:
                        run, precision = ov_runner(src, threads, feeds, fp32=peer == "ov-fp32")
                        runners[peer] = (lambda r: lambda: r(feeds))(run)
                        if peer == "ov":
                            err = max(max_rel_err(o, a) for o, a in zip(run(feeds), ref.run(None, feeds)))
                            notes.append(f"ov {precision}, max rel err {err:.1e}")
                runs = max(3, args.runs // (4 if batch > 8 else 1))
                res = blocks(runners, runs, args.blocks, args.pause)
                a50, a99 = res["aie"]
                line = f"{name:<12} {batch:>5} {threads:>3} {a50:>9.3f} {a99:>9.3f}"
                for peer in peers:
                    ratio = a50 / res[peer][0]
                    line += f" {res[peer][0]:>12.3f} {ratio:>6.2f}"
                    if worst is None or ratio > worst[0]:
                        worst = (ratio, peer, name, batch, threads)
                print(line + ("  " + "; ".join(notes) if notes else ""), flush=True)
                runners.clear()  # an OpenVINO request holds its compiled model and threads
        print(f"{name:<12} conversion {conv_s:.2f} s, .aie load {load_ms:.1f} ms", flush=True)
    if args.int8:
        int8_rows([n for n in args.int8.split(",") if n], [int(x) for x in args.threads.split(",")],
                  [int(x) for x in args.batches.split(",")], args, tmp)
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
    if worst:
        print(f"worst ratio: {worst[0]:.2f} against {worst[1]} ({worst[2]} batch {worst[3]} threads {worst[4]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
