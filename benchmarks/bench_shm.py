"""Shared memory against HTTP binary for one 224x224 image at batch 1
(issue 15: Triton's system shared-memory extension), beside the model's own
compute time, all in the same run.

    .venv/bin/python benchmarks/bench_shm.py [--model resnet18|mobilenetv2] [--rounds 60] [--threads 1]

One server (`ai-engine serve`, the model alone, one instance, --threads
intra-op threads, batching off) and, in this process, an InferenceSession
on the same .aie with the same threads. Each round takes, in turn:

- compute: session.run on the image (what the model itself costs);
- http binary: the image in the request body (KServe binary tensor
  extension), the logits in the response body;
- shm: the image and the logits in a region registered through
  tritonclient.utils.shared_memory (the image written into it once: a
  producer process would write its frames there), the request and answer
  only JSON naming the region; the logits read from the region.

Both HTTP paths use the same hand-rolled keep-alive client on one socket
(one write, one read: the client's own cost kept small and equal).
Interleaving the three puts every one in the same mix of quiet and busy
moments of a shared machine; besides each path's p50 the table gives the
median over rounds of (path - compute) of the same round. The logits of
both paths are checked against session.run before timing.

Prints a markdown table for docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_serve import free_port, wait_http  # noqa: E402


class KeepAlive:
    """One HTTP/1.1 connection: POST, read the whole answer."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb")

    def post(self, path: str, body: bytes, headers: dict | None = None) -> tuple[int, dict, bytes]:
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
                + "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items()) + "\r\n").encode()
        self.sock.sendall(head + body)
        status = int(self.reader.readline().split()[1])
        hdrs = {}
        while (line := self.reader.readline()) not in (b"\r\n", b""):
            k, _, v = line.decode().partition(":")
            hdrs[k.strip().lower()] = v.strip()
        return status, hdrs, self.reader.read(int(hdrs.get("content-length", 0)))

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def model_file(name: str, out: Path) -> Path:
    from engine.convert import convert_file
    from models import zoo

    src = zoo.ensure(name)
    aie = out / f"{name}.aie"
    convert_file(src, aie)
    return aie


def start_server(aie: Path, name: str, threads: int, tmp: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    config = {"listen": "127.0.0.1", "http_port": port, "binary_port": None, "threads": threads,
              "log_level": "warning", "state_dir": str(tmp / "state"), "log_dir": str(tmp / "log"),
              "limits": {"drain_delay_s": 0},
              "models": [{"name": name, "path": str(aie), "max_batch_size": 1, "instances": 1,
                          "threads": threads}]}
    (tmp / "engine.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--config", str(tmp / "engine.yaml")],
                            stdout=open(tmp / "server.log", "wb"), stderr=subprocess.STDOUT, env=env)
    wait_http(f"http://127.0.0.1:{port}/v2/health/ready", timeout=300)
    return proc, port


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18", choices=["resnet18", "mobilenetv2"])
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import tritonclient.utils.shared_memory as shm

    from engine import InferenceSession

    with tempfile.TemporaryDirectory(prefix="bench-shm-") as d:
        tmp = Path(d)
        aie = model_file(args.model, tmp)
        session = InferenceSession(str(aie), threads=args.threads)
        inp, outp = session.get_inputs()[0].name, session.get_outputs()[0].name
        x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
        want = session.run(None, {inp: x})[0]
        proc, port = start_server(aie, args.model, args.threads, tmp)
        region = shm.create_shared_memory_region("bench", f"/bench-shm-{os.getpid()}", x.nbytes + want.nbytes)
        conn = KeepAlive(port)
        try:
            shm.set_shared_memory_region(region, [x])
            status, _, body = conn.post("/v2/systemsharedmemory/region/bench/register", json.dumps(
                {"key": f"/bench-shm-{os.getpid()}", "offset": 0, "byte_size": x.nbytes + want.nbytes}).encode())
            assert status == 200, body
            path = f"/v2/models/{args.model}/infer"
            head = json.dumps({"inputs": [{"name": inp, "shape": list(x.shape), "datatype": "FP32",
                                           "parameters": {"binary_data_size": x.nbytes}}],
                               "parameters": {"binary_data_output": True}}).encode()
            http_body, http_headers = head + x.tobytes(), {"Inference-Header-Content-Length": str(len(head))}
            shm_body = json.dumps({
                "inputs": [{"name": inp, "shape": list(x.shape), "datatype": "FP32",
                            "parameters": {"shared_memory_region": "bench", "shared_memory_byte_size": x.nbytes}}],
                "outputs": [{"name": outp, "parameters": {"shared_memory_region": "bench",
                                                          "shared_memory_offset": x.nbytes,
                                                          "shared_memory_byte_size": want.nbytes}}]}).encode()

            def compute() -> np.ndarray:
                return session.run(None, {inp: x})[0]

            def http_binary() -> np.ndarray:
                status, hdrs, data = conn.post(path, http_body, http_headers)
                assert status == 200, data
                split = int(hdrs["inference-header-content-length"])
                return np.frombuffer(data, np.float32, offset=split).reshape(want.shape)

            def shared() -> np.ndarray:
                status, _, data = conn.post(path, shm_body)
                assert status == 200, data
                return shm.get_contents_as_numpy(region, np.float32, list(want.shape), offset=x.nbytes).copy()

            paths = {"compute (session.run)": compute, "HTTP binary": http_binary, "shared memory": shared}
            for name, fn in paths.items():
                np.testing.assert_allclose(fn(), want, rtol=1e-4, atol=1e-4, err_msg=name)
            times = {name: [] for name in paths}
            for r in range(args.warmup + args.rounds):
                for name, fn in paths.items():
                    t0 = time.perf_counter()
                    fn()
                    if r >= args.warmup:
                        times[name].append(time.perf_counter() - t0)
        finally:
            conn.close()
            proc.terminate()
            proc.wait(30)
            shm.destroy_shared_memory_region(region)

    base = times["compute (session.run)"]
    load = os.getloadavg()
    print(f"\n{args.model}, 1x3x224x224 FP32 ({x.nbytes} bytes in, {want.nbytes} out), batch 1, "
          f"{args.threads} thread(s), {args.rounds} interleaved rounds; load average {load[0]:.2f}\n")
    print("| path | p50 ms | p90 ms | median over rounds of (path - compute) us |")
    print("|---|---:|---:|---:|")
    for name, t in times.items():
        over = "" if t is base else f"{statistics.median(a - b for a, b in zip(t, base)) * 1e6:.0f}"
        print(f"| {name} | {pct(t, 50) * 1e3:.3f} | {pct(t, 90) * 1e3:.3f} | {over} |")
    http_p50, shm_p50 = pct(times["HTTP binary"], 50), pct(times["shared memory"], 50)
    print(f"\nshared memory p50 {'<' if shm_p50 < http_p50 else '>='} HTTP binary p50 "
          f"({(http_p50 - shm_p50) * 1e6:.0f} us apart); shared memory p50 - compute p50: "
          f"{(shm_p50 - pct(base, 50)) * 1e6:.0f} us")


if __name__ == "__main__":
    main()
