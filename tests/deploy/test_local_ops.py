"""A local-root deploy with engine.auth on, and the operations around it:
the deployer's minted token (HS256) and a given one (RS256, --token-file),
bench's health check, error threshold and report keeping, one writer per log
file, a busy port found before the healthy engine is stopped, and what a
one-sysctl release costs on disk."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import jwt
import pytest
import yaml

from engine.deploy import DeployError, commands, supervise
from engine.deploy.pipeline import Options, Pipeline
from engine.deploy.report import Reporter
from tests.deploy.conftest import REPO
from aie_testing import free_port

SECRET = b"deploy-test-secret-0123456789abcdef"



def _site(d: Path, root: Path, port: int, auth: dict, **engine) -> list[Path]:
    site = {
        "engine": {"listen": "127.0.0.1", "http_port": port, "binary_port": free_port(), "auth": auth,
                   "models": [{"name": "digits", "source": str(REPO / "build/models/digits.onnx"),
                               "sample": str(REPO / "build/models/digits.sample.npy"),
                               "max_batch_size": 16, "instances": 1}],
                   # no balancer in front: the default 5 s drain delay would only slow every stop
                   "limits": {"drain_delay_s": 0}, **engine},
        "hosts": [{"name": "box", "type": "local", "root": str(root)}],
        "deploy": {"health_timeout_s": 60, "keep_releases": 5},
    }
    path = d / f"site-{len(list(d.glob('site-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(site, sort_keys=False))
    return [REPO / "sysconfig" / "spec.yaml", path]


HS256 = {"enabled": True, "algorithms": ["HS256"], "secret_file": "/etc/ai-engine/jwt.secret"}


@pytest.fixture(scope="module")
def box(tmp_path_factory, digits_model):
    d = tmp_path_factory.mktemp("authdeploy")
    root = d / "root"
    (root / "etc/ai-engine").mkdir(parents=True)
    (root / "etc/ai-engine/jwt.secret").write_bytes(SECRET + b"\n")
    port = free_port()
    try:
        yield d, root, port
    finally:
        supervise.stop(root, timeout_s=10)


def _post(port: int, token: str | None, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/digits/infer", data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json",
                                                         **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _smoke_body(root: Path) -> dict:
    ref = json.loads((root / "opt/ai-engine/current/models/digits.smoke.json").read_text())
    return {"inputs": [{k: t[k] for k in ("name", "shape", "datatype", "data")} for t in ref["inputs"]]}


def test_deploy_with_auth_mints_its_own_token(box, deploy_build, kernels_lib, capsys):
    d, root, port = box
    specs = _site(d, root, port, HS256)
    assert commands.deploy(Options(specs=specs, build_dir=deploy_build, lib_dir=kernels_lib)) == 0, \
        capsys.readouterr()
    out = capsys.readouterr().out
    assert "deployed" in out and "sample: digit 7 → predicted 7" in out, out
    # The engine really demands a token: none is refused, a valid one (made
    # with PyJWT, as any client would) is served.
    assert _post(port, None, _smoke_body(root))[0] == 401
    token = jwt.encode({"scope": "infer", "exp": int(time.time()) + 60}, SECRET, algorithm="HS256")
    status, answer = _post(port, token, _smoke_body(root))
    assert status == 200 and answer["outputs"][0]["shape"] == [10, 10]
    # The unit's Documentation= names a file the release ships.
    unit = (root / "etc/systemd/system/ai-engine.service").read_text()
    doc = next(line for line in unit.splitlines() if line.startswith("Documentation="))
    assert doc == "Documentation=file:/opt/ai-engine/current/README.md"
    assert (root / "opt/ai-engine/current/README.md").read_text() == (REPO / "README.md").read_text()


def test_each_log_file_has_one_writer(box):
    _, root, port = box
    pid = supervise.running_pid(root)
    assert pid is not None
    for _ in range(6):  # six request lines at least, whatever came before
        assert _post(port, None, {"inputs": []})[0] == 401
    log_dir = root / "var/log/ai-engine"
    fds = [_target(f) for f in Path(f"/proc/{pid}/fd").iterdir()]  # sockets come and go meanwhile
    assert fds.count(str(log_dir / "engine.log")) == 1, fds           # the engine's own file
    assert str(log_dir / "engine.console.log") in fds                 # stdout/stderr go elsewhere
    lines = (log_dir / "engine.log").read_text().splitlines()
    assert lines and len(set(lines)) == len(lines)  # timestamps are in µs: a doubled line is an identical line
    invoke = [str(Path(sys.executable).with_name("invoke")), "logs", "--spec", str(REPO / "sysconfig/spec.yaml"),
              "--spec", str(sorted(root.parent.glob("site-*.yaml"))[0])]
    five = subprocess.run([*invoke, "--lines", "5"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert five.returncode == 0, five.stderr
    # Exactly the five newest events, no header (nothing else talks to this engine meanwhile).
    assert five.stdout.splitlines() == (log_dir / "engine.log").read_text().splitlines()[-5:]
    assert all(json.loads(line)["event"] for line in five.stdout.splitlines())
    none = subprocess.run([*invoke, "--lines", "0"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert none.returncode == 0 and none.stdout == "", none.stdout


def _target(fd: Path) -> str | None:
    try:
        return os.readlink(fd)
    except FileNotFoundError:
        return None


def _bench(specs, out_dir, **kw):
    args = {"rate": 20, "warmup_s": 0.2, "steady_s": 1.0, "spike_s": 0.2, "workers": 4, "model": None,
            "out_dir": out_dir, **kw}
    return commands.bench(Options(specs=specs), **args)


def test_bench_checks_health_counts_errors_and_keeps_the_good_report(box, tmp_path, capsys):
    d, root, port = box
    specs = sorted(d.glob("site-*.yaml"))[:1]
    specs = [REPO / "sysconfig" / "spec.yaml", *specs]
    assert _bench(specs, tmp_path) == 0, capsys.readouterr()   # with the minted token
    good = tmp_path / "bench-box.md"
    good_text = good.read_text()
    assert "| steady |" in good_text and "took s" in good_text
    capsys.readouterr()

    # Every request answered HTTP 400 (the host's reference input damaged):
    # over --max-error-rate, exit 1, and the report goes beside the good one.
    ref = root / "opt/ai-engine/current/models/digits.smoke.json"
    original = ref.read_bytes()
    damaged = json.loads(original)
    damaged["inputs"][0]["shape"] = [10, 1, 28, 27]
    try:
        ref.write_text(json.dumps(damaged))
        assert _bench(specs, tmp_path) == 1
    finally:
        ref.write_bytes(original)
    captured = capsys.readouterr()
    assert "error: 100% of the requests failed (over --max-error-rate 0.1)" in captured.err, captured.err
    assert good.read_text() == good_text
    assert "This run failed" in (tmp_path / "bench-box-failed.md").read_text()

    # A stopped engine: one clear error before any load, no report at all.
    (tmp_path / "bench-box-failed.md").unlink()
    supervise.stop(root, timeout_s=10)
    t0 = time.monotonic()
    assert _bench(specs, tmp_path, steady_s=30.0) == 1
    assert time.monotonic() - t0 < 20  # not the 30 s load
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: box: no engine answers at http://127.0.0.1:{port}: [Errno 111] Connection refused "
                   "(deploy it or start it (invoke deploy; invoke status shows the state))"], err
    assert good.read_text() == good_text and not (tmp_path / "bench-box-failed.md").exists()
    assert _bench(specs, tmp_path, model="nosuch") == 1
    assert capsys.readouterr().err.strip() == "error: --model: unknown model 'nosuch' (the spec serves: digits)"


def test_bench_achieved_rate_is_over_the_real_elapsed_time():
    from engine.deploy import bench as load

    plan = [load.Phase("steady", 2.0, 10.0)]
    result = load.BenchResult(url="-", model="m", plan=plan)
    # 20 requests scheduled over 2 s, the server answering one every 0.2 s:
    # the last answer comes at 4 s, so 5 req/s, not 10.
    result.samples = [load.Sample(i * 0.1, (i + 1) * 0.2 - i * 0.1, load.OK, "steady") for i in range(20)]
    [row] = load.summary(result)
    assert row["elapsed_s"] == pytest.approx(4.0) and row["achieved_rps"] == pytest.approx(5.0)
    assert load.ms(float("nan")) == "-"


def test_redeploy_after_a_stop_and_a_busy_port_stops_nothing(box, deploy_build, kernels_lib, capsys):
    d, root, port = box
    base = [REPO / "sysconfig" / "spec.yaml", sorted(d.glob("site-*.yaml"))[0]]
    opts = Options(specs=base, build_dir=deploy_build, lib_dir=kernels_lib)
    assert commands.deploy(opts) == 0, capsys.readouterr()   # the engine the bench test stopped starts again
    pid, active = supervise.running_pid(root), os.readlink(root / "opt/ai-engine/current")
    assert pid is not None
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        busy = squatter.getsockname()[1]
        specs = _site(d, root, busy, HS256)
        results = Pipeline(Options(specs=specs, build_dir=deploy_build, lib_dir=kernels_lib),
                           Reporter(quiet=True)).deploy()
    [r] = results
    assert r.status == "failed"
    assert r.reason.startswith(f"127.0.0.1:{busy}: port {busy} is already in use by another process"), r.reason
    assert "nothing was changed" in r.reason
    assert supervise.running_pid(root) == pid  # never stopped
    assert os.readlink(root / "opt/ai-engine/current") == active


def test_rs256_needs_a_given_token_and_uses_it(box, deploy_build, kernels_lib, tmp_path, capsys):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    d, root, port = box
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (root / "etc/ai-engine/jwt.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    specs = _site(d, root, port, {"enabled": True, "algorithms": ["RS256"],
                                  "public_key_file": "/etc/ai-engine/jwt.pub"})
    with pytest.raises(DeployError, match="accepts RS256 without an HMAC secret_file: the deployer cannot sign"):
        Pipeline(Options(specs=specs, build_dir=deploy_build, lib_dir=kernels_lib), Reporter(quiet=True)).deploy()
    token = jwt.encode({"scope": "infer", "exp": int(time.time()) + 600}, key, algorithm="RS256")
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    invoke = str(Path(sys.executable).with_name("invoke"))
    spec_args = [a for s in specs for a in ("--spec", str(s))]
    # Through the task, as a user would: --token-file; the prebuilt kernels via the
    # fixture's build keep this from rebuilding them.
    proc = subprocess.run([invoke, "deploy", *spec_args, "--token-file", str(token_file)], cwd=REPO,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "AIE_KERNELS_LIB": str(kernels_lib / "libaie_kernels.so")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sample: digit 7 → predicted 7" in proc.stdout
    assert token not in proc.stdout + proc.stderr
    assert _post(port, None, _smoke_body(root))[0] == 401 and _post(port, token, _smoke_body(root))[0] == 200


def test_a_one_sysctl_release_shares_the_previous_ones_files(box, deploy_build, kernels_lib, capsys):
    d, root, port = box
    specs = _site(d, root, port, HS256)
    opts = Options(specs=specs, build_dir=deploy_build, lib_dir=kernels_lib)
    assert commands.deploy(opts) == 0, capsys.readouterr()
    base = os.readlink(root / "opt/ai-engine/current").split("/")[-1]
    spec = yaml.safe_load(specs[1].read_text())
    spec["host"] = {"sysctl": {"vm.swappiness": 5}}
    specs[1].write_text(yaml.safe_dump(spec))
    assert commands.deploy(opts) == 0, capsys.readouterr()
    new = os.readlink(root / "opt/ai-engine/current").split("/")[-1]
    assert new != base
    releases = root / "opt/ai-engine/releases"
    # du counts a hard-linked file once: what the new release adds on disk.
    sizes = subprocess.run(["du", "-s", "-B1", str(releases / base), str(releases / new)], capture_output=True,
                           text=True, check=True).stdout.split()
    base_bytes, new_bytes = int(sizes[0]), int(sizes[2])
    print(f"release {base}: {base_bytes / 1e6:.1f} MB; one-sysctl release {new} adds {new_bytes / 1e6:.2f} MB")
    assert new_bytes < base_bytes * 0.05, (base_bytes, new_bytes)
    assert (root / "etc/sysctl.d").is_dir()
    assert "vm.swappiness = 5" in "".join(p.read_text() for p in (root / "etc/sysctl.d").iterdir())


def test_a_failed_start_reports_its_own_error_lines_once(box, deploy_build, kernels_lib, tmp_path):
    """A release whose model the engine cannot load: the reason quotes what
    this start printed (its error, once, whole), not older log lines."""
    import dataclasses

    from engine.deploy.bundle import build_bundle

    d, root, port = box
    specs = _site(d, root, port, HS256)
    pipeline = Pipeline(Options(specs=specs, build_dir=deploy_build, lib_dir=kernels_lib), Reporter(quiet=True))
    assert all(r.ok for r in pipeline.deploy())
    good = os.readlink(root / "opt/ai-engine/current").split("/")[-1]
    inputs, _ = pipeline.bundle_inputs()
    aie, smoke = inputs.models["digits"]
    bad_aie = tmp_path / "digits.aie"
    bad_aie.write_bytes(b"\0" * 16 + aie.read_bytes()[16:])  # the header: unloadable
    bad = build_bundle(dataclasses.replace(inputs, models={"digits": (bad_aie, smoke)}), tmp_path, version="broken")
    [target] = pipeline.targets()
    result = target.install(bad, lambda host, msg: None)
    assert result.status == "rolled-back", result.reason
    assert result.reason.count(" — engine said: ") == 1, result.reason
    said = result.reason.split(" — engine said: ", 1)[1].split("; rolled back to ", 1)[0]
    pieces = said.split(" | ")
    assert len(pieces) == len(set(pieces)) and all(len(p) <= 402 for p in pieces), pieces
    assert any("digits" in p for p in pieces), pieces
    assert result.reason.endswith(f"; rolled back to {good}, which serves again"), result.reason
