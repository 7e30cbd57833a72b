"""A local-root deploy end to end, as `make deploy` does it: build every step,
install into a directory, start the supervised engine, verify, print the URL
and a real prediction; then redeploy (nothing restarted), status, logs and
stop through the invoke tasks themselves."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.deploy import commands, install, service, supervise
from engine.deploy.pipeline import Options
from tests.deploy.conftest import REPO, assert_runtime_only, write_site
from aie_testing import free_port



@pytest.fixture(scope="module")
def local_site(tmp_path_factory, digits_model):
    d = tmp_path_factory.mktemp("localdeploy")
    root = d / "root"
    site = write_site(d / "site.yaml", [{"name": "box", "type": "local", "root": str(root)}],
                      listen="127.0.0.1", http_port=free_port())
    try:
        yield [REPO / "sysconfig" / "spec.yaml", site], root
    finally:
        supervise.stop(root, timeout_s=10)


def _invoke(specs: list[Path], *args: str) -> subprocess.CompletedProcess:
    spec_args = [a for s in specs for a in ("--spec", str(s))]
    return subprocess.run([str(Path(sys.executable).with_name("invoke")), *args, *spec_args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def _bundle_version(build: Path) -> str:
    return json.loads((build / "deploy" / "state.json").read_text())["bundle"]["version"]


def test_local_root_deploy_end_to_end(local_site, deploy_build, kernels_lib, digits_model, capsys):
    specs, root = local_site
    opts = Options(specs=specs, build_dir=deploy_build, lib_dir=kernels_lib)
    assert commands.deploy(opts) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "deployed" in out
    assert "sample: digit 7 → predicted 7" in out, out
    pid = supervise.running_pid(root)
    assert pid is not None
    current = root / "opt/ai-engine/current"
    assert current.is_symlink() and (current / "venv/bin/ai-engine").exists()
    # Config went through provisioning (backup sets are its fingerprint), and
    # the engine reads the model from the active release.
    assert list((root / "var/lib/ai-engine/provision/backups").iterdir())
    engine_yaml = (root / "etc/ai-engine/engine.yaml").read_text()
    assert "path: /opt/ai-engine/current/models/digits.aie" in engine_yaml
    assert (current / "models/digits.aie").is_file()
    _host_venv_is_runtime_only(current / "venv", digits_model)

    # Same inputs: every build step skipped, the engine left alone. (Other
    # work in a shared checkout may edit engine sources meanwhile; then the
    # redeploy rightly ships a new release, and the next one must be the no-op.)
    for _ in range(3):
        version = _bundle_version(deploy_build)
        assert commands.deploy(opts) == 0
        out = capsys.readouterr().out
        if _bundle_version(deploy_build) == version:
            break
        pid = supervise.running_pid(root)
    assert out.count("unchanged, skipped") >= 4, out  # convert, wheels x2, bundle
    assert "│ box  │" in out and "unchanged" in out.split("│ box  │", 1)[1].split("\n", 1)[0], out
    assert supervise.running_pid(root) == pid

    status = _invoke(specs, "status")
    assert status.returncode == 0, status.stderr
    assert "ready" in status.stdout and str(pid) in status.stdout

    logs = _invoke(specs, "logs", "--lines", "3")
    assert logs.returncode == 0, logs.stderr
    assert '"event"' in logs.stdout



def _host_venv_is_runtime_only(venv: Path, onnx_model: Path) -> None:
    """The release venv that just served the smoke inference has no build-machine
    package; the commands that need one say so in one line instead of a traceback."""
    assert_runtime_only(venv)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    ran = subprocess.run([str(venv / "bin" / "ai-engine"), "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert ran.returncode == 0 and "serve" in ran.stdout, ran.stderr  # every command's module imports without onnx
    ran = subprocess.run([str(venv / "bin" / "ai-engine"), "convert", str(onnx_model), "-o", os.devnull],
                         capture_output=True, text=True, env=env, timeout=60)
    assert (ran.returncode, ran.stderr) == (1, "ai-engine convert: error: this command needs the Python package "
                                               "'onnx', which is not installed here (a host installs only what "
                                               "serving needs; on a build machine: pip install 'ai-engine[build]')\n"), \
        ran.stderr
    code = ("import sys\nfrom engine import InferenceSession\nfrom engine.errors import ConversionError\n"
            "try:\n    InferenceSession(sys.argv[1])\nexcept ConversionError as exc:\n    print(exc)")
    ran = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", code, str(onnx_model)], capture_output=True,
                         text=True, timeout=60)
    assert ran.stdout.startswith("reading digits.onnx (an ONNX model) needs the Python package 'onnx'"), \
        ran.stdout + ran.stderr


def test_bench_three_phases_against_the_deployed_engine(local_site, tmp_path, capsys):
    specs, root = local_site
    assert supervise.running_pid(root) is not None, "the end-to-end test leaves the engine running"
    rc = commands.bench(Options(specs=specs), rate=40, warmup_s=1, steady_s=2, spike_s=1, workers=8, model=None,
                        out_dir=tmp_path)
    assert rc == 0, capsys.readouterr()
    report = (tmp_path / "bench-box.md").read_text()
    assert report.startswith("<!-- generated by `invoke bench")
    table = _report_table(report)
    assert [r["phase"] for r in table] == ["warm-up", "steady", "spike"]
    assert [int(r["sent"]) for r in table] == [20, 80, 60]  # rate x seconds: 50%, 100%, 150% of 40/s
    assert [int(r["errors"]) for r in table][:2] == [0, 0]
    assert [int(r["mismatches"]) for r in table] == [0, 0, 0]  # every answer checked against its reference
    assert "10 distinct request(s)" in report  # the ten digits samples, in turn
    for name in ("latency", "throughput", "queue"):
        png = tmp_path / f"bench-box-{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"({png.name})" in report


def _report_table(report: str) -> list[dict]:
    """The report's first table (the phases; the per-layer tables follow it)."""
    block = "| " + report.split("\n| ", 1)[1].split("\n\n", 1)[0]
    lines = [line for line in block.splitlines() if line.startswith("| ")]   # not the |---| row
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[1:]]


