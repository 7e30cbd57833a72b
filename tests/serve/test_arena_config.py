"""engine.arena's keys drive the running engine: plan arenas from hugepages
(and the fallback to 4 KiB pages shown on /health and /metrics), mlock with a
start-up error when the kernel would refuse it, and arena.size bounding what
plan arenas hold. Hugepage tests reserve pages (root) and restore the pool."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import resource
import subprocess
import sys

import numpy as np
import pytest
import yaml

from aie_testing import read_pool, reserved_hugepages
from engine.client import Client
from serve_support import _kernel_env, free_port, metric

MIB = 1 << 20
PR_CAPBSET_DROP, CAP_IPC_LOCK = 24, 14  # <linux/prctl.h>, <linux/capability.h>


def _infer_status(server, batch: int) -> tuple[int, dict]:
    body = json.dumps({"inputs": [{"name": "input", "shape": [batch, 784], "datatype": "FP32",
                                   "data": [0.0] * (batch * 784)}]}).encode()
    status, data, _ = server.post("/v2/models/mlp/infer", body)
    return status, json.loads(data)


def test_hugepage_backing_and_the_fallback_are_on_health_and_metrics(serve_factory, zoo_mlp):
    from engine.arena import Arena

    with reserved_hugepages(4) as pool:  # 8 MiB: the first plan arena fits, then the test takes the rest
        server = serve_factory([{"name": "mlp", "path": str(zoo_mlp.path), "max_batch_size": 1024,
                                 "instances": 1}], arena={"size": 64 * MIB, "hugepages": True})
        x = np.zeros((1024, 784), np.float32)
        with Client("127.0.0.1", server.binary_port) as c:
            c.infer("mlp", {"input": x})
            hugepage_bytes = metric(server, "aie_arena_backing_bytes", backing="hugepage")
            assert hugepage_bytes >= 2 * MIB, server.get("/metrics")[1].decode()
            assert metric(server, "aie_arena_hugepage_fallbacks_total", reason="no_free_hugepages") == 0

            # Run the pool dry on purpose; the next shape's plan arena must fall back, and say so.
            free = read_pool(pool, "free_hugepages") - read_pool(pool, "resv_hugepages")
            holder = Arena(free * 2 * MIB, hugepages=True, prefault=False, name="holder") if free > 0 else None
            c.infer("mlp", {"input": x[:1000]})
        assert metric(server, "aie_arena_hugepage_fallbacks_total", reason="no_free_hugepages") == 1
        assert metric(server, "aie_arena_backing_bytes", backing="hugepage") == hugepage_bytes
        four_k = metric(server, "aie_arena_backing_bytes", backing="4k")
        assert four_k >= 2 * MIB
        assert metric(server, "aie_arena_limit_bytes") == 64 * MIB
        arena = json.loads(server.get("/health")[1])["arena"]
        assert arena["hugepage_fallbacks"]["no_free_hugepages"] == 1
        assert arena["backing_bytes"] == {"hugepage": hugepage_bytes, "4k": four_k}
        assert arena["plan_arena_bytes"] >= hugepage_bytes + four_k and arena["plan_arena_limit"] == 64 * MIB
        assert server.stop() == 0  # the server's pages go back to the pool before it shrinks
        if holder is not None:
            holder.close()
        del holder
        gc.collect()


def test_arena_size_fails_the_request_that_would_pass_it_not_the_server(serve_factory, zoo_mlp):
    limit = 3 * MIB
    server = serve_factory([{"name": "mlp", "path": str(zoo_mlp.path), "max_batch_size": 1024, "instances": 1}],
                           arena={"size": limit, "hugepages": False})
    assert _infer_status(server, 1)[0] == 200
    status, resp = _infer_status(server, 1024)
    assert status == 500, resp
    assert "model 'mlp', input [1024, 784]: a plan arena of " in resp["error"], resp
    assert f"over engine.arena.size = {limit} bytes" in resp["error"] and "raise engine.arena.size" in resp["error"]
    assert _infer_status(server, 1)[0] == 200  # the others are served as before
    assert metric(server, "aie_arena_limit_bytes") == limit


def _serve_once(tmp_path, engine: dict, preexec=None) -> subprocess.CompletedProcess:
    cfg = tmp_path / "engine.yaml"
    cfg.write_text(yaml.safe_dump({"listen": "127.0.0.1", "http_port": free_port(), "binary_port": free_port(),
                                   "threads": 1, **engine}))
    return subprocess.run([sys.executable, "-m", "engine.cli", "serve", "--config", str(cfg)],
                          env=_kernel_env(npz_backend=False), capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, preexec_fn=preexec)


def test_a_model_planned_past_arena_size_does_not_start(tmp_path, zoo_mlp):
    proc = _serve_once(tmp_path, {"arena": {"size": 1024},
                                  "models": [{"name": "mlp", "path": str(zoo_mlp.path)}]})
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr.strip().splitlines()[-1]
    assert err.startswith("ai-engine serve: error: model 'mlp': ") and "Traceback" not in proc.stderr, err
    assert "model 'mlp', input [1, 784] (planned at conversion): its plan arena takes " in err, err
    assert "more than engine.arena.size = 1024 bytes" in err, err


def _low_memlock_without_cap_ipc_lock() -> None:
    """In the child, before exec: a 64 KiB locked-memory limit, and (as root)
    CAP_IPC_LOCK out of the bounding set, so the exec'd engine lacks it."""
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 << 10, 64 << 10))
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK)")


def test_mlock_the_kernel_would_refuse_is_a_one_line_startup_error(tmp_path, zoo_mlp):
    engine = {"arena": {"size": 64 * MIB, "mlock": True}, "models": [{"name": "mlp", "path": str(zoo_mlp.path)}]}
    proc = _serve_once(tmp_path, engine, preexec=_low_memlock_without_cap_ipc_lock)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"ai-engine serve: error: engine.arena.mlock: the kernel refuses to lock "
                               f"engine.arena.size = {64 * MIB} bytes: "), lines[0]
    assert "RLIMIT_MEMLOCK is 65536 bytes" in lines[0] and "set service.limit_memlock >= engine.arena.size" in lines[0]


def test_mlock_the_kernel_allows_starts_and_serves(serve_factory, zoo_mlp):
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    if os.geteuid() != 0 and soft != resource.RLIM_INFINITY and soft < 64 * MIB:
        pytest.skip(f"RLIMIT_MEMLOCK is {soft} bytes and no root: this engine may not lock 64 MiB")
    server = serve_factory([{"name": "mlp", "path": str(zoo_mlp.path), "instances": 1}],
                           arena={"size": 64 * MIB, "mlock": True, "hugepages": False})
    assert _infer_status(server, 4)[0] == 200
