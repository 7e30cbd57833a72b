"""What HAProxy in front of the engines costs (issue 14): latency of the
same requests sent straight to an engine and through the balancer, in the
same run, blocks alternating with a pause between them.

    .venv/bin/python benchmarks/bench_balancer.py [--blocks 5] [--requests 200] [--protocol http|binary]

One engine (the zoo MLP, one instance, one thread) on 127.0.0.2, HAProxy
(the rendered haproxy.cfg, balancer section defaults) on 127.0.0.1, one
client with a keep-alive connection to each. Reports p50 and p99 of each
path and their difference: the balancer's added latency on loopback (on a
network add one more hop's round trip).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
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
sys.path.insert(0, str(REPO / "sysconfig"))
sys.path.insert(0, str(REPO / "tests" / "serve"))

from serve_support import ports_free_on, wait_for  # noqa: E402


def http_caller(host: str, port: int, x: np.ndarray):
    """One keep-alive connection; each call one KServe v2 JSON request."""
    conn = http.client.HTTPConnection(host, port, timeout=30)
    body = json.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]})

    def call():
        conn.request("POST", "/v2/models/mlp/infer", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        assert r.status == 200, r.status
    return call


def main(argv=None) -> int:
    from engine.client import Client
    from engine.convert import convert_file
    from engine.deploy.haproxy import RuntimeAPI
    from hostspec.loader import load_spec
    from hostspec.render import render_tree
    from models import zoo

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--pause", type=float, default=0.5)
    p.add_argument("--protocol", choices=("http", "binary"), default="http")
    args = p.parse_args(argv)
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not os.path.exists(haproxy):
        print("haproxy is not installed (make sysdeps installs it)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="aie-bench-lb-"))
    model = tmp / "mlp.aie"
    convert_file(zoo.ensure("mlp", tmp), model)
    e_http, e_bin, lb_http, lb_bin = ports_free_on(["127.0.0.1", "127.0.0.2"], 4)
    cfg = tmp / "engine.yaml"
    cfg.write_text(yaml.safe_dump({"listen": "127.0.0.2", "http_port": e_http, "binary_port": e_bin, "threads": 1,
                                   "log_level": "warning", "state_dir": str(tmp / "state"),
                                   "log_dir": str(tmp / "log"), "limits": {"drain_delay_s": 0},
                                   "models": [{"name": "mlp", "path": str(model), "instances": 1}]}))
    spec = tmp / "spec.yaml"
    spec.write_text(json.dumps({"version": 1, "engine": {"listen": "0.0.0.0", "http_port": e_http,
                                                         "binary_port": e_bin},
                                "hosts": [{"name": "lb", "type": "ssh", "address": "127.0.0.1", "role": "balancer"},
                                          {"name": "e1", "type": "ssh", "address": "127.0.0.2"}],
                                "balancer": {"listen": "127.0.0.1", "http_port": lb_http, "binary_port": lb_bin,
                                             "maxconn": 2000, "runtime_socket": str(tmp / "admin.sock")}}))
    (tmp / "haproxy.cfg").write_bytes(
        render_tree(load_spec([str(spec)]), role="balancer")["etc/haproxy/haproxy.cfg"].content)
    engine = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--config", str(cfg)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
    lb = subprocess.Popen([haproxy, "-db", "-f", str(tmp / "haproxy.cfg")], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        api = RuntimeAPI(str(tmp / "admin.sock"))

        def up():
            try:
                return api.wait_status("e1", "UP", 0)
            except Exception:  # noqa: BLE001 - the socket appears once haproxy has started
                return False
        wait_for(up, "HAProxy reporting the engine UP", 60)
        x = np.random.default_rng(0).standard_normal((1, 784)).astype(np.float32)
        if args.protocol == "http":
            paths = {"direct": http_caller("127.0.0.2", e_http, x), "haproxy": http_caller("127.0.0.1", lb_http, x)}
        else:
            cd, cl = Client("127.0.0.2", e_bin), Client("127.0.0.1", lb_bin)
            paths = {"direct": lambda: cd.infer("mlp", {"input": x}), "haproxy": lambda: cl.infer("mlp", {"input": x})}
        times = {k: [] for k in paths}
        for fn in paths.values():
            for _ in range(20):
                fn()
        for _ in range(args.blocks):
            for name, fn in paths.items():
                time.sleep(args.pause)
                for _ in range(args.requests):
                    t = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - t)
        q = {k: (statistics.median(v) * 1e3, float(np.percentile(v, 99)) * 1e3) for k, v in times.items()}
        print(f"load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}; {args.protocol}, zoo MLP batch 1, "
              f"{args.blocks} blocks x {args.requests} requests per path")
        for name, (p50, p99) in q.items():
            print(f"{name:<8} p50 {p50:.3f} ms  p99 {p99:.3f} ms")
        print(f"added by HAProxy: p50 {q['haproxy'][0] - q['direct'][0]:+.3f} ms, "
              f"p99 {q['haproxy'][1] - q['direct'][1]:+.3f} ms")
    finally:
        for proc in (engine, lb):
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
