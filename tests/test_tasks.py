"""tasks.py: every task parsed the way `invoke` parses a command line, then
run with invoke's MockContext. Tasks that shell out are checked for the
exact commands (MockContext answers only the commands it is given, so an
unexpected one fails); tasks that call one library function are checked for
the arguments that function gets (the function itself is tested where it
lives) and for the exit code its result becomes; bad input is fed to the
real functions where they refuse it before doing any work. No builds, no
network: the whole file runs in about a second."""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import pytest
from invoke import Exit, MockContext, Result
from invoke.parser import Parser

import tasks

ROOT = Path(tasks.__file__).resolve().parent


def invoke_tasks(argv: list[str], run: dict | None = None) -> MockContext:
    """Parse argv as `invoke ARGV` would and run each task it names; the
    context answers exactly the commands in `run` (command -> Result)."""
    ctx = MockContext(run=run if run is not None else {})
    for parsed in Parser(contexts=tasks.ns.to_contexts()).parse_argv(argv):
        tasks.ns[parsed.name](ctx, **parsed.as_kwargs)
    return ctx


class Recorder:
    """Stands in for the one library function a task calls: records its
    arguments, returns `rc`."""

    def __init__(self, rc: int = 0):
        self.calls: list[tuple[tuple, dict]] = []
        self.rc = rc

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.rc

    @property
    def args(self) -> tuple:
        (args, _kwargs), = self.calls
        return args

    @property
    def kwargs(self) -> dict:
        (_args, kwargs), = self.calls
        return kwargs


def record(monkeypatch, target: str, rc: int = 0) -> Recorder:
    recorder = Recorder(rc)
    monkeypatch.setattr(target, recorder)
    return recorder


def test_every_option_of_every_task_has_help():
    for name, task in tasks.ns.tasks.items():
        params = [p for p in inspect.signature(task.body).parameters if p != "c"]
        documented = {k.replace("-", "_") for k in task.help}
        assert set(params) <= documented, f"task {name}: options without help=: {sorted(set(params) - documented)}"


def test_every_task_is_in_the_collection():
    defined = {name for name, obj in vars(tasks).items() if isinstance(obj, tasks.invoke.Task)}
    assert {t.body.__name__ for t in tasks.ns.tasks.values()} == defined


# -- tasks that run commands ------------------------------------------------

PYTEST = f"{sys.executable} -m pytest "
STUBS = f"{sys.executable} -m engine.server.grpc_stubs"   # the gRPC stubs, generated before anything needs them
CORES = len(os.sched_getaffinity(0))   # compile jobs: the cores this process may use


def test_test_runs_c_tests_plain_and_sanitized_then_pytest():
    cmds = [STUBS, f"make -C kernels -j{CORES} test", f"make -C kernels -j{CORES} SANITIZE=1 test", PYTEST + "-k kernels -x"]
    ctx = invoke_tasks(["test", "--pytest-args", "-k kernels -x"], run={c: Result() for c in cmds})
    assert [call.args[0] for call in ctx.run.call_args_list] == cmds


def test_test_without_sanitizer():
    cmds = [STUBS, f"make -C kernels -j{CORES} test", PYTEST]
    ctx = invoke_tasks(["test", "--no-sanitize"], run={c: Result() for c in cmds})
    assert [call.args[0] for call in ctx.run.call_args_list] == cmds


@pytest.mark.parametrize("argv, command", [
    (["build-kernels"], f"make -C kernels -j{CORES}"),
    (["build-kernels", "--jobs", "3"], "make -C kernels -j3"),
    (["build-kernels", "--jobs", "3", "--sanitize"], "make -C kernels -j3 SANITIZE=1"),
])
def test_build_kernels(argv, command):
    ctx = invoke_tasks(argv, run={command: Result(), STUBS: Result()})
    assert [call.args[0] for call in ctx.run.call_args_list] == [command, STUBS]


def test_an_unknown_option_is_refused_before_any_task_runs():
    from invoke.exceptions import ParseError

    with pytest.raises(ParseError, match="--jbos"):
        invoke_tasks(["build-kernels", "--jbos", "3"])


# -- tasks that call one library function -----------------------------------

def test_render_writes_the_tree(tmp_path):
    invoke_tasks(["render", "--out", str(tmp_path / "rootfs")])
    assert (tmp_path / "rootfs" / "etc").is_dir()


def test_render_refuses_a_missing_spec(tmp_path):
    # (The one-line message is run_render's, tested with it; it binds
    # sys.stderr at import, out of this test's capture.)
    with pytest.raises(Exit) as exc:
        invoke_tasks(["render", "--spec", str(tmp_path / "absent.yaml"), "--out", str(tmp_path / "rootfs")])
    assert exc.value.code == 1 and not (tmp_path / "rootfs").exists()


