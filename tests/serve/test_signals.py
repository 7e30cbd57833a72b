"""Every signal the engine handles, sent to a real server process (the table
in engine/server/server.py's docstring and the README's "Signals" section),
and `ai-engine serve` on a port that is taken. SIGTERM's drain and the
forced exit on a second signal are in test_lifecycle.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest
import yaml

from serve_support import _kernel_env, free_port, wait_for, wait_log


def infer_body(x: np.ndarray) -> bytes:
    return json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()


X = np.full((1, 16), 0.5, np.float32)


def test_sigusr2_reopens_the_log_file_and_reloads_nothing(serve_factory, mlp_file, tmp_path):
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    server = serve_factory([{"name": "m", "path": str(mlp_file)}], log_dir=str(log_dir))
    log_file = log_dir / "engine.log"
    pid = server.proc.pid
    os.replace(log_file, log_dir / "engine.log.1")  # what logrotate does before its postrotate kill
    server.signal(signal.SIGUSR2)
    reopened = wait_log(server, "log_reopened")
    assert reopened["signal"] == "SIGUSR2" and reopened["log_file"] == str(log_file)
    assert server.post("/v2/models/m/infer", infer_body(X))[0] == 200
    wait_for(lambda: log_file.exists() and '"event":"request"' in log_file.read_text(),
             "the request line in the new engine.log")
    assert '"event":"log_reopened"' in log_file.read_text()
    assert '"event":"request"' not in (log_dir / "engine.log.1").read_text()
    events = [r.get("event") for r in server.logs()]
    assert "reloaded" not in events and "shutdown_requested" not in events  # nothing else happened
    assert server.proc.poll() is None and server.proc.pid == pid
    assert server.stop() == 0


def test_sighup_reloads_and_keeps_serving(serve_factory, mlp_file):
    server = serve_factory([{"name": "m", "path": str(mlp_file)}])
    server.signal(signal.SIGHUP)
    assert wait_log(server, "reloaded")["failed"] == []
    assert server.post("/v2/models/m/infer", infer_body(X))[0] == 200
    assert server.stop() == 0


def test_sigint_shuts_down_gracefully_like_sigterm(serve_factory, mlp_file):
    server = serve_factory([{"name": "m", "path": str(mlp_file)}])
    assert server.post("/v2/models/m/infer", infer_body(X))[0] == 200
    server.signal(signal.SIGINT)
    assert server.proc.wait(30) == 0
    assert wait_log(server, "shutdown_requested")["signal"] == "SIGINT"
    assert wait_log(server, "stopped")["unanswered"] == 0


def test_sigpipe_is_ignored(serve_factory, mlp_file):
    server = serve_factory([{"name": "m", "path": str(mlp_file)}])
    server.signal(signal.SIGPIPE)
    # A pending signal is delivered when one of the server's threads next
    # returns from the kernel -- before it can answer anything: a request
    # answered now was answered by a process that took SIGPIPE and lived.
    assert server.post("/v2/models/m/infer", infer_body(X))[0] == 200
    assert server.proc.poll() is None
    assert server.stop() == 0


@pytest.mark.parametrize("busy", ["http_port", "binary_port", "grpc_port"])
def test_a_busy_port_is_one_line_and_exit_98(tmp_path, mlp_file, busy):
    ports = {"http_port": free_port(), "binary_port": free_port(), "grpc_port": free_port()}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports[busy]))
        taken.listen()
        cfg = tmp_path / "engine.yaml"
        cfg.write_text(yaml.safe_dump({**ports, "listen": "127.0.0.1", "threads": 1,
                                       "models": [{"name": "m", "path": str(mlp_file)}]}))
        proc = subprocess.run([sys.executable, "-m", "engine.cli", "serve", "--config", str(cfg)],
                              env=_kernel_env(), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 98, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"ai-engine serve: error: cannot listen on 127.0.0.1:{ports[busy]}: address already in use "
        f"(is another engine running? set engine.{busy})"), proc.stderr
    assert "Traceback" not in proc.stderr
