"""Real server processes on loopback for the serving tests.

`serve_factory(models=..., **engine_keys)` writes an engine.yaml into the
test's tmp dir, starts `ai-engine serve` on free ports and waits until it is
ready; the process is stopped (SIGTERM, then SIGKILL after a bound) at the
end of the test.

Models: the zoo MLP (784-512-512-10) converted to .aie and served by the real
engine.InferenceSession (`zoo_mlp`); where a test needs to know when a batch
runs and decide when it ends (deadlines, priorities, full queues, drain), a
seeded .npz MLP on the same kernels (kernel_mlp.py, selected through
AIE_SERVE_SESSION_FACTORY) whose runs wait at a RunGate the test opens.

Synchronisation: tests wait for observable state with wait_for (a log line,
a queue depth on /metrics, a run started, a pid's threads), never for a
guessed time."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from aie_testing import free_port  # noqa: E402,F401 - re-exported: the serving tests import it from here
from kernel_mlp import write_mlp  # noqa: E402


POLL_S = 0.01  # how often wait_for looks again: a poll interval, not a guess at how long something takes


def wait_for(predicate, what: str, timeout: float = 30.0):
    """predicate()'s first truthy value, polled until `timeout`; AssertionError
    naming `what` otherwise. The one way these tests wait for a server to
    reach a state (a log line, a queue depth, a run started): never a sleep
    that hopes the state was reached."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(POLL_S)


def stop_process(proc: subprocess.Popen, timeout: float = 15.0) -> int:
    """SIGTERM, then proc's exit status; SIGKILL (and its status, -9) when it
    has not exited within `timeout`, so a hung stop fails the caller's
    exit-status assertion instead of leaving a process behind."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class RunGate:
    """The test's end of kernel_mlp's run hook: `started()` counts the runs
    that began; each `release()` lets that many runs compute. Pass it to a
    server factory (`gate=`); closing it (the fixture does) opens the gate
    for good."""

    def __init__(self, tmp: Path):
        self.events = tmp / "runs.log"
        self.events.touch()
        self.fifo = tmp / "gate.fifo"
        os.mkfifo(self.fifo)
        # O_RDWR: the FIFO has a writer from now on, so the server's open never blocks.
        self._fd = os.open(self.fifo, os.O_RDWR)

    def env(self) -> dict:
        return {"AIE_TEST_RUN_EVENTS": str(self.events), "AIE_TEST_RUN_GATE": str(self.fifo)}

    def started(self) -> int:
        return self.events.read_text().count("start\n")

    def wait_started(self, count: int, timeout: float = 30.0) -> None:
        wait_for(lambda: self.started() >= count, f"{count} model runs to start (saw {self.started()})", timeout)

    def release(self, runs: int = 1) -> None:
        os.write(self._fd, b"x" * runs)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def metric(server, name: str, **labels) -> float | None:
    """One sample of the server's /metrics, None when absent."""
    samples = parse_prometheus(server.get("/metrics")[1].decode())
    return samples.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))))


def wait_queue_depth(server, model: str, depth: int, timeout: float = 30.0) -> None:
    wait_for(lambda: metric(server, "aie_queue_depth", model=model) == depth,
             f"queue depth of {model!r} to reach {depth}", timeout)


def wait_log(server, event: str, count: int = 1, timeout: float = 30.0, **fields) -> dict:
    """The count-th log record of `event` (with these field values) the server wrote."""
    def found():
        hits = [r for r in server.logs() if r.get("event") == event
                and all(r.get(k) == v for k, v in fields.items())]
        return hits[count - 1] if len(hits) >= count else None
    return wait_for(found, f"log event {event!r} #{count} {fields or ''}", timeout)


