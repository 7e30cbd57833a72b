"""The JSON request log: stderr always, log_dir/engine.log too when log_dir is
a writable directory, rotated by size, re-opened on SIGHUP."""

from __future__ import annotations

import json
import os
import signal

import numpy as np

from engine.server.logs import JsonLogger, RotatingFile, open_log_dir
from serve_support import wait_for, wait_log


def infer_body(x: np.ndarray) -> bytes:
    return json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()


def file_records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_rotating_file_keeps_a_bounded_set_and_loses_no_recent_line(tmp_path):
    log, why = open_log_dir(str(tmp_path), max_bytes=1000)
    assert why is None
    log.keep = 2
    logger = JsonLogger("info", stream=open(os.devnull, "w"), file=log)
    for i in range(100):
        logger.info("request", seq=i, pad="x" * 40)
    logger.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["engine.log", "engine.log.1", "engine.log.2"]
    for name in names:
        assert (tmp_path / name).stat().st_size <= 1000
    seqs = [r["seq"] for name in reversed(names) for r in file_records(tmp_path / name)]
    assert seqs == list(range(100 - len(seqs), 100)) and len(seqs) >= 15  # oldest first, contiguous, newest last


def test_no_log_file_without_a_usable_log_dir(tmp_path):
    assert open_log_dir(str(tmp_path / "absent")) == (None, f"{tmp_path / 'absent'} does not exist")
    (tmp_path / "plain").write_text("")
    assert open_log_dir(str(tmp_path / "plain"))[0] is None
    assert open_log_dir(None)[0] is None
    assert isinstance(open_log_dir(str(tmp_path))[0], RotatingFile)


def test_server_writes_request_log_to_log_dir_and_reopens_on_sighup(serve_factory, mlp_file, tmp_path):
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    server = serve_factory([{"name": "mlp", "path": str(mlp_file)}], log_dir=str(log_dir))
    log_file = log_dir / "engine.log"
    x = np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32)
    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    status, _, headers = server.post("/v2/models/mlp/infer", infer_body(x), {"traceparent": trace})
    assert status == 200
    started = next(r for r in file_records(log_file) if r["event"] == "started")
    assert started["log_file"] == str(log_file)
    line = wait_for(lambda: next((r for r in file_records(log_file) if r["event"] == "request"), None),
                    "the request line in engine.log")
    assert line["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736" and line["status"] == 200
    assert line["model"] == "mlp" and line["batch"] == 2 and line["compute_us"] >= 0
    assert headers["traceparent"].split("-")[1] == line["trace_id"]
    # ... and on stderr too.
    assert any(r.get("event") == "request" and r.get("trace_id") == line["trace_id"] for r in server.logs())
    # An external logrotate moves the file away; SIGHUP makes the server start a new one.
    os.replace(log_file, log_dir / "engine.log.rotated")
    server.signal(signal.SIGHUP)
    wait_log(server, "reloaded")
    assert server.post("/v2/models/mlp/infer", infer_body(x))[0] == 200
    wait_for(lambda: log_file.exists() and any(r["event"] == "request" for r in file_records(log_file)),
             "a request line in the new engine.log")
    assert not any(r["event"] == "request" and r.get("trace_id") != line["trace_id"]
                   for r in file_records(log_dir / "engine.log.rotated"))


def test_server_logs_to_stderr_only_when_log_dir_is_missing(serve_factory, mlp_file, tmp_path):
    server = serve_factory([{"name": "mlp", "path": str(mlp_file)}], log_dir=str(tmp_path / "nowhere"))
    x = np.random.default_rng(4).standard_normal((1, 16)).astype(np.float32)
    assert server.post("/v2/models/mlp/infer", infer_body(x))[0] == 200
    started = next(r for r in server.logs() if r.get("event") == "started")
    assert started["log_file"] is None and "does not exist" in started["log_file_skipped"]
    wait_log(server, "request")
    assert not (tmp_path / "nowhere").exists()