@pytest.mark.parametrize("argv, expected, balancers", [
    (["provision", "--root", "/r", "--check"],
     ["provision", "--root", "/r", "--spec", str(tasks.DEFAULT_SPEC), "--check", "--role", "engine"], {"check": True}),
    (["provision", "--spec", "a.yaml", "--spec", "b.yaml"],
     ["provision", "--root", "/", "--spec", "a.yaml", "--spec", "b.yaml", "--role", "engine"], {"check": False}),
    # A rollback must work when the spec no longer loads: no default spec is
    # passed; it restores ROOT only, the balancer hosts are left alone.
    (["provision", "--root", "/r", "--rollback"], ["provision", "--root", "/r", "--rollback"], None),
])
def test_provision_arguments(monkeypatch, argv, expected, balancers):
    main = record(monkeypatch, "hostspec.__main__.main")
    lb = record(monkeypatch, "engine.deploy.commands.provision_balancers")
    invoke_tasks(argv)
    assert main.args == (expected,)
    assert (lb.kwargs if balancers is not None else lb.calls) == (balancers if balancers is not None else [])


@pytest.mark.parametrize("root_rc, lb_rc, expected", [(2, 0, 2), (0, 2, 2), (2, 1, 1), (1, 0, 1)])
def test_provision_exit_code_is_the_worst_of_root_and_balancers(monkeypatch, root_rc, lb_rc, expected):
    record(monkeypatch, "hostspec.__main__.main", rc=root_rc)  # 2: --check found drift
    lb = record(monkeypatch, "engine.deploy.commands.provision_balancers", rc=lb_rc)
    with pytest.raises(Exit) as exc:
        invoke_tasks(["provision", "--root", "/r", "--check"])
    assert exc.value.code == expected
    assert len(lb.calls) == (0 if root_rc == 1 else 1)   # a failed ROOT stops before the balancers


def test_zoo_arguments(monkeypatch):
    main = record(monkeypatch, "models.zoo.main")
    invoke_tasks(["zoo", "--name", "mlp", "--name", "cnn_bn", "--force", "--out", "build/m"])
    assert main.args == (["--out", str(ROOT / "build/m"), "--force", "mlp", "cnn_bn"],)