def startup_error(tmp_path: Path, engine: dict, npz_backend: bool = True) -> str:
    """Start `ai-engine serve` on this engine.yaml and expect it to refuse:
    exit 1 with one `ai-engine serve: error:` line and no traceback. That line.
    npz_backend=False: the models are real ones (.aie, .onnx), not .npz MLPs."""
    cfg = tmp_path / "engine.yaml"
    cfg.write_text(yaml.safe_dump(engine))
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "serve", "--config", str(cfg)],
                          env=_kernel_env(npz_backend),
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    err = proc.stderr.strip().splitlines()[-1]
    assert err.startswith("ai-engine serve: error:"), proc.stderr
    return err


def ports_free_on(addresses, count: int) -> list[int]:
    """`count` ports free on every one of `addresses` (loopback aliases that
    stand for hosts sharing port numbers, as a fleet's engines do)."""
    found: list[int] = []
    while len(found) < count:
        port = free_port()
        try:
            for a in addresses:
                with socket.socket() as s:
                    s.bind((a, port))
        except OSError:
            continue
        if port not in found:
            found.append(port)
    return found


def _kernel_env(npz_backend: bool = True) -> dict:
    from engine.kernels._lib import library_path

    try:
        lib = library_path()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"kernel library not built ({exc}); run `make kernels`")
    env = dict(os.environ)
    env["AIE_KERNELS_LIB"] = str(lib)
    env.pop("AIE_SERVE_SESSION_FACTORY", None)
    if npz_backend:
        env["AIE_SERVE_SESSION_FACTORY"] = "kernel_mlp:MLPSession"
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(REPO), env.get("PYTHONPATH", "")])
    return env


class ZooMLP:
    """The zoo MLP as served: tensor names and widths, and a direct session."""
    input, features, output, classes = "input", 784, "logits", 10

    def __init__(self, path: Path, v2: Path):
        self.path = path
        self.v2 = v2      # same graph, other weights: proves a reload picked up the new file

    def session(self, path: Path | None = None):
        from engine import InferenceSession

        return InferenceSession(str(path or self.path), threads=1)

    def inputs(self, rng, batch: int):
        import numpy as np

        return rng.standard_normal((batch, self.features)).astype(np.float32)


@pytest.fixture(scope="session")
def zoo_mlp(tmp_path_factory) -> ZooMLP:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from engine.convert import convert_file
    from models import zoo

    d = tmp_path_factory.mktemp("zoo")
    src = zoo.ensure("mlp", d)
    convert_file(src, d / "mlp.aie")
    model = onnx.load(str(src))
    last = next(n for n in model.graph.node if ZooMLP.output in n.output)
    bias = next(i for i in model.graph.initializer if i.name == last.input[2])
    bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias) + np.float32(1.0), bias.name))
    onnx.save(model, str(d / "mlp_v2.onnx"))
    convert_file(d / "mlp_v2.onnx", d / "mlp_v2.aie")
    return ZooMLP(d / "mlp.aie", d / "mlp_v2.aie")


class ServerProcess:
    def __init__(self, tmp: Path, config: dict, env: dict):
        self.tmp = tmp
        self.config = config
        self.config_path = tmp / "engine.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.http_port = config["http_port"]
        self.binary_port = config.get("binary_port")
        self.url = f"{config.get('listen', '127.0.0.1')}:{self.http_port}"
        self.log_path = tmp / "server.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--config", str(self.config_path)],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=tmp)
        self.wait_ready()

    def wait_ready(self, timeout: float = 30.0) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_path.read_text()}")
            try:
                return self.answers_ready()
            except OSError:
                return False
        try:
            wait_for(ready, "the server to report ready", timeout)
        except AssertionError:
            raise RuntimeError(f"server not ready in {timeout} s:\n{self.log_path.read_text()}") from None

    def answers_ready(self) -> bool:
        """One readiness probe (OSError while nothing listens yet)."""
        try:
            with urllib.request.urlopen(f"http://{self.url}/v2/health/ready", timeout=1) as r:
                return r.status == 200
        except urllib.error.HTTPError as e:
            return e.code == 401  # health closed by auth: it answers, the test checks readiness with a token

    def get(self, path: str, headers=None):
        req = urllib.request.Request(f"http://{self.url}{path}", headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), dict(e.headers)

    def post(self, path: str, body: bytes, headers=None):
        req = urllib.request.Request(f"http://{self.url}{path}", data=body, headers=headers or {}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), dict(e.headers)

    def logs(self) -> list[dict]:
        out = []
        for line in self.log_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"raw": line})
        return out

    def update_config(self, **changes) -> None:
        self.config.update(changes)
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(self.config))
        os.replace(tmp, self.config_path)

    def signal(self, sig) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 15.0) -> int:
        code = stop_process(self.proc, timeout)
        self._log.close()
        return code


