"""The deployer's build side without hosts: step outputs by role (a second
deploy after a skipped kernels step), missing model sources are errors (never
a zoo stand-in), hosts are checked before any build step, bundles are pruned,
and the Makefile/tasks surface (phony targets with recipes, no cryptic short
flags)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from engine.deploy import commands
from engine.deploy.pipeline import Options, Pipeline, StepState
from engine.deploy.report import Reporter
from tests.deploy.conftest import REPO, recording_reporter

DEFAULT_SPEC = REPO / "sysconfig" / "spec.yaml"


def _overlay(path: Path, data: dict) -> list[Path]:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return [DEFAULT_SPEC, path]


def _pipeline(tmp_path: Path, specs: list[Path] | None = None, **kw) -> Pipeline:
    return Pipeline(Options(specs=specs or [DEFAULT_SPEC], build_dir=tmp_path / "build", **kw), Reporter(quiet=True))


def test_a_skipped_step_returns_its_outputs_by_role(tmp_path):
    """state.json is written with sorted keys: a skipped step used to hand back
    [libaie_kernels.a, libaie_kernels.so] and libs[0], the archive, went to
    the converter as the shared library."""
    pipeline = _pipeline(tmp_path)
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libaie_kernels.so").write_bytes(b"\x7fELF shared")
    (lib / "libaie_kernels.a").write_bytes(b"!<arch>\n")
    runs = []

    def build() -> dict[str, Path]:
        runs.append(1)
        return {"so": lib / "libaie_kernels.so", "a": lib / "libaie_kernels.a"}

    first = pipeline._step("build-kernels", "inputs-1", build)
    again = _pipeline(tmp_path)._step("build-kernels", "inputs-1", build)  # a second deploy: state read back
    assert len(runs) == 1
    assert again == first and again["so"].name == "libaie_kernels.so" and again["a"].name == "libaie_kernels.a"
    (lib / "libaie_kernels.so").write_bytes(b"\x7fELF changed")  # an output altered: the step runs again
    _pipeline(tmp_path)._step("build-kernels", "inputs-1", build)
    assert len(runs) == 2


def test_a_state_entry_of_the_old_layout_runs_the_step_again(tmp_path):
    """state.json from before outputs had roles: a list of paths in sorted order."""
    lib = tmp_path / "lib"
    lib.mkdir()
    so, a = lib / "libaie_kernels.so", lib / "libaie_kernels.a"
    so.write_bytes(b"so")
    a.write_bytes(b"a")
    state = tmp_path / "build" / "deploy" / "state.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"steps": {"build-kernels": {"inputs": "x", "outputs": {str(a): "0", str(so): "1"}}}}))
    assert StepState(state).cached("build-kernels", "x") is None


def test_a_missing_model_source_is_an_error_not_a_zoo_model(tmp_path, kernels_lib, capsys):
    """A misspelt path named like a zoo model used to generate the synthetic
    model there (creating the directories). Now: one line, nothing created."""
    missing_dir = tmp_path / "no" / "such" / "dir"
    specs = _overlay(tmp_path / "site.yaml", {"engine": {"models": [
        {"name": "digits", "source": str(missing_dir / "digits.onnx")}]}})
    rc = commands.bundle(Options(specs=specs, build_dir=tmp_path / "build", lib_dir=kernels_lib))
    err = capsys.readouterr().err
    assert rc == 1
    assert err.strip() == (f"error: {missing_dir / 'digits.onnx'}: model 'digits': source file not found (fix "
                           "engine.models[digits].source in the spec; for a zoo model run `invoke zoo --name "
                           "digits` (writes build/models/))"), err
    assert not (tmp_path / "no").exists()
    assert not list((tmp_path / "build").rglob("digits*"))


def test_invoke_convert_with_a_missing_source_is_one_line(tmp_path):
    missing = tmp_path / "absent" / "mlp.onnx"
    specs = _overlay(tmp_path / "site.yaml", {"engine": {"models": [{"name": "mlp", "source": str(missing)}]}})
    proc = subprocess.run([str(Path(sys.executable).with_name("invoke")), "convert", "--out", str(tmp_path / "out"),
                           *[a for s in specs for a in ("--spec", str(s))]], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(f"convert: {missing}: model 'mlp': source file not found")
    assert "Traceback" not in proc.stderr
    assert not missing.parent.exists()


def test_unknown_host_and_no_hosts_fail_before_any_build_step(tmp_path):
    reporter, buffer = recording_reporter()
    t0 = time.monotonic()
    opts = Options(specs=[DEFAULT_SPEC], hosts=["nosuch"], build_dir=tmp_path / "build")
    from engine.deploy import DeployError

    with pytest.raises(DeployError, match=r"--host: unknown host 'nosuch' \(the spec has: local\)"):
        Pipeline(opts, reporter).deploy()
    specs = _overlay(tmp_path / "site.yaml", {"hosts": []})
    with pytest.raises(DeployError, match="the spec lists no hosts"):
        Pipeline(Options(specs=specs, build_dir=tmp_path / "build"), reporter).deploy()
    assert buffer.getvalue() == ""  # no step line: neither render nor build-kernels ran
    assert not (tmp_path / "build" / "deploy" / "state.json").exists()
    assert time.monotonic() - t0 < 30


def test_bundles_are_pruned_but_never_the_running_or_previous_release(tmp_path):
    pipeline = _pipeline(tmp_path)
    out = tmp_path / "bundles"
    out.mkdir()
    arch = os.uname().machine
    versions = ["v1", "v2", "v3", "v4", "v5", "v6"]
    for i, v in enumerate(versions):  # v1 oldest
        path = out / f"ai-engine-{v}-{arch}.tar.gz"
        path.write_bytes(b"bundle")
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    pipeline.state.data["hosts"] = {"local": {"active": "v1", "previous": "v2"}}
    pipeline.settings.keep_bundles = 2

    class Built:
        version = "v6"
    pipeline._bundle = Built()
    removed = sorted(p.name for p in pipeline.prune_bundles(out))
    assert removed == [f"ai-engine-{v}-{arch}.tar.gz" for v in ("v3", "v4")]
    assert sorted(p.name for p in out.iterdir()) == [f"ai-engine-{v}-{arch}.tar.gz" for v in ("v1", "v2", "v5", "v6")]


def test_keep_bundles_is_a_spec_key():
    spec = Pipeline(Options(specs=[DEFAULT_SPEC]), Reporter(quiet=True))
    assert spec.settings.keep_bundles == 3


def test_every_phony_make_target_has_a_recipe():
    text = (REPO / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", text, re.M).group(1).split()
    missing = [t for t in phony if not re.search(rf"^{re.escape(t)}:", text, re.M)]
    assert not missing, f"phony targets without a rule: {missing}"
    dry = subprocess.run(["make", "-n", "-C", str(REPO), "deploy"], capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    # The zoo model the default spec serves is built explicitly, before the deploy.
    lines = [ln for ln in dry.stdout.splitlines() if "invoke" in ln]
    assert lines[-2:] == [".venv/bin/invoke zoo --name digits", ".venv/bin/invoke deploy"], dry.stdout


def test_tasks_have_no_cryptic_short_flags():
    invoke_bin = str(Path(sys.executable).with_name("invoke"))
    for name in ("provision", "deploy", "bench", "logs", "rollback"):
        proc = subprocess.run([invoke_bin, "--help", name], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        options = proc.stdout.split("Options:", 1)[1]
        assert not re.search(r"^\s+-[a-zA-Z],", options, re.M), options
    provision = subprocess.run([invoke_bin, "--help", "provision"], cwd=REPO, capture_output=True, text=True,
                               timeout=60).stdout
    assert "--rollback" in provision and "-o" not in provision.split()


def test_build_kernels_piped_has_no_ansi_codes():
    proc = subprocess.run([str(Path(sys.executable).with_name("invoke")), "build-kernels", "--jobs", "2"], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "\x1b[" not in proc.stdout + proc.stderr
    assert proc.stdout.startswith("make -C kernels -j2")


def test_failure_lines_are_this_runs_errors_once_and_whole_words():
    from engine.deploy.service import failure_lines

    err = '{"ts":1.5,"level":"error","event":"startup_failed","error":"cannot bind 127.0.0.1:8000: address in use"}'
    console = ['{"ts":1.1,"level":"info","event":"loading","model":"digits"}', err, err,
               "OSError: [Errno 98] Address already in use " + "word " * 200]
    lines = failure_lines(console)
    assert lines[0] == err and lines.count(err) == 1
    assert lines[1].startswith("OSError: [Errno 98] Address already in use word")
    assert lines[1].endswith("word …") and len(lines[1]) <= 402
    assert failure_lines(["plain start-up line"]) == ["plain start-up line"]
    assert failure_lines([]) == []


def test_piped_output_is_not_wrapped_or_coloured(capsys):
    from engine.deploy.targets import HostResult

    reporter = Reporter()  # stdout is captured here: not a terminal
    url = "http://127.0.0.1:8000/v2/models/" + "a-long-model-name-" * 8 + "/infer"
    reporter.note(f"local: engine serving at [bold]{url}[/]")
    reason = "check-host refused the start: hugepages: 0 2048 kB pages reserved (fix: " + "echo 1024 > x; " * 12 + ")"
    reporter.table([HostResult("local", "failed", reason=reason)])
    out = capsys.readouterr().out
    assert f"local: engine serving at {url}\n" in out
    assert reason in out and "\x1b[" not in out
