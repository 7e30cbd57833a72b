"""Serving benchmark: requests/s and p50/p99/p999 latency at several
concurrencies, for zoo models over HTTP JSON, HTTP binary (KServe binary
tensor extension) and the TCP binary protocol, beside onnxruntime served by
uvicorn + starlette (benchmarks/ort_peer.py, one worker per server core),
all driven by the same asyncio load generator pinned to its own core.

    .venv/bin/python benchmarks/bench_serve.py                      # full run
    .venv/bin/python benchmarks/bench_serve.py --models mlp --duration 2 --concurrency 1,16

Prints a markdown table (and the JSON-vs-binary codec comparison); paste
into docs/PERFORMANCE.md "Serving". Every cell runs for --duration seconds
after a warm-up; each server's first answer is checked against onnxruntime.

On a shared machine the load of other jobs drifts over seconds, which once
made cells measured one after the other look different for no reason of
their own. So each cell's time is cut into --slices slices, and the slices of
all cells of a model are taken round-robin: every cell sees the same mix of
quiet and busy moments, and differences between cells are the servers'.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

nan = float("nan")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine import wire  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return  # answering
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up in {timeout} s")


# ---- request bodies ----------------------------------------------------------
def kserve_body(name: str, x: np.ndarray, binary: bool) -> tuple[bytes, dict]:
    if binary:
        head = json.dumps({"inputs": [{"name": name, "shape": list(x.shape), "datatype": "FP32",
                                       "parameters": {"binary_data_size": x.nbytes}}],
                           "parameters": {"binary_data_output": True}}).encode()
        return head + x.tobytes(), {"Inference-Header-Content-Length": str(len(head)),
                                    "Content-Type": "application/octet-stream"}
    body = json.dumps({"inputs": [{"name": name, "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()
    return body, {"Content-Type": "application/json"}


def decode_kserve(body: bytes, headers: dict) -> np.ndarray:
    hlen = headers.get("inference-header-content-length")
    split = int(hlen) if hlen else len(body)
    doc = json.loads(body[:split])
    out = doc["outputs"][0]
    if hlen:
        return np.frombuffer(body, np.float32, offset=split).reshape(out["shape"])
    return np.asarray(out["data"], np.float32).reshape(out["shape"])


# ---- load generator ------------------------------------------------------------
async def _read_http(reader) -> tuple[bytes, dict, bytes]:
    status_line = await reader.readline()
    hdrs = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        k, _, v = line.decode().partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status_line, hdrs, await reader.readexactly(int(hdrs.get("content-length", 0)))


async def _http_conn(port: int, path: str, body: bytes, headers: dict, stop: float, lat: list, errors: list,
                     first: list):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
    try:
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            writer.write(head + body)
            status_line, hdrs, data = await _read_http(reader)
            if b" 200 " not in status_line:
                errors.append(status_line)
                continue
            lat.append(time.perf_counter() - t0)
            if not first:
                first.append(decode_kserve(data, hdrs))
    finally:
        writer.close()


async def _tcp_conn(port: int, model: str, x_name: str, x: np.ndarray, stop: float, lat: list, errors: list,
                    first: list):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    frame = b"".join(wire.encode_infer(1, model, {x_name: x}))
    try:
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            writer.write(frame)
            header = await reader.readexactly(16)
            op, length, _ = wire.parse_header(header, 1 << 40)
            payload = memoryview(await reader.readexactly(length))
            if op != wire.OP_RESULT:
                errors.append(wire.decode_error(payload))
                continue
            lat.append(time.perf_counter() - t0)
            if not first:
                first.append(next(iter(wire.decode_result(payload)[1].values())))
    finally:
        writer.close()


def measure(kind: str, port: int, model: str, x_name: str, x: np.ndarray, concurrency: int, duration: float,
            warmup: float) -> dict:
    """One slice of one cell: raw latencies (s), error count, elapsed s, first answer."""
    async def main():
        results = {}
        for phase, secs in (("warmup", warmup), ("measure", duration)):
            if secs <= 0:
                continue
            lat, errors, first = [], [], []
            stop = time.monotonic() + secs
            if kind == "tcp":
                tasks = [_tcp_conn(port, model, x_name, x, stop, lat, errors, first) for _ in range(concurrency)]
            else:
                body, headers = kserve_body(x_name, x, kind == "http-binary")
                tasks = [_http_conn(port, f"/v2/models/{model}/infer", body, headers, stop, lat, errors, first)
                         for _ in range(concurrency)]
            t0 = time.monotonic()
            await asyncio.gather(*tasks, return_exceptions=False)
            results = {"lat": lat, "errors": len(errors), "elapsed": time.monotonic() - t0,
                       "first": first[0] if first else None}
        return results
    return asyncio.run(main())


# ---- open loop: a fixed arrival rate -----------------------------------------------
def open_loop(kind: str, port: int, model: str, x_name: str, x: np.ndarray, rate: float, duration: float,
              max_conns: int = 64) -> dict:
    """Requests sent at `rate` per second whatever the answers do (an open
    loop, unlike measure()): latency counts from each request's scheduled
    time, so a server falling behind shows as latency, not as a slower
    generator. A request that finds all max_conns connections busy is
    dropped and counted (the load no longer keeps the queue bounded)."""
    if kind == "tcp":
        frame = b"".join(wire.encode_infer(1, model, {x_name: x}))
    else:
        body, headers = kserve_body(x_name, x, kind == "http-binary")
        frame = (f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
                 + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode() + body

    async def main():
        idle, opened, lat, errors, dropped = [], [0], [], [0], [0]

        async def one(target: float):
            if idle:
                conn = idle.pop()
            elif opened[0] < max_conns:
                opened[0] += 1
                conn = await asyncio.open_connection("127.0.0.1", port)
            else:
                dropped[0] += 1
                return
            reader, writer = conn
            writer.write(frame)
            if kind == "tcp":
                op, length, _ = wire.parse_header(await reader.readexactly(16), 1 << 40)
                await reader.readexactly(length)
                ok = op == wire.OP_RESULT
            else:
                status_line, _, _ = await _read_http(reader)
                ok = b" 200 " in status_line
            lat.append(time.perf_counter() - target)
            if not ok:
                errors[0] += 1
            idle.append(conn)

        start = time.perf_counter() + 0.05
        tasks = []
        for i in range(int(rate * duration)):
            target = start + i / rate
            delay = target - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one(target)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
        for _, writer in idle:
            writer.close()
        return {"lat": lat, "errors": errors[0], "dropped": dropped[0], "elapsed": elapsed}

    return asyncio.run(main())


def summarize(slices: list[dict]) -> dict:
    lat = np.sort(np.concatenate([np.asarray(s["lat"], float) for s in slices])) * 1e3
    elapsed = sum(s["elapsed"] for s in slices)
    q = (lambda p: float(np.percentile(lat, p))) if len(lat) else (lambda p: float("nan"))
    first = next((s["first"] for s in slices if s["first"] is not None), None)
    return {"rps": len(lat) / elapsed, "p50": q(50), "p99": q(99), "p999": q(99.9), "n": len(lat),
            "errors": sum(s["errors"] for s in slices), "first": first}


def run_cell(kind: str, port: int, model: str, x_name: str, x: np.ndarray, concurrency: int, duration: float,
             warmup: float) -> dict:
    """One cell measured in one piece (the tests' and probes' entry point)."""
    return summarize([measure(kind, port, model, x_name, x, concurrency, duration, warmup)])


# ---- codec micro-benchmark -------------------------------------------------------
def codec_comparison(x: np.ndarray, reps: int = 20) -> dict:
    def timed(fn):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) / reps * 1e3

    def json_round():
        body = json.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                       "data": x.ravel().tolist()}]}).encode()
        doc = json.loads(body)
        np.asarray(doc["inputs"][0]["data"], np.float32).reshape(x.shape)

    def binary_round():
        frame = b"".join(wire.encode_infer(1, "m", {"input": x}))
        op, length, crc = wire.parse_header(frame[:16], 1 << 40)
        wire.decode_infer(memoryview(frame)[16:])
    j, b = timed(json_round), timed(binary_round)
    return {"json_ms": j, "binary_ms": b, "speedup": j / b}


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "cpu")
    except OSError:
        name = "cpu"
    return f"{name} x{os.cpu_count()}"


def _isa() -> str:
    try:
        from engine import kernels

        return kernels.isa()
    except Exception:  # noqa: BLE001 - a label only
        return "unknown"


def start_engine(work: Path, config: dict, cpus: list[int], log) -> subprocess.Popen:
    """`ai-engine serve` on work/engine.yaml, pinned to `cpus`."""
    import yaml

    (work / "engine.yaml").write_text(yaml.safe_dump(config))
    return subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--config", str(work / "engine.yaml")],
                            preexec_fn=lambda: os.sched_setaffinity(0, cpus), stdout=log, stderr=log, cwd=REPO)


def stop_processes(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,resnet18")
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("--duration", type=float, default=4.0, help="seconds measured per cell")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up per cell")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--queue-delay-us", type=int, default=1000)
    ap.add_argument("--slices", type=int, default=4, help="slices per cell, taken round-robin across cells")
    ap.add_argument("--servers", default="ai-engine,ort+uvicorn", help="servers to measure")
    ap.add_argument("--protocols", default="http-json,http-binary,tcp", help="protocols to measure")
    ap.add_argument("--rates", default="",
                    help="also run an open loop at these arrival rates (req/s, e.g. 20,30,40,50) for the binary "
                         "protocols: p99 at a fixed load, and the highest rate with p99 <= --p99-target-ms")
    ap.add_argument("--p99-target-ms", type=float, default=50.0)
    args = ap.parse_args(argv)
    models = args.models.split(",")
    concs = [int(c) for c in args.concurrency.split(",") if c]  # "": open loop only (--rates)
    servers, protocols = set(args.servers.split(",")), set(args.protocols.split(","))

    from engine.convert import convert_file
    from models import zoo
    import onnxruntime as ort

    cpus = sorted(os.sched_getaffinity(0))
    gen_cpus, server_cpus = cpus[:1], (cpus[1:] or cpus)
    os.sched_setaffinity(0, gen_cpus)
    work = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    procs = []
    try:
        onnx_paths, aie_models = {}, []
        for m in models:
            onnx_paths[m] = zoo.ensure(m)
            convert_file(onnx_paths[m], work / f"{m}.aie")
            aie_models.append({"name": m, "path": str(work / f"{m}.aie"), "max_batch_size": args.max_batch,
                               "max_queue_delay_us": args.queue_delay_us, "max_queue_size": 4096})
        http_port, tcp_port, peer_port = free_port(), free_port(), free_port()

        def pinned():
            os.sched_setaffinity(0, server_cpus)
        log = open(work / "servers.log", "wb")
        procs.append(start_engine(work, {"http_port": http_port, "binary_port": tcp_port, "threads": len(server_cpus),
                                         "log_level": "warning", "models": aie_models}, server_cpus, log))
        env = dict(os.environ, AIE_PEER_MODELS=",".join(f"{m}={p}" for m, p in onnx_paths.items()),
                   PYTHONPATH=str(REPO / "benchmarks"), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, "-m", "uvicorn", "ort_peer:app", "--port", str(peer_port),
                                       "--workers", str(len(server_cpus)), "--log-level", "warning",
                                       "--no-access-log"], preexec_fn=pinned, stdout=log, stderr=log, env=env))
        wait_http(f"http://127.0.0.1:{http_port}/v2/health/ready")
        wait_http(f"http://127.0.0.1:{peer_port}/")
        print(f"# {time.strftime('%Y-%m-%d')}, commit {_commit()}, {_cpu_model()}, kernel ISA {_isa()}", flush=True)
        print(f"cores: load generator {gen_cpus}, servers {server_cpus}; {args.duration:g} s per cell in "
              f"{args.slices} round-robin slices", flush=True)
        rows = []
        for m in models:
            x = zoo.random_inputs(m, batch=1, seed=0)
            x_name, x = next(iter(x.items()))
            x = np.ascontiguousarray(x, np.float32)
            want = ort.InferenceSession(str(onnx_paths[m]), providers=["CPUExecutionProvider"]).run(None, {x_name: x})[0]
            cells = [(server, kind, port, c) for server, kind, port in
                     [("ai-engine", "http-json", http_port), ("ai-engine", "http-binary", http_port),
                      ("ai-engine", "tcp", tcp_port), ("ort+uvicorn", "http-json", peer_port),
                      ("ort+uvicorn", "http-binary", peer_port)]
                     if server in servers and kind in protocols for c in concs]
            slices: dict[tuple, list] = {cell: [] for cell in cells}
            for i in range(max(1, args.slices)):
                for cell in cells:
                    server, kind, port, c = cell
                    slices[cell].append(measure(kind, port, m, x_name, x, c, args.duration / max(1, args.slices),
                                                args.warmup if i == 0 else 0.0))
            for cell in cells:
                server, kind, port, c = cell
                r = summarize(slices[cell])
                ok = r["first"] is not None and np.allclose(r["first"], want, rtol=1e-3, atol=1e-3)
                rows.append((m, server, kind, c, r, ok))
                print(f"{m:9s} {server:12s} {kind:12s} c={c:3d} {r['rps']:8.1f} req/s  p50 {r['p50']:7.2f}  "
                      f"p99 {r['p99']:7.2f}  p999 {r['p999']:7.2f} ms  errors {r['errors']}  "
                      f"{'ok' if ok else 'WRONG ANSWER'}", flush=True)
        print("\n| model | server | protocol | conc. | req/s | p50 ms | p99 ms | p999 ms | errors |")
        print("|---|---|---|---:|---:|---:|---:|---:|---:|")
        for m, server, kind, c, r, ok in rows:
            print(f"| {m} | {server} | {kind} | {c} | {r['rps']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} | "
                  f"{r['p999']:.2f} | {r['errors']}{'' if ok else ' WRONG'} |")
        if args.rates:
            rates = [float(r) for r in args.rates.split(",")]
            print(f"\nOpen loop: {args.duration:g} s per rate, latency from each request's scheduled time, "
                  f"at most 64 connections (a request finding none free is dropped)")
            print("\n| model | server | protocol | offered req/s | answered req/s | p50 ms | p99 ms | dropped | errors |")
            print("|---|---|---|---:|---:|---:|---:|---:|---:|")
            best = {}
            for m in models:
                x = zoo.random_inputs(m, batch=1, seed=0)
                x_name, x = next(iter(x.items()))
                x = np.ascontiguousarray(x, np.float32)
                for server, kind, port in [("ai-engine", "http-binary", http_port), ("ai-engine", "tcp", tcp_port),
                                           ("ort+uvicorn", "http-binary", peer_port)]:
                    if server not in servers or kind not in protocols:
                        continue
                    for rate in rates:
                        r = open_loop(kind, port, m, x_name, x, rate, args.duration)
                        lat = np.asarray(r["lat"]) * 1e3
                        p50, p99 = (float(np.percentile(lat, q)) for q in (50, 99)) if len(lat) else (nan, nan)
                        print(f"| {m} | {server} | {kind} | {rate:g} | {len(lat) / r['elapsed']:.1f} | {p50:.2f} | "
                              f"{p99:.2f} | {r['dropped']} | {r['errors']} |", flush=True)
                        passed = p99 <= args.p99_target_ms and not r["dropped"] and not r["errors"]
                        best.setdefault((m, server, kind), []).append((rate, passed))
            for (m, server, kind), results in sorted(best.items()):
                ok = [rate for rate, passed in results if passed]
                missed = [f"{rate:g}" for rate, passed in results if not passed and ok and rate < max(ok)]
                print(f"highest offered rate with p99 <= {args.p99_target_ms:g} ms: {m} {server} {kind}: "
                      + (f"{max(ok):g} req/s" if ok else "none")
                      + (f" (missed below it at {', '.join(missed)} req/s)" if missed else ""))
        for m in models:
            x = next(iter(zoo.random_inputs(m, batch=1, seed=0).values())).astype(np.float32)
            c = codec_comparison(x)
            print(f"\ncodec {m} input {list(x.shape)}: JSON encode+decode {c['json_ms']:.2f} ms, binary frame "
                  f"{c['binary_ms']:.3f} ms ({c['speedup']:.0f}x)")
    finally:
        stop_processes(procs)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
