"""SGEMM benchmark: engine.kernels.matmul against numpy's OpenBLAS, same run.

Run (unset the OpenBLAS tuning variables only for this command):
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_gemm.py
    ... benchmarks/bench_gemm.py --dtype bf16 --shapes 1024x1024x1024   (or --dtype int8)
With --dtype bf16|int8 it times the low-precision GEMM of the selected level
(AIE_ISA) against our fp32 GEMM and OpenBLAS fp32 in the same run.

Prints a markdown table (paste into docs/PERFORMANCE.md): GFLOPS of both at
1 and 2 threads (ours also on a pre-packed B), the ratio ours/OpenBLAS, and
ours as % of the theoretical peak (FLOP/cycle/core x nominal MHz x threads;
a core that boosts above its nominal clock can exceed 100%: the Zen 3 VM's
FMA loop ran at ~91 GFLOPS against a nominal 78). Each cell is the median of
repeated calls, timed in thread CPU time at 1 thread and wall time above;
ours and OpenBLAS alternate in blocks so load from other processes hits both
alike. This is a benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from engine import kernels

SQUARE = [64, 128, 256, 512, 1024, 2048]
INFERENCE = [(1, 4096, 4096), (64, 512, 784), (128, 1024, 256), (196, 256, 2304)]
# Small-M shapes of batch-1..8 inference (the packing-free paths): ResNet-18's
# classifier, an MLP layer at batch 8.
SMALL_M = [(1, 1000, 512), (8, 1024, 1024)]
# Two 512-bit FMA units x 16 lanes x 2 FLOP (Sapphire/Emerald Rapids Xeon); 16 per AVX2-FMA unit pair.
FLOP_PER_CYCLE = {"avx512": 64, "avx2": 32, "scalar": 8}


def cpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def nominal_mhz() -> float:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1])
    return float("nan")


def commit() -> str:
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def openblas_description() -> str:
    for info in threadpool_info():
        if info.get("internal_api") == "openblas":
            return (f"OpenBLAS {info.get('version')} ({info.get('filepath', '?').rsplit('/', 1)[-1]}), "
                    f"kernel architecture {info.get('architecture')}, threading {info.get('threading_layer')}")
    return "no OpenBLAS found by threadpoolctl"


# OpenBLAS worker threads busy-wait after each call (its THREAD_TIMEOUT, about
# 0.1 s by default) and ai-engine's pool spins at most 50 us: alternating call
# by call would hand OpenBLAS's spinning thread the core our second thread
# needs. So the two alternate in blocks with a pause between, long enough for
# both pools to be asleep when the other starts.
SWITCH_PAUSE_S = 0.25
ROUNDS = 4


def time_blocks(fns, budget_s: float, min_reps: int, clock=time.perf_counter) -> list[float]:
    """Median seconds per call of each function, alternating blocks of calls,
    each call timed with `clock`."""
    for fn in fns:
        fn()  # warm caches, pool threads, page faults
    times = [[] for _ in fns]
    for _ in range(ROUNDS):
        for fn, sink in zip(fns, times):
            time.sleep(SWITCH_PAUSE_S)
            start = time.perf_counter()
            reps = 0
            while reps < max(1, min_reps // ROUNDS) or (time.perf_counter() - start < budget_s / ROUNDS
                                                        and reps < 250):
                t0 = clock()
                fn()
                sink.append(clock() - t0)
                reps += 1
    return [statistics.median(t) for t in times]


def bench_lowp(dtype: str, shapes, threads, args) -> None:
    """bf16 or int8 GEMM (B pre-packed, as weights are) against our fp32 GEMM on
    pre-packed B and numpy's fp32, same run. int8: uint8 A x int8 B requantised
    to uint8 (the QLinearMatMul shape of the work)."""
    from engine.kernels.gemm_lowp import matmul_bf16, matmul_u8s8, pack_b_bf16, pack_b_s8, paths

    print(f"{dtype} kernel: {paths()['bf16' if dtype == 'bf16' else 'int8']} (level {kernels.level()})")
    print()
    print(f"| M x N x K | threads | {dtype} G(FL)OPS | ai-engine fp32 GFLOPS | OpenBLAS fp32 GFLOPS | "
          f"x ai-engine fp32 | x OpenBLAS fp32 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for m, n, k in shapes:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        pf32 = kernels.pack_b(b)
        c32 = np.empty((m, n), np.float32)
        c_np = np.empty((m, n), np.float32)
        if dtype == "bf16":
            packed, c_low = pack_b_bf16(b), np.empty((m, n), np.float32)
            low = lambda nt: matmul_bf16(a, packed, out=c_low, threads=nt)  # noqa: E731
        else:
            a8 = rng.integers(0, 256, (m, k), dtype=np.uint8)
            packed = pack_b_s8(rng.integers(-128, 128, (k, n), dtype=np.int8))
            c_low, scale = np.empty((m, n), np.uint8), np.full(n, 0.01, np.float32)
            low = lambda nt: matmul_u8s8(a8, packed, a_zero=128, out_dtype="uint8", a_scale=0.02,  # noqa: E731
                                         b_scale=scale, y_scale=1.0, y_zero=128, out=c_low, threads=nt)
        flops = 2.0 * m * n * k
        for nt in threads:
            with threadpool_limits(limits=nt, user_api="blas"):
                t_low, t_32, t_np = time_blocks(
                    [lambda: low(nt), lambda: kernels.matmul_packed(a, pf32, out=c32, threads=nt),
                     lambda: np.matmul(a, b, out=c_np)], args.budget, args.min_reps)
            print(f"| {m} x {n} x {k} | {nt} | {flops / t_low / 1e9:.1f} | {flops / t_32 / 1e9:.1f} | "
                  f"{flops / t_np / 1e9:.1f} | {t_32 / t_low:.2f} | {t_np / t_low:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--budget", type=float, default=0.6, help="seconds of timing per cell (default 0.6)")
    parser.add_argument("--min-reps", type=int, default=5, help="minimum calls per cell (default 5)")
    parser.add_argument("--quick", action="store_true", help="square sizes up to 512 and the inference shapes only")
    parser.add_argument("--dtype", choices=("fp32", "bf16", "int8"), default="fp32",
                        help="fp32 (default): ai-engine vs OpenBLAS; bf16/int8: the low-precision GEMM vs both in fp32")
    parser.add_argument("--shapes", default="", help="only these shapes, e.g. 1x4096x4096,512x512x512 (M x N x K)")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    shapes = [(n, n, n) for n in SQUARE if not (args.quick and n > 512)] + INFERENCE + SMALL_M
    if args.shapes:
        try:
            shapes = [tuple(int(d) for d in s.split("x")) for s in args.shapes.split(",")]
        except ValueError:
            parser.error(f"--shapes {args.shapes!r}: expected MxNxK[,MxNxK...] with integers")
        if any(len(s) != 3 or min(s) < 1 for s in shapes):
            parser.error(f"--shapes {args.shapes!r}: each shape needs three positive sizes M x N x K")

    isa = kernels.isa()
    mhz = nominal_mhz()
    peak_core = FLOP_PER_CYCLE[isa] * mhz / 1e3  # GFLOPS
    print(f"date: {datetime.date.today().isoformat()}, commit: {commit()}, machine: {cpu_model()}, "
          f"{len(os.sched_getaffinity(0))} CPUs usable, nominal {mhz:.0f} MHz")
    print(f"ai-engine ISA: {isa}; numpy {np.__version__} with {openblas_description()}")
    print(f"peak: {FLOP_PER_CYCLE[isa]} FLOP/cycle/core x {mhz:.0f} MHz = {peak_core:.1f} GFLOPS per core (theoretical)")
    print()
    if args.dtype != "fp32":
        bench_lowp(args.dtype, shapes, threads, args)
        return
    # One thread: both libraries run on the calling thread, so its CPU time is
    # the call's work alone, not the time other processes held the core (this
    # VM is shared; wall time under load halved both sides at random).
    print("Timing: thread CPU time at 1 thread, wall time at more. 'packed B': our GEMM on B packed "
          "beforehand (kernels.pack_b), as a model's weights are.")
    print()
    print("| M x N x K | threads | ai-engine GFLOPS | packed B GFLOPS | OpenBLAS GFLOPS | ratio | packed B ratio "
          "| ai-engine % of peak |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for m, n, k in shapes:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        pb = kernels.pack_b(b)
        c_ours, c_pk, c_np = (np.empty((m, n), np.float32) for _ in range(3))
        flops = 2.0 * m * n * k
        for nt in threads:
            with threadpool_limits(limits=nt, user_api="blas"):
                t_ours, t_pk, t_np = time_blocks(
                    [lambda: kernels.matmul(a, b, out=c_ours, threads=nt),
                     lambda: kernels.matmul_packed(a, pb, out=c_pk, threads=nt), lambda: np.matmul(a, b, out=c_np)],
                    args.budget, args.min_reps, time.thread_time if nt == 1 else time.perf_counter)
            g_ours, g_pk, g_np = flops / t_ours / 1e9, flops / t_pk / 1e9, flops / t_np / 1e9
            print(f"| {m} x {n} x {k} | {nt} | {g_ours:.1f} | {g_pk:.1f} | {g_np:.1f} | {g_ours / g_np:.2f} | "
                  f"{g_pk / g_np:.2f} | {100 * g_ours / (peak_core * nt):.0f}% |", flush=True)


if __name__ == "__main__":
    main()