def test_zoo_refuses_an_unknown_model(tmp_path, capfd):
    with pytest.raises(Exit) as exc:
        invoke_tasks(["zoo", "--name", "no_such_model", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "unknown model 'no_such_model'" in capfd.readouterr().err
    assert not any(tmp_path.iterdir())


def test_convert_arguments(monkeypatch):
    convert = record(monkeypatch, "engine.deploy.convert_models.convert_spec_models")
    convert.rc = []  # no models: nothing to print
    invoke_tasks(["convert", "--spec", "s.yaml", "--out", "build/x"])
    assert convert.args == ([Path("s.yaml")], ROOT / "build/x") and convert.kwargs == {"progress": print}


def test_convert_refuses_a_missing_spec(tmp_path):
    with pytest.raises(Exit) as exc:
        invoke_tasks(["convert", "--spec", str(tmp_path / "absent.yaml"), "--out", str(tmp_path)])
    assert exc.value.code == 1 and exc.value.message.startswith("convert: ")


def test_deploy_options(monkeypatch, tmp_path):
    deploy = record(monkeypatch, "engine.deploy.commands.deploy")
    invoke_tasks(["deploy", "--spec", "a.yaml", "--spec", "b.yaml", "--host", "h1", "--parallel", "3",
                  "--version", "v7", "--bundle", "x.tar.gz", "--token", "t0k"])
    (options,) = deploy.args
    assert options.specs == [Path("a.yaml"), Path("b.yaml")] and options.hosts == ["h1"]
    assert (options.parallel, options.version, options.bundle, options.token) == (3, "v7", Path("x.tar.gz"), "t0k")


def test_deploy_defaults(monkeypatch):
    deploy = record(monkeypatch, "engine.deploy.commands.deploy")
    invoke_tasks(["deploy"])
    (options,) = deploy.args
    # Empty specs: the pipeline's embedded default; parallel None: the spec's deploy.parallel.
    assert (options.specs, options.hosts, options.parallel, options.version, options.bundle, options.token) == \
        ([], [], None, None, None, None)


def test_deploy_failure_exits_with_its_code(monkeypatch):
    record(monkeypatch, "engine.deploy.commands.deploy", rc=1)
    with pytest.raises(Exit) as exc:
        invoke_tasks(["deploy"])
    assert exc.value.code == 1


def test_token_file_is_read(monkeypatch, tmp_path):
    status = record(monkeypatch, "engine.deploy.commands.operate")
    (tmp_path / "tok").write_text("abc.def.ghi\nignored\n")
    invoke_tasks(["status", "--token-file", str(tmp_path / "tok")])
    options, op = status.args
    assert op == "status" and options.token == "abc.def.ghi"


@pytest.mark.parametrize("argv, message", [
    (["deploy", "--token", "a", "--token-file", "f"], "error: --token, --token-file: give one of them, not both"),
    (["rollback", "--token-file", "/nonexistent/tok"], "error: --token-file: "),
])
def test_bad_token_options_exit_1(monkeypatch, argv, message):
    for fn in ("deploy", "operate"):
        record(monkeypatch, f"engine.deploy.commands.{fn}")
    with pytest.raises(Exit) as exc:
        invoke_tasks(argv)
    assert exc.value.code == 1 and exc.value.message.startswith(message)


@pytest.mark.parametrize("argv, op_args", [
    (["stop", "--host", "a", "--host", "b"], ("stop",)),
    (["status"], ("status",)),
    (["rollback"], ("rollback",)),
    (["rollback", "--to", "v3"], ("rollback", "--to", "v3")),
])
def test_host_operations(monkeypatch, argv, op_args):
    operate = record(monkeypatch, "engine.deploy.commands.operate")
    invoke_tasks(argv)
    options, *rest = operate.args
    assert tuple(rest) == op_args
    assert options.hosts == (["a", "b"] if "--host" in argv else [])


def test_bundle_arguments(monkeypatch):
    bundle = record(monkeypatch, "engine.deploy.commands.bundle")
    invoke_tasks(["bundle", "--spec", "a.yaml", "--version", "v1"])
    (options,) = bundle.args
    assert options.specs == [Path("a.yaml")] and options.version == "v1" and options.hosts == []


def test_logs_arguments(monkeypatch):
    logs = record(monkeypatch, "engine.deploy.commands.logs")
    invoke_tasks(["logs", "--host", "h", "--lines", "5", "--follow"])
    (options,) = logs.args
    assert options.hosts == ["h"] and logs.kwargs == {"lines": 5, "follow": True}


def test_logs_refuses_negative_lines(capfd):
    with pytest.raises(Exit) as exc:
        invoke_tasks(["logs", "--lines", "-1"])
    assert exc.value.code == 1 and "--lines" in capfd.readouterr().err


def test_bench_arguments(monkeypatch):
    bench = record(monkeypatch, "engine.deploy.commands.bench")
    invoke_tasks(["bench", "--host", "h", "--rate", "50", "--steady-s", "2", "--workers", "4", "--model", "mlp",
                  "--out", "build/r", "--max-error-rate", "0.5"])
    (options,) = bench.args
    assert options.hosts == ["h"]
    assert bench.kwargs == {"rate": 50.0, "warmup_s": 5.0, "steady_s": 2.0, "spike_s": 10.0, "recovery_s": 10.0,
                            "workers": 4,
                            "model": "mlp", "out_dir": ROOT / "build/r", "max_error_rate": 0.5}


def test_quantize_arguments(monkeypatch):
    quantize = record(monkeypatch, "engine.quantize.quantize_file")

    class Result:
        def lines(self):
            return ["quantized"]
    quantize.rc = Result()
    invoke_tasks(["quantize", "--model", "m.onnx", "--calibration", "cal/", "--method", "percentile",
                  "--percentile", "99.9", "--max-rel-err", "0.05"])
    src, cal, dst, opts = quantize.args
    assert (src, cal, dst) == (Path("m.onnx"), "cal/", Path("m.int8.onnx"))
    assert (opts.method, opts.percentile, opts.max_rel_err, opts.min_top1_agreement) == ("percentile", 99.9, 0.05, None)


def test_quantize_refuses_a_missing_calibration_set_in_one_line(tmp_path):
    with pytest.raises(Exit) as exc:
        invoke_tasks(["quantize", "--model", str(tmp_path / "m.onnx"), "--calibration", str(tmp_path / "none")])
    assert exc.value.code == 1 and exc.value.message.startswith("quantize: ") and "\n" not in exc.value.message


@pytest.mark.parametrize("argv, extra, rc", [
    (["bench-gate"], "", 0),
    (["bench-gate"], "", 1),
    (["bench-gate", "--update-baseline", "--items", "mlp,serve-mlp", "--record", "runs.tsv"],
     " --update-baseline --items mlp,serve-mlp --record runs.tsv", 0),
    (["bench-gate", "--baseline-from", "runs.tsv"], " --baseline-from runs.tsv", 0),
])
def test_bench_gate_runs_the_gate_program_and_exits_with_its_status(argv, extra, rc):
    command = f"{sys.executable} {ROOT / 'benchmarks' / 'bench_gate.py'}{extra}"
    if rc:
        with pytest.raises(Exit) as exc:
            invoke_tasks(argv, run={command: Result(exited=rc)})
        assert exc.value.code == rc
    else:
        invoke_tasks(argv, run={command: Result(exited=rc)})