@pytest.fixture
def mlp_file(tmp_path) -> Path:
    path = tmp_path / "mlp.npz"
    write_mlp(path, [16, 32, 4], seed=1)
    return path


def _factory(tmp: Path):
    servers: list[ServerProcess] = []

    def start(models, binary=True, gate: RunGate | None = None, **engine):
        env = _kernel_env(npz_backend=any(str(m["path"]).endswith(".npz") for m in models))
        if gate is not None:
            env.update(gate.env())
        d = tmp / f"server{len(servers)}"
        d.mkdir()
        # threads: 1 -- the test machine's two cores are shared by every test
        # process, and one intra-op thread keeps timings (deadline tests) stable.
        config = {"listen": "127.0.0.1", "http_port": free_port(), "threads": 1,
                  "binary_port": free_port() if binary else None, "log_level": "info",
                  "state_dir": str(d / "state"), "log_dir": str(d / "log"), "models": models}
        config.update(engine)
        # No load balancer watches these servers: a stop need not wait out the
        # drain delay unless the test sets one (test_drain.py).
        config["limits"] = {"drain_delay_s": 0, **config.get("limits", {})}
        server = ServerProcess(d, config, env)
        servers.append(server)
        return server

    return start, servers


@pytest.fixture
def serve_factory(tmp_path):
    """Start servers for one test (stopped at its end)."""
    start, servers = _factory(tmp_path)
    yield start
    for s in servers:
        s.stop()


@pytest.fixture
def run_gate(tmp_path, serve_factory):
    """A RunGate for one test; closed (every run let through) at its end,
    before serve_factory stops the servers, so none is held up draining."""
    gate = RunGate(tmp_path)
    yield gate
    gate.close()


@pytest.fixture(scope="module")
def module_serve_factory(tmp_path_factory):
    """Start servers shared by a module's tests (tests that only read)."""
    start, servers = _factory(tmp_path_factory.mktemp("serve"))
    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def module_mlp_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("model") / "mlp.npz"
    write_mlp(path, [16, 32, 4], seed=1)
    return path


def slow_model(path: Path, seconds: float, max_repeat: int = 100_000) -> Path:
    """An MLP whose batch-1 run takes about `seconds` here and now (the
    kernels' speed varies by ISA and load, so it is measured, not assumed)."""
    from kernel_mlp import MLPSession
    import numpy as np

    write_mlp(path, [256, 512, 256], seed=7)
    session = MLPSession(str(path))
    x = np.random.default_rng(0).standard_normal((1, 256)).astype(np.float32)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        session.run(None, {"x": x})
        times.append(time.perf_counter() - t0)
    repeat = max(1, min(max_repeat, round(seconds / sorted(times)[2])))
    write_mlp(path, [256, 512, 256], seed=7, repeat=repeat)
    return path


def parse_prometheus(text: str) -> dict[tuple[str, tuple], float]:
    """Strict-enough parser of the text format: every sample line must be
    `name{labels} value`, every family declared with # TYPE before use."""
    import re

    samples, declared = {}, set()
    line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
    label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            declared.add(line.split()[2])
            continue
        if line.startswith("#") or not line:
            continue
        m = line_re.match(line)
        assert m, f"bad exposition line: {line!r}"
        name = m.group(1)
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in declared or family in declared, f"{name} used before # TYPE"
        labels = tuple(sorted(label_re.findall(m.group(3) or "")))
        samples[(name, labels)] = float(m.group(4))
    return samples
