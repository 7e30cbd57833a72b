"""gRPC serving benchmark: requests/s and p50/p99 latency at concurrency 1
and 16 for ResNet-18 (batch 1, 602 KB in) and a large-input request
(MobileNetV2 at batch 8, 4.8 MB in), over the engine's KServe v2 gRPC, the
engine's HTTP binary tensor extension, and onnxruntime behind a plain grpcio
server (benchmarks/grpc_ort_peer.py: one worker thread per server core, the
same generated stubs) -- all in the same run, driven by one asyncio load
generator pinned to its own core.

    .venv/bin/python benchmarks/bench_grpc.py
    .venv/bin/python benchmarks/bench_grpc.py --models resnet18:1 --duration 2 --concurrency 1
    git archive main | tar -x -C /tmp/base && \
        .venv/bin/python benchmarks/bench_grpc.py --models mobilenetv2:8 --baseline /tmp/base --no-http

--baseline adds the engine of another checkout (its gRPC port, same
config, same cores) as "ai-engine@base": an A/B interleaved slice by slice.

Cells are measured in --slices round-robin slices (bench_serve.py says why),
with --pause seconds of idle between blocks, so one cell's queue never spills
into the next. Each server's first answer is checked against onnxruntime.
Prints a markdown table for docs/PERFORMANCE.md and the gRPC/peer ratios,
by throughput and by the serving process's CPU per request (all its threads,
from schedstat, over the slices without warm-up): on a loaded host the
throughput ratio follows the scheduler, the CPU ratio what the code costs.
For the engine's cells it also prints where a request's time and CPU went:
the mean of each timing phase (engine.server.timing, from /metrics), the
mean batch the scheduler ran, and the CPU per request of the event-loop
thread, the other Python-named threads (the C runner thread that computes,
the codec pool) and grpc's own threads, by thread name.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import re
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

import grpc
import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_gate import _cpu_s  # noqa: E402
from bench_serve import (_commit, _cpu_model, _isa, free_port, measure, start_engine, stop_processes,  # noqa: E402
                         summarize, wait_http)
from engine.server.grpc_stubs import load  # noqa: E402

pb2, pb2_grpc, _ = load()


def _request(model: str, x_name: str, x: np.ndarray):
    req = pb2.ModelInferRequest(model_name=model)
    req.inputs.add(name=x_name, datatype="FP32", shape=x.shape)
    req.raw_input_contents.append(x.tobytes())
    return req


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds per thread group of `pid` (schedstat): "loop" is the main
    thread (the event loop), the others are grouped by thread name."""
    groups: dict[str, float] = defaultdict(float)
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            ns = int((task / "schedstat").read_text().split()[0])
            name = "loop" if int(task.name) == pid else (task / "comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
        groups[name] += ns / 1e9
    return dict(groups)


_SAMPLE = re.compile(r'^(aie_\w+)\{([^}]*)\} (\S+)$', re.M)


def engine_counters(http_port: int, model: str) -> dict[str, float]:
    """The /metrics samples of `model` this benchmark reads: each phase's sum
    and count over gRPC, inferences and executions (batches)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10).read().decode()
    out = {}
    for name, labels, value in _SAMPLE.findall(text):
        if f'model="{model}"' not in labels:
            continue
        if name.endswith(("_duration_seconds_sum", "_duration_seconds_count")) and 'protocol="grpc"' in labels:
            out[name] = float(value)
        elif name in ("aie_inference_count_total", "aie_execution_count_total"):
            out[name] = float(value)
    return out


def breakdown(d: dict, threads: dict, requests: int) -> str:
    """One line from a cell's /metrics deltas `d` and thread-group CPU seconds:
    mean ms per phase, mean batch, CPU ms per request by thread group."""
    phases = []
    for phase in ("decode", "queue", "compute", "encode_write"):
        n = d.get(f"aie_{phase}_duration_seconds_count", 0)
        phases.append(f"{phase} {d.get(f'aie_{phase}_duration_seconds_sum', 0) / n * 1e3:.2f}" if n else f"{phase} -")
    execs = d.get("aie_execution_count_total", 0)
    batch = d.get("aie_inference_count_total", 0) / execs if execs else float("nan")
    cpu = ", ".join(f"{name} {s / requests * 1e3:.2f}" for name, s in sorted(threads.items(), key=lambda kv: -kv[1])
                    if s / requests >= 1e-5) if requests else "-"
    return f"phases ms: {', '.join(phases)}; mean batch {batch:.2f} items; CPU ms/req by thread: {cpu}"


def measure_grpc(port: int, model: str, x_name: str, x: np.ndarray, concurrency: int, duration: float,
                 warmup: float) -> dict:
    """One slice of one gRPC cell, as bench_serve.measure: `concurrency`
    callers in a closed loop on one channel (HTTP/2 streams, as tritonclient)."""
    async def main():
        opts = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=opts) as channel:
            infer = pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer
            req = _request(model, x_name, x)
            results = {}
            for phase, secs in (("warmup", warmup), ("measure", duration)):
                if secs <= 0:
                    continue
                lat, errors, first = [], [], []
                stop = time.monotonic() + secs

                async def caller():
                    while time.monotonic() < stop:
                        t0 = time.perf_counter()
                        try:
                            resp = await infer(req)
                        except grpc.aio.AioRpcError as exc:
                            if not errors:
                                print(f"  {model} on :{port}: {exc.code().name}: {exc.details()}", flush=True)
                            errors.append(exc.code())
                            continue
                        lat.append(time.perf_counter() - t0)
                        if not first:
                            first.append(np.frombuffer(resp.raw_output_contents[0], np.float32)
                                         .reshape(list(resp.outputs[0].shape)))
                t0 = time.monotonic()
                await asyncio.gather(*(caller() for _ in range(concurrency)))
                results = {"lat": lat, "errors": len(errors), "elapsed": time.monotonic() - t0,
                           "first": first[0] if first else None}
            return results
    return asyncio.run(main())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18:1,mobilenetv2:8", help="model:batch, comma-separated")
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--duration", type=float, default=6.0, help="seconds measured per cell")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up per cell")
    ap.add_argument("--slices", type=int, default=3)
    ap.add_argument("--pause", type=float, default=1.0, help="idle seconds between blocks")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--queue-delay-us", type=int, default=1000)
    ap.add_argument("--baseline", type=Path, help="another checkout whose engine is measured too (ai-engine@base)")
    ap.add_argument("--no-http", action="store_true", help="leave out the engine's HTTP binary cells")
    args = ap.parse_args(argv)
    models = [(m, int(b)) for m, b in (item.split(":") for item in args.models.split(","))]
    concs = [int(c) for c in args.concurrency.split(",")]

    import onnxruntime as ort

    from engine.convert import convert_file
    from models import zoo

    cpus = sorted(os.sched_getaffinity(0))
    gen_cpus, server_cpus = cpus[:1], (cpus[1:] or cpus)
    os.sched_setaffinity(0, gen_cpus)
    work = Path(tempfile.mkdtemp(prefix="bench-grpc-"))
    procs = []
    try:
        onnx_paths, aie_models = {}, []
        for m, _ in models:
            onnx_paths[m] = zoo.ensure(m)
            convert_file(onnx_paths[m], work / f"{m}.aie")
            aie_models.append({"name": m, "path": str(work / f"{m}.aie"), "max_batch_size": args.max_batch,
                               "max_queue_delay_us": args.queue_delay_us, "max_queue_size": 4096})
        http_port, grpc_port, peer_port = free_port(), free_port(), free_port()
        log = open(work / "servers.log", "wb")
        config = {
            "http_port": http_port, "binary_port": None, "grpc_port": grpc_port, "threads": len(server_cpus),
            "log_level": "warning", "limits": {"max_body": "256M", "max_buffered_bytes": "1G"},
            # batches of 16 large-input requests plan arenas past the 256M default
            "arena": {"size": "4G"}, "state_dir": str(work / "state"), "log_dir": str(work / "log"),
            "models": aie_models}
        procs.append(start_engine(work, config, server_cpus, log))
        procs.append(subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "grpc_ort_peer.py"), str(peer_port),
                                       str(len(server_cpus)), *(f"{m}={p}" for m, p in onnx_paths.items())],
                                      preexec_fn=lambda: os.sched_setaffinity(0, server_cpus), stdout=log,
                                      stderr=log, env=dict(os.environ, OMP_NUM_THREADS="1")))
        base_http = base_grpc = None
        if args.baseline:
            base_http, base_grpc = free_port(), free_port()
            (work / "base").mkdir()
            (work / "base" / "engine.yaml").write_text(yaml.safe_dump(
                {**config, "http_port": base_http, "grpc_port": base_grpc, "state_dir": str(work / "base" / "state"),
                 "log_dir": str(work / "base" / "log")}))
            # `-m engine.cli` from the checkout: its engine package, not this one
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "engine.cli", "serve", "--config", str(work / "base" / "engine.yaml")],
                preexec_fn=lambda: os.sched_setaffinity(0, server_cpus), stdout=log, stderr=log,
                cwd=args.baseline, env=dict(os.environ, PYTHONPATH=f"{args.baseline}/sysconfig:{args.baseline}")))
            wait_http(f"http://127.0.0.1:{base_http}/v2/health/ready")
        wait_http(f"http://127.0.0.1:{http_port}/v2/health/ready")
        with grpc.insecure_channel(f"127.0.0.1:{peer_port}") as ch:
            grpc.channel_ready_future(ch).result(timeout=120)
        print(f"# {time.strftime('%Y-%m-%d')}, commit {_commit()}, {_cpu_model()}, kernel ISA {_isa()}, "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
        print(f"cores: load generator {gen_cpus}, servers {server_cpus}; {args.duration:g} s per cell in "
              f"{args.slices} round-robin slices, {args.pause:g} s pauses", flush=True)
        rows = []
        for m, batch in models:
            x_name, x = next(iter(zoo.random_inputs(m, batch=batch, seed=0).items()))
            x = np.ascontiguousarray(x, np.float32)
            want = ort.InferenceSession(str(onnx_paths[m]), providers=["CPUExecutionProvider"]).run(None, {x_name: x})[0]
            servers = [("ai-engine", "grpc", grpc_port)] + [("ai-engine", "http-binary", http_port)] * (not args.no_http) \
                + [("ai-engine@base", "grpc", base_grpc)] * bool(args.baseline) + [("ort+grpcio", "grpc", peer_port)]
            cells = [(server, kind, port, c) for server, kind, port in servers for c in concs]
            slices: dict[tuple, list] = {cell: [] for cell in cells}
            cpu: dict[tuple, list] = {cell: [0.0, 0] for cell in cells}   # CPU seconds, requests
            # the engine's gRPC cells: /metrics deltas and CPU seconds per thread group, summed over slices
            seen: dict[tuple, tuple] = {cell: (defaultdict(float), defaultdict(float)) for cell in cells}
            pid = {grpc_port: procs[0].pid, http_port: procs[0].pid, peer_port: procs[1].pid,
                   base_grpc: procs[2].pid if args.baseline else None}
            metrics_port = {grpc_port: http_port, base_grpc: base_http}
            for i in range(max(1, args.slices)):
                for cell in cells:
                    server, kind, port, c = cell
                    per = args.duration / max(1, args.slices)
                    warm = args.warmup if i == 0 else 0.0
                    ours = server.startswith("ai-engine") and kind == "grpc"
                    c0 = _cpu_s(pid[port])
                    t0, m0 = thread_cpu_s(pid[port]), engine_counters(metrics_port[port], m) if ours else {}
                    if kind == "grpc":
                        slices[cell].append(measure_grpc(port, m, x_name, x, c, per, warm))
                    else:
                        slices[cell].append(measure(kind, port, m, x_name, x, c, per, warm))
                    if not warm:
                        # the callers' last requests were answered before measure*() returned
                        cpu[cell][0] += _cpu_s(pid[port]) - c0
                        cpu[cell][1] += len(slices[cell][-1]["lat"])
                        if ours:
                            deltas, threads = seen[cell]
                            for k, v in engine_counters(metrics_port[port], m).items():
                                deltas[k] += v - m0.get(k, 0.0)
                            for name, s in thread_cpu_s(pid[port]).items():
                                threads[name] += s - t0.get(name, 0.0)
                    time.sleep(args.pause)  # a benchmark's idle gap between blocks, not synchronisation
            for cell in cells:
                server, kind, port, c = cell
                r = summarize(slices[cell])
                r["cpu_ms"] = cpu[cell][0] / cpu[cell][1] * 1e3 if cpu[cell][1] else float("nan")
                ok = r["first"] is not None and np.allclose(r["first"], want, rtol=1e-3, atol=1e-3)
                rows.append((m, batch, server, kind, c, r, ok))
                print(f"{m:11s} b={batch} {server:10s} {kind:11s} c={c:3d} {r['rps']:8.1f} req/s  "
                      f"p50 {r['p50']:7.2f}  p99 {r['p99']:7.2f} ms  CPU/req {r['cpu_ms']:7.2f} ms  errors {r['errors']}  "
                      f"{'ok' if ok else 'WRONG ANSWER'}", flush=True)
                if server.startswith("ai-engine") and kind == "grpc":
                    print(f"    {breakdown(*seen[cell], cpu[cell][1])}", flush=True)
        print("\n| model | batch | server | protocol | conc. | req/s | p50 ms | p99 ms | server CPU ms/req | errors |")
        print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|")
        for m, batch, server, kind, c, r, ok in rows:
            print(f"| {m} | {batch} | {server} | {kind} | {c} | {r['rps']:.1f} | {r['p50']:.2f} | {r['p99']:.2f} | "
                  f"{r['cpu_ms']:.2f} | "
                  f"{r['errors']}{'' if ok else ' WRONG'} |")
        by = {(m, server, kind, c): r for m, _, server, kind, c, r, _ in rows}
        print()
        for m, _ in models:
            for c in concs:
                ours, peer = by[(m, "ai-engine", "grpc", c)], by[(m, "ort+grpcio", "grpc", c)]
                print(f"{m} c={c}: ai-engine gRPC / ort+grpcio throughput {ours['rps'] / peer['rps']:.2f}x, "
                      f"CPU per request {peer['cpu_ms'] / ours['cpu_ms']:.2f}x ({ours['cpu_ms']:.2f} vs "
                      f"{peer['cpu_ms']:.2f} ms), p50 {ours['p50']:.2f} vs {peer['p50']:.2f} ms")
                if args.baseline:
                    base = by[(m, "ai-engine@base", "grpc", c)]
                    print(f"{m} c={c}: ai-engine gRPC / ai-engine@base throughput {ours['rps'] / base['rps']:.2f}x, "
                          f"CPU per request {base['cpu_ms'] / ours['cpu_ms']:.2f}x ({ours['cpu_ms']:.2f} vs "
                          f"{base['cpu_ms']:.2f} ms)")
        print(f"load after: {os.getloadavg()[0]:.2f}")
    finally:
        stop_processes(procs)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