def test_bench_counts_wrong_answers_apart_from_errors(local_site, tmp_path, capsys):
    """Against the real engine: one sample's expected output altered (every
    answer for it is then a mismatch) and another's input malformed (HTTP
    400: an error, not a mismatch); then the same through `invoke bench`'s
    code with the host's own reference file damaged: exit status 1."""
    from engine.deploy import bench as load

    specs, root = local_site
    assert supervise.running_pid(root) is not None
    ref_file = root / "opt/ai-engine/current/models/digits.smoke.json"
    reference = json.loads(ref_file.read_text())
    requests = load.reference_requests(reference)
    assert len(requests) == 10
    wrong = requests[3].expected[0]
    requests[3] = dataclasses.replace(requests[3], expected=[{**wrong, "data": [v + 0.5 for v in wrong["data"]]}])
    requests[5] = dataclasses.replace(requests[5], body=requests[5].body.replace(b'"shape": [1, 1, 28, 28]',
                                                                                  b'"shape": [1, 1, 28, 27]'))
    plan = [load.Phase("steady", 2.0, 20.0)]  # 40 requests: each sample row 4 times
    result = load.run_load(f"http://127.0.0.1:{_port(specs)}", "digits", plan, requests=requests, workers=4)
    [row] = load.summary(result)
    assert (row["sent"], row["ok"], row["mismatches"], row["errors"]) == (40, 32, 4, 4), row
    assert result.examples[load.MISMATCH][0].startswith("sample row 3 (label 3): output 'probabilities'[")
    assert result.examples[load.ERROR][0].startswith("sample row 5 (label 5): HTTP 400")
    report = load.write_report(result, tmp_path, "box").read_text()
    assert _report_table(report)[0]["mismatches"] == "4" and _report_table(report)[0]["errors"] == "4"
    assert "Mismatches (first few):\n\n- sample row 3 (label 3): output 'probabilities'" in report

    original = ref_file.read_bytes()
    damaged = dict(reference, outputs=[{**reference["outputs"][0],
                                        "data": [1.0 - v for v in reference["outputs"][0]["data"]]}])
    try:
        ref_file.write_text(json.dumps(damaged))
        rc = commands.bench(Options(specs=specs), rate=10, warmup_s=0.2, steady_s=0.5, spike_s=0.2, workers=2,
                            model=None, out_dir=tmp_path / "cli")
    finally:
        ref_file.write_bytes(original)
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "wrong answer: sample row" in out
    # A failed run's report goes beside the last good one, never over it.
    assert not (tmp_path / "cli" / "bench-box.md").exists()
    assert all(int(r["ok"]) == 0 for r in _report_table((tmp_path / "cli" / "bench-box-failed.md").read_text()))


