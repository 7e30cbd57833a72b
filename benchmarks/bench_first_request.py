"""First request after start-up against the steady state (issue 17: warm
plans). A model's declared shape (here the deployer's smoke reference) is
planned before the server reports ready; this measures what the first
request of that shape still costs over the steady median.

    .venv/bin/python benchmarks/bench_first_request.py [--rounds 5] [--steady 30] [--protocol http|binary]

Each round starts a fresh server (the zoo MLP, one instance, one thread),
waits for /v2/health/ready, then sends one request and --steady more, each
on a new connection (so the first request pays no connection cost the
others do not), and reports first / median(steady) twice: as the client
timed it, and as the server did (its per-model success time in
/v2/models/mlp/stats, read before and after each request: the client's own
first-call costs excluded). The summary is the median ratio over the
rounds, with --cold (no smoke reference: the first request builds its plan)
for scale.

--idle-control N: after the steady requests, N more, each after an idle
pause of --idle-s (default 0.2 s, about the time from the warm-up to the
first request), server-timed. What a request pays after the instance sat
idle (cold caches, a sleeping runner thread) is not a first-request cost
that warming could remove: first / steady is read against after-idle /
steady.
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
import urllib.request
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_serve import free_port, wait_http  # noqa: E402
from engine import wire  # noqa: E402


def http_infer(port: int, x: np.ndarray) -> None:
    body = json.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/mlp/infer", data=body,
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200
        r.read()


def binary_infer(port: int, x: np.ndarray) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(b"".join(wire.encode_infer(1, "mlp", {"input": x})))
        f = s.makefile("rb")
        op, length, _ = wire.parse_header(f.read(16), 1 << 30)
        f.read(length)
        assert op != wire.OP_ERROR


def server_ns(port: int) -> int:
    """The server's own total time over its successful requests of the model
    (arrival of the request to its answer written): the client's first-call
    costs (its imports, its first connection) are not in it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/mlp/stats", timeout=60) as r:
        return json.loads(r.read())["model_stats"][0]["inference_stats"]["success"]["ns"]


def one_round(tmp: Path, model: Path, protocol: str, steady: int, x: np.ndarray, idle: int = 0,
              idle_s: float = 0.2) -> tuple[float, float, float, float, float | None]:
    """(first, steady median) as the client saw them, then as the server
    timed them, then the server-timed median after an idle pause (None without idle)."""
    http_port, binary_port = free_port(), free_port()
    config = {"listen": "127.0.0.1", "http_port": http_port, "binary_port": binary_port, "threads": 1,
              "log_level": "warning", "state_dir": str(tmp / "state"), "log_dir": str(tmp / "log"),
              "models": [{"name": "mlp", "path": str(model), "instances": 1}], "limits": {"drain_delay_s": 0}}
    cfg = tmp / "engine.yaml"
    cfg.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--config", str(cfg)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
    try:
        wait_http(f"http://127.0.0.1:{http_port}/v2/health/ready")
        call = (lambda: http_infer(http_port, x)) if protocol == "http" else (lambda: binary_infer(binary_port, x))
        times, served = [], []
        for _ in range(steady + 1):
            before = server_ns(http_port)
            t = time.perf_counter()
            call()
            times.append(time.perf_counter() - t)
            served.append((server_ns(http_port) - before) / 1e9)
        after_idle = []
        for _ in range(idle):
            time.sleep(idle_s)  # the pause is what is measured, not a synchronisation
            before = server_ns(http_port)
            call()
            after_idle.append((server_ns(http_port) - before) / 1e9)
        return (times[0], statistics.median(times[1:]), served[0], statistics.median(served[1:]),
                statistics.median(after_idle) if after_idle else None)
    finally:
        proc.terminate()
        proc.wait(30)


def main(argv=None) -> int:
    from engine.convert import convert_file
    from engine.deploy.reference import write_reference
    from models import zoo

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steady", type=int, default=30)
    p.add_argument("--protocol", choices=("http", "binary"), default="http")
    p.add_argument("--cold", action="store_true", help="also rounds without the smoke reference")
    p.add_argument("--idle-control", type=int, default=0, metavar="N",
                   help="N requests after an idle pause each, as a control (server-timed)")
    p.add_argument("--idle-s", type=float, default=0.2, help="the control's idle pause (s)")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="aie-first-"))
    src = zoo.ensure("mlp", tmp)
    warm = tmp / "warm" / "mlp.aie"
    warm.parent.mkdir()
    convert_file(src, warm)
    write_reference("mlp", warm, src, warm.with_suffix(".smoke.json"), shapes={"input": [1, 784]})
    cold = tmp / "cold" / "mlp.aie"
    cold.parent.mkdir()
    convert_file(src, cold)
    x = np.random.default_rng(0).standard_normal((1, 784)).astype(np.float32)
    print(f"load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}; protocol {args.protocol}; "
          f"{args.rounds} rounds, steady median of {args.steady}")
    for label, model in (("warm", warm),) + ((("cold", cold),) if args.cold else ()):
        ratios, server_ratios, idle_ratios = [], [], []
        for r in range(args.rounds):
            d = tmp / f"{label}{r}"
            d.mkdir()
            first, steady, s_first, s_steady, s_idle = one_round(d, model, args.protocol, args.steady, x,
                                                                 args.idle_control, args.idle_s)
            ratios.append(first / steady)
            server_ratios.append(s_first / s_steady)
            control = ""
            if s_idle is not None:
                idle_ratios.append(s_idle / s_steady)
                control = f"; after {args.idle_s} s idle {s_idle * 1e3:.3f} ms, ratio {s_idle / s_steady:.2f}"
            print(f"{label} round {r}: client first {first * 1e3:.3f} ms, steady median {steady * 1e3:.3f} ms, "
                  f"ratio {first / steady:.2f}; server first {s_first * 1e3:.3f} ms, steady median "
                  f"{s_steady * 1e3:.3f} ms, ratio {s_first / s_steady:.2f}{control}", flush=True)
        print(f"{label}: median first/steady ratio over {args.rounds} rounds: client {statistics.median(ratios):.2f}, "
              f"server {statistics.median(server_ratios):.2f} [{min(server_ratios):.2f}..{max(server_ratios):.2f}]"
              + (f"; server after idle / steady {statistics.median(idle_ratios):.2f} "
                 f"[{min(idle_ratios):.2f}..{max(idle_ratios):.2f}]" if idle_ratios else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
