"""A longer fuzzing run against a live server: the properties of
tests/serve/test_hostile_fuzz.py (tests/serve/wire_fuzz.py) with many more
examples, for a fixed time.

    .venv/bin/python benchmarks/fuzz_serve.py --duration 180

Starts `ai-engine serve` with a small MLP on the real kernels (the tests'
kernel_mlp session), then cycles HTTP request heads, KServe JSON documents
and binary frames in rounds of --batch examples each, each round with a new
seed, until --duration seconds have passed. Prints the examples run, the
statuses seen, any failing example (hypothesis shrinks it), the server's
health and RSS at the end, and whether its log holds a crash. Exit status 1
on any failure.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests" / "serve"
sys.path[:0] = [str(REPO), str(TESTS)]

from hypothesis import HealthCheck, given, settings  # noqa: E402

from kernel_mlp import write_mlp  # noqa: E402
from wire_fuzz import (Target, binary_frames, check_binary, check_http, check_kserve, http_requests,  # noqa: E402
                       kserve_bodies)

TARGET = Target("mlp", "x", 16)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tmp: Path) -> tuple[subprocess.Popen, dict, Path]:
    from engine.kernels._lib import library_path

    write_mlp(tmp / "mlp.npz", [16, 32, 4], seed=1)
    cfg = {"listen": "127.0.0.1", "http_port": free_port(), "binary_port": free_port(), "threads": 1,
           "state_dir": str(tmp / "state"), "log_dir": str(tmp / "log"),
           "limits": {"header_timeout_s": 2.0, "idle_timeout_s": 5.0},
           "models": [{"name": TARGET.model, "path": str(tmp / "mlp.npz"), "max_batch_size": 4}]}
    (tmp / "engine.yaml").write_text(json.dumps(cfg))   # JSON is YAML
    env = dict(os.environ, AIE_KERNELS_LIB=str(library_path()), AIE_SERVE_SESSION_FACTORY="kernel_mlp:MLPSession",
               PYTHONPATH=os.pathsep.join([str(TESTS), str(REPO), os.environ.get("PYTHONPATH", "")]))
    log = tmp / "server.log"
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--config", str(tmp / "engine.yaml")],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, cwd=tmp)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{cfg['http_port']}/v2/health/ready", timeout=1):
                return proc, cfg, log
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    raise SystemExit(f"server did not start:\n{log.read_text()}")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=180.0, help="seconds of fuzzing")
    ap.add_argument("--batch", type=int, default=200, help="examples per property per round")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fuzz-serve-") as d:
        proc, cfg, log = start_server(Path(d))
        statuses = {"http": collections.Counter(), "kserve": collections.Counter(),
                    "binary": collections.Counter()}
        counts = collections.Counter()
        failures = []
        rss0 = rss_mb(proc.pid)

        def http_case(request):
            counts["http"] += 1
            statuses["http"].update(check_http(cfg["http_port"], request) or ["none"])

        def kserve_case(doc):
            counts["kserve"] += 1
            statuses["kserve"][check_kserve(cfg["http_port"], TARGET.model, json.dumps(doc).encode())] += 1

        def binary_case(frame):
            counts["binary"] += 1
            statuses["binary"].update([s for _, s in check_binary(cfg["binary_port"], frame)] or ["none"])

        properties = [(http_case, {"request": http_requests(TARGET)}), (kserve_case, {"doc": kserve_bodies(TARGET)}),
                      (binary_case, {"frame": binary_frames(TARGET)})]
        end, rounds = time.monotonic() + args.duration, 0
        try:
            while time.monotonic() < end and not failures:
                for fn, strategies in properties:
                    run = settings(max_examples=args.batch, deadline=None, database=None,
                                   suppress_health_check=list(HealthCheck))(given(**strategies)(fn))
                    try:
                        run()
                    except Exception as exc:  # noqa: BLE001 - reported below, with hypothesis's shrunk example
                        failures.append(f"{fn.__name__}: {type(exc).__name__}: {exc}")
                        break
                rounds += 1
            with urllib.request.urlopen(f"http://127.0.0.1:{cfg['http_port']}/v2/health/live", timeout=5) as r:
                healthy = r.status == 200
        finally:
            rss1 = rss_mb(proc.pid)
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(30)
        crashes = [line for line in log.read_text().splitlines()
                   if '"handler_crashed"' in line or '"event_loop_error"' in line or "Traceback" in line]
        print(f"fuzz_serve: {args.duration:.0f} s, {rounds} rounds, examples: " +
              ", ".join(f"{k} {v}" for k, v in counts.items()))
        for kind, counter in statuses.items():
            print(f"  {kind} answers: " + ", ".join(f"{k}: {v}" for k, v in sorted(counter.items(), key=str)))
        print(f"  server: healthy={healthy}, RSS {rss0:.0f} -> {rss1:.0f} MB, exit {code}, "
              f"crash lines in log: {len(crashes)}")
        for line in crashes[:5]:
            print("   ", line[:300])
        for f in failures:
            print("FAILED", f[:2000])
        return 1 if failures or crashes or not healthy or code != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