def _port(specs: list[Path]) -> int:
    return yaml.safe_load(specs[-1].read_text())["engine"]["http_port"]


def _fake_sys(path: Path, *, pages: int, thp: str) -> Path:
    """A /sys tree check-host reads through AIE_SYS."""
    hp = path / "kernel/mm/hugepages/hugepages-2048kB"
    hp.mkdir(parents=True)
    for name, value in (("nr_hugepages", pages), ("free_hugepages", pages), ("resv_hugepages", 0)):
        (hp / name).write_text(f"{value}\n")
    thp_dir = path / "kernel/mm/transparent_hugepage"
    thp_dir.mkdir(parents=True)
    modes = {"enabled": ["always", "madvise", "never"], "defrag": ["always", "defer", "madvise", "never"]}
    for name, options in modes.items():
        (thp_dir / name).write_text(" ".join(f"[{o}]" if o == thp else o for o in options) + "\n")
    return path


def test_check_host_policy():
    assert service.check_host_enforced(Path("/"), "auto")
    assert not service.check_host_enforced(Path("/srv/root"), "auto")
    assert service.check_host_enforced(Path("/srv/root"), "enforce")
    assert not service.check_host_enforced(Path("/"), "warn")


def test_check_host_before_a_supervised_start(local_site, tmp_path, monkeypatch):
    """The rendered ROOT/opt/ai-engine/libexec/check-host runs before the
    engine starts. Under a non-/ root (auto) its findings are warnings and
    the engine starts; enforced, it refuses the start with its findings;
    on a host that satisfies it, the enforced start goes ahead."""
    specs, root = local_site
    release = root / "opt/ai-engine/current"
    version = os.readlink(release).split("/")[-1]
    monkeypatch.setenv("AIE_SYS", str(_fake_sys(tmp_path / "bad", pages=0, thp="always")))
    settings = install.Settings(health_timeout_s=40, stop_timeout_s=10)

    supervise.stop(root, timeout_s=10)
    out = install.install(root, root / "opt/ai-engine/releases" / version, settings)
    assert out.status == "restarted", out.reason
    assert supervise.running_pid(root) == out.pid
    assert out.warnings[0].startswith("check-host (warning only, ROOT is not /): hugepages: 0 2048 kB pages "
                                      "reserved, the engine needs"), out.warnings
    assert any("THP enabled: always, spec wants never (fix: echo never > " in w for w in out.warnings), out.warnings

    supervise.stop(root, timeout_s=10)
    enforce = dataclasses.replace(settings, check_host="enforce")
    out = install.install(root, root / "opt/ai-engine/releases" / version, enforce)
    assert out.status == "failed"
    assert "check-host refused the start: hugepages: 0 2048 kB pages reserved" in out.reason, out.reason
    assert supervise.running_pid(root) is None  # never started

    monkeypatch.setenv("AIE_SYS", str(_fake_sys(tmp_path / "good", pages=4096, thp="never")))
    out = install.install(root, root / "opt/ai-engine/releases" / version, enforce)
    assert out.status == "restarted" and not out.warnings, (out.reason, out.warnings)
    assert "check-host: ok" in out.steps


def test_stop_through_invoke(local_site):
    specs, root = local_site
    pid = supervise.running_pid(root)
    assert pid is not None
    stop = _invoke(specs, "stop")
    assert stop.returncode == 0, stop.stderr
    assert "stopped" in stop.stdout
    assert supervise.running_pid(root) is None and supervise.exited(pid)


def test_bad_host_name_is_one_line(local_site):
    specs, _ = local_site
    res = _invoke(specs, "status", "--host", "nosuch")
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1] == "error: --host: unknown host 'nosuch' (the spec has: box)"
    assert "Traceback" not in res.stderr


def test_state_file_records_steps(deploy_build):
    state = json.loads((deploy_build / "deploy" / "state.json").read_text())
    assert {"convert digits", "dependency wheels", "engine wheel"} <= set(state["steps"])
    assert state["bundle"]["version"]
