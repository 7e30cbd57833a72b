"""The systemd sandbox of ai-engine.service (issue 16): the rendered unit
scores <= 2.5 in `systemd-analyze security --offline=true`, stays clean in
`systemd-analyze verify`, each service.hardening key relaxes its directive,
and the engine serves under the same restrictions (capability bounding set,
no-new-privs, the system call filter, W^X, address families, /proc subset)
reproduced here by unit_sandbox.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml

from hostspec.loader import load_spec
from hostspec.render import render_tree
from tests.serve.serve_support import stop_process
from tests.sysconfig.test_render_targets import _systemd_root, _verify
from aie_testing import free_port

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
UNIT = "etc/systemd/system/ai-engine.service"
MAX_EXPOSURE = 2.5
RELAXED = {"capability_bounding_set": ["CAP_NET_BIND_SERVICE"], "system_call_filter": [],
           "system_call_architectures": None, "restrict_address_families": [], "memory_deny_write_execute": False,
           "protect_proc": "default", "proc_subset": "all", "private_mounts": False, "remove_ipc": False,
           "umask": "0022"}


def _systemd_analyze(min_version: int = 252) -> str:
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze not installed (apt-get install systemd)")
    version = int(re.search(r"systemd (\d+)", subprocess.run([exe, "--version"], capture_output=True,
                                                              text=True).stdout).group(1))
    if version < min_version:
        pytest.skip(f"systemd {version} here; `security --offline` needs systemd >= {min_version}")
    return exe


def render_unit(tmp_path: Path, hardening: dict | None = None, **service) -> Path:
    specs = []
    if hardening or service:
        overlay = tmp_path / "site.yaml"
        overlay.write_text(yaml.safe_dump({"service": {**service, **({"hardening": hardening} if hardening else {})}}))
        specs = [REPO / "sysconfig" / "spec.yaml", overlay]
    unit = tmp_path / "ai-engine.service"
    unit.write_bytes(render_tree(load_spec(specs or None))[UNIT].content)
    return unit


def exposure(unit: Path) -> float:
    out = subprocess.run([_systemd_analyze(), "security", "--offline=true", "--no-pager", str(unit)],
                         capture_output=True, text=True, timeout=60, cwd=unit.parent)
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", out.stdout)
    assert m, out.stdout + out.stderr
    return float(m.group(1))


def test_default_unit_exposure_is_at_most_2_5(tmp_path):
    score = exposure(render_unit(tmp_path))
    assert score <= MAX_EXPOSURE, f"exposure {score} > {MAX_EXPOSURE}"


def test_each_hardening_key_relaxes_its_directive(tmp_path):
    (tmp_path / "strict").mkdir()
    strict = render_unit(tmp_path / "strict").read_text()
    relaxed_path = render_unit(tmp_path, RELAXED)
    relaxed = relaxed_path.read_text()
    for line in ("CapabilityBoundingSet=\n", "SystemCallFilter=@system-service\n",
                 "SystemCallFilter=~@privileged @resources\n", "SystemCallErrorNumber=EPERM\n",
                 "SystemCallArchitectures=native\n", "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX\n",
                 "MemoryDenyWriteExecute=yes\n", "ProtectProc=invisible\n", "ProcSubset=pid\n",
                 "PrivateMounts=yes\n", "RemoveIPC=yes\n", "UMask=0027\n"):
        assert line in strict, line
        assert line not in relaxed, line
    for line in ("CapabilityBoundingSet=CAP_NET_BIND_SERVICE\n", "AmbientCapabilities=CAP_NET_BIND_SERVICE\n",
                 "MemoryDenyWriteExecute=no\n", "ProtectProc=default\n", "ProcSubset=all\n", "UMask=0022\n"):
        assert line in relaxed, line
    assert "SystemCallFilter" not in relaxed and "RestrictAddressFamilies" not in relaxed
    # The score is real: relaxing them shows.
    assert exposure(relaxed_path) > MAX_EXPOSURE + 1


@pytest.mark.parametrize("case", ["default", "relaxed"])
def test_unit_stays_clean_in_systemd_analyze_verify(case, tmp_path):
    if not shutil.which("systemd-analyze") or not Path("/usr/lib/systemd/system/sysinit.target").exists():
        pytest.skip("systemd-analyze or the stock systemd units are not installed (apt-get install systemd)")
    unit = render_unit(tmp_path, RELAXED if case == "relaxed" else None)
    result = _verify(_systemd_root(tmp_path, unit.read_bytes()))
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr


def test_a_port_below_1024_needs_cap_net_bind_service(tmp_path):
    from hostspec.errors import SpecError

    overlay = tmp_path / "site.yaml"
    overlay.write_text(yaml.safe_dump({"engine": {"http_port": 443}}))
    with pytest.raises(SpecError, match=r"engine.http_port.*CAP_NET_BIND_SERVICE"):
        load_spec([REPO / "sysconfig" / "spec.yaml", overlay])
    overlay.write_text(yaml.safe_dump({"engine": {"http_port": 443},
                                       "service": {"hardening": {"capability_bounding_set": ["CAP_NET_BIND_SERVICE"]}}}))
    load_spec([REPO / "sysconfig" / "spec.yaml", overlay])


# ---- the engine under the sandbox --------------------------------------------------------------------------------
def _sandbox_available() -> str | None:
    if os.geteuid() != 0:
        return "needs root (a mount namespace for /proc, setpriv)"
    if not shutil.which("setpriv"):
        return "setpriv not installed (util-linux)"
    try:
        import ctypes

        ctypes.CDLL("libseccomp.so.2")
    except OSError:
        return "libseccomp.so.2 not installed"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "mount", "-t", "proc", "-o",
                            "subset=pid,hidepid=invisible", "proc", "/proc"], capture_output=True, text=True)
    if probe.returncode:
        return f"cannot mount /proc with subset=pid here: {probe.stderr.strip()}"
    return None


def _sandboxed(unit: Path, *command: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HERE / "unit_sandbox.py"), str(unit), "--", *command], **kwargs)


@pytest.fixture
def sandbox_unit(tmp_path):
    why = _sandbox_available()
    if why:
        pytest.skip(why)
    _systemd_analyze(0)
    return render_unit(tmp_path)


def test_the_sandbox_harness_is_real(sandbox_unit, tmp_path):
    """Under the harness the restrictions bite (so the serving test below proves something)."""
    probe = tmp_path / "probe.py"
    probe.write_text("""if True:
        import json, mmap, os, socket
        def denied(fn):
            try:
                fn()
            except OSError as exc:
                return exc.errno
            return 0
        status = dict(l.split(":\\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\\t" in l)
        print(json.dumps({
            "status": {k: status[k].strip() for k in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp")},
            "netlink": denied(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)),
            "inet6": denied(lambda: socket.socket(socket.AF_INET6).close()),
            "wx": denied(lambda: mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)),
            "setuid": denied(lambda: os.setuid(0)),
            "affinity": denied(lambda: os.sched_setaffinity(0, {0})),
            "meminfo": os.path.exists("/proc/meminfo"),
            "pid1": os.path.exists("/proc/1/status"),
        }))""")
    proc = _sandboxed(sandbox_unit, sys.executable, str(probe), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                      text=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    got = json.loads(out)
    assert got["status"] == {"CapEff": "0000000000000000", "CapPrm": "0000000000000000",
                             "CapBnd": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}
    assert got["netlink"] == got["wx"] == got["setuid"] == got["affinity"] == 1  # EPERM
    assert got["inet6"] == 0 and got["meminfo"] is False



def test_engine_serves_under_the_sandbox(sandbox_unit, tmp_path, zoo):
    """A real .aie model (arena with hugepages asked for and mlock), HTTP and
    binary inference, /health and /metrics, then SIGTERM: exit 0."""
    from engine.client import Client
    from engine.convert import convert_file
    from engine.kernels._lib import library_path

    try:
        lib = library_path()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"kernel library not built ({exc}); run `make kernels`")
    model = tmp_path / "mlp.aie"
    convert_file(zoo("mlp"), model)
    http_port, binary_port = free_port(), free_port()
    config = tmp_path / "engine.yaml"
    config.write_text(yaml.safe_dump({
        "listen": "127.0.0.1", "http_port": http_port, "binary_port": binary_port, "threads": 1,
        "state_dir": str(tmp_path / "state"), "log_dir": str(tmp_path / "log"),
        "arena": {"size": 4 << 20, "hugepages": True, "mlock": True}, "limits": {"drain_delay_s": 0},
        "models": [{"name": "mlp", "path": str(model)}]}))
    env = {**os.environ, "AIE_KERNELS_LIB": str(lib), "PYTHONPATH": str(REPO)}
    env.pop("AIE_SERVE_SESSION_FACTORY", None)
    log = open(tmp_path / "server.out", "wb")
    proc = _sandboxed(sandbox_unit, sys.executable, "-m", "engine.cli", "serve", "--config", str(config),
                      stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "server.out").read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "server.out").read_text()
            time.sleep(0.05)
        status = dict(line.split(":\t", 1) for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                      if ":\t" in line)
        assert status["Seccomp"].strip() == "2" and status["NoNewPrivs"].strip() == "1"
        assert status["CapEff"].strip() == status["CapBnd"].strip() == "0000000000000000"
        x = np.linspace(-1, 1, 784, dtype=np.float32).reshape(1, 784)
        body = json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32",
                                       "data": x.ravel().tolist()}]}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{http_port}/v2/models/mlp/infer", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            got = json.loads(r.read())["outputs"][0]
        with Client("127.0.0.1", binary_port) as c:
            y = c.infer("mlp", {"input": x})["logits"]
        np.testing.assert_allclose(np.array(got["data"], np.float32).reshape(got["shape"]), y, rtol=1e-5, atol=1e-6)
        for path in ("/health", "/metrics"):
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}{path}", timeout=10) as r:
                assert r.status == 200
    finally:
        code = stop_process(proc, 30)
        log.close()
    text = (tmp_path / "server.out").read_text()
    assert code == 0, text
    assert "Traceback" not in text, text
