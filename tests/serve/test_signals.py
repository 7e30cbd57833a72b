"""Every signal the engine handles, sent to a real server process (the table
in engine/server/server.py's docstring and the README's "Signals" section).
SIGTERM's drain and the forced exit on a second signal are in
test_lifecycle.py."""

from __future__ import annotations

import json
import os
import signal

import numpy as np

from serve_support import wait_for, wait_log


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

