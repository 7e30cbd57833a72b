"""ai-engine tasks (invoke). Each task is a thin wrapper: read options, call
one library function, report. The work lives in `hostspec` (sysconfig/) and
`engine`, where it is tested without invoke. `invoke --list` is the table of
contents; `invoke --help TASK` documents every option."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import invoke
from invoke import Collection, Exit

# Each task imports the library it wraps when it runs: `invoke --list` takes
# 0.2-0.5 s, importing the deploy commands alone 1.3-2.1 s (2-core VM, loaded).

# No automatic one-letter flags: invoke derives them from option names in
# declaration order, which gave `-o` for --rollback. Every option is spelt out.
task = functools.partial(invoke.task, auto_shortflags=False)

ROOT = Path(__file__).resolve().parent
DEFAULT_SPEC = ROOT / "sysconfig" / "spec.yaml"


def _specs(spec: list[str] | None) -> list[Path]:
    return [Path(s) for s in spec] if spec else [DEFAULT_SPEC]


_SPEC_HELP = "spec file; repeat to overlay site files on a base (later wins). Default: sysconfig/spec.yaml"
_MODELS_HELP = ("directory of converted models (`invoke convert --out DIR`) that a model's memory: auto "
                "(hugepages count auto) is read from")


def _exit_with(rc: int) -> None:
    """A library command's non-zero exit status becomes the task's (invoke exits with it)."""
    if rc:
        raise Exit(code=rc)


def _cores() -> int:
    """Compile jobs: the cores this process may run on (a container or taskset may
    allow fewer than the host has)."""
    return len(os.sched_getaffinity(0))


@task(
    help={
        "sanitize": "also run the C tests under AddressSanitizer + UBSan (default: on)",
        "pytest-args": "extra arguments passed to pytest, e.g. '-k kernels -x'",
    }
)
def test(c, sanitize=True, pytest_args=""):
    """Run every test: C kernel tests (plain and sanitized), then pytest."""
    _grpc_stubs(c)
    jobs = _cores()
    c.run(f"make -C kernels -j{jobs} test", pty=False)
    if sanitize:
        c.run(f"make -C kernels -j{jobs} SANITIZE=1 test", pty=False)
    c.run(f"{sys.executable} -m pytest {pytest_args}", pty=False)


@task(
    help={
        "jobs": "parallel compile jobs (default: CPU count)",
        "sanitize": "build the AddressSanitizer + UBSan variant into build/lib-san",
    }
)
def build_kernels(c, jobs=0, sanitize=False):
    """Build the compute kernels into build/lib (CUDA too when nvcc exists), and the gRPC stubs."""
    n = jobs or _cores()
    c.run(f"make -C kernels -j{n}" + (" SANITIZE=1" if sanitize else ""), pty=False)
    _grpc_stubs(c)


def _grpc_stubs(c) -> None:
    """The KServe v2 gRPC stubs, generated from proto/*.proto (engine.server.grpc_stubs)."""
    c.run(f"{sys.executable} -m engine.server.grpc_stubs", pty=False, hide="out")


@task(
    iterable=["spec"],
    help={
        "spec": _SPEC_HELP,
        "root": "install into this directory (default: /, the live system: kernel state, GRUB, systemd, users; needs root)",
        "check": "change nothing: print every difference (file diffs, live values) and exit 2 on drift, 0 in sync",
        "rollback": "restore the newest backup set under ROOT/var/lib/ai-engine/provision/backups (live values too at /)",
        "models": _MODELS_HELP,
    },
)
def provision(c, spec=None, root="/", check=False, rollback=False, models=None):
    """Install the rendered spec into ROOT (only changed files, backed up first); at / also apply live state.
    Then haproxy.cfg on each balancer host of the spec: `haproxy -c`, install, start or graceful reload."""
    from hostspec.__main__ import main as hostspec_main

    argv = ["provision", "--root", root]
    # A rollback must work even when the spec no longer loads: pass it only when given.
    specs = spec if rollback else _specs(spec)
    argv += [arg for path in specs or [] for arg in ("--spec", str(path))]
    argv += ["--check"] * check + ["--rollback"] * rollback + (["--models", str(ROOT / models)] if models else [])
    if rollback:
        _exit_with(hostspec_main(argv))
        return
    # ROOT gets the engine host's files; haproxy.cfg goes to the balancer
    # hosts through the path deploy uses, which checks it before installing.
    rc = hostspec_main(argv + ["--role", "engine"])
    if rc == 1:
        _exit_with(rc)
    from engine.deploy.commands import provision_balancers

    lb_rc = provision_balancers(_deploy_options(spec, None), check=check)
    _exit_with(1 if lb_rc == 1 else max(rc, lb_rc))


@task(
    iterable=["spec"],
    help={
        "spec": _SPEC_HELP,
        "out": "directory the file tree is written into, mirroring the target root (default: build/rootfs)",
        "models": _MODELS_HELP,
    },
)
def render(c, spec=None, out="build/rootfs", models=None):
    """Validate the spec and render sysctl, GRUB, systemd, engine.yaml and check-host into OUT."""
    from hostspec.cli_render import run_render

    if run_render(_specs(spec), Path(out), models_dir=ROOT / models if models else None):
        raise Exit(code=1)


@task(
    iterable=["name"],
    help={
        "name": "model to build; repeat for several (default: every zoo model). `python -m models.zoo --list` lists them",
        "out": "output directory (default: build/models, where the spec's default model points)",
        "force": "rebuild even when the files are up to date",
    },
)
def zoo(c, name=None, out="build/models", force=False):
    """Generate the ONNX model zoo (digits, mlp, cnn_bn, ..., resnet18) deterministically; skips up-to-date files."""
    from models.zoo import main as zoo_main

    _exit_with(zoo_main(["--out", str(ROOT / out), *(["--force"] if force else []), *(name or [])]))


_HOST_HELP = "only this host of the spec's hosts list; repeat for several (default: all)"


_TOKEN_HELP = ("bearer token (JWT, scope infer) for the deployer's requests to an engine with engine.auth.enabled "
               "(default: one minted from the host's engine.auth.secret_file; needed for RS*/ES*/EdDSA)")
_TOKEN_FILE_HELP = "read the --token from this file (its first line); keeps it out of the shell history"


def _deploy_options(spec, host, token=None, token_file=None, **kw):
    from engine.deploy.pipeline import Options

    if token and token_file:
        raise Exit("error: --token, --token-file: give one of them, not both", code=1)
    if token_file:
        from engine.deploy import DeployError
        from engine.deploy.tokens import read_token_file

        try:
            token = read_token_file(token_file)
        except DeployError as exc:
            raise Exit(f"error: --token-file: {exc}", code=1) from None
    return Options(specs=[Path(s) for s in spec or []], hosts=list(host or []), token=token or None, **kw)


@task(
    iterable=["spec", "host"],
    help={
        "spec": _SPEC_HELP,
        "host": _HOST_HELP,
        "parallel": "hosts deployed at once (default: the spec's deploy.parallel)",
        "version": "release version to stamp (default: a hash of the bundle's content)",
        "bundle": "deploy this bundle (from `invoke bundle`, e.g. a CI artifact) instead of building one",
        "token": _TOKEN_HELP,
        "token-file": _TOKEN_FILE_HELP,
    },
)
def deploy(c, spec=None, host=None, parallel=0, version=None, bundle=None, token=None, token_file=None):
    """Render, build kernels, convert, bundle, then install + start + verify on every host (rollback on failure)."""
    from engine.deploy.commands import deploy as run_deploy

    _exit_with(run_deploy(_deploy_options(spec, host, token, token_file, parallel=parallel or None, version=version,
                                          bundle=Path(bundle) if bundle else None)))


@task(
    iterable=["spec"],
    help={"spec": _SPEC_HELP, "version": "release version to stamp (default: a hash of the bundle's content)"},
)
def bundle(c, spec=None, version=None):
    """Build the release bundle only (build/bundles/ai-engine-<version>-<arch>.tar.gz), reproducibly."""
    from engine.deploy.commands import bundle as run_bundle

    _exit_with(run_bundle(_deploy_options(spec, None, version=version)))


@task(iterable=["spec", "host"], help={"spec": _SPEC_HELP, "host": _HOST_HELP})
def stop(c, spec=None, host=None):
    """Stop the engine on the hosts (SIGTERM, SIGKILL after deploy's stop timeout)."""
    from engine.deploy.commands import operate

    _exit_with(operate(_deploy_options(spec, host), "stop"))


@task(iterable=["spec", "host"], help={"spec": _SPEC_HELP, "host": _HOST_HELP, "token": _TOKEN_HELP,
                                       "token-file": _TOKEN_FILE_HELP})
def status(c, spec=None, host=None, token=None, token_file=None):
    """Per host: active release, pid, health, balancer state and weight, uptime, installed releases."""
    from engine.deploy.commands import operate

    _exit_with(operate(_deploy_options(spec, host, token, token_file), "status"))


@task(
    iterable=["spec", "host"],
    help={"spec": _SPEC_HELP, "host": _HOST_HELP,
          "lines": "how many of the last log lines to print (default 50; 0 prints none)",
          "follow": "keep printing new lines until Ctrl-C (one host only)"},
)
def logs(c, spec=None, host=None, lines=50, follow=False):
    """Print the engine log of each host (ROOT/var/log/ai-engine/engine.log)."""
    from engine.deploy.commands import logs as run_logs

    _exit_with(run_logs(_deploy_options(spec, host), lines=lines, follow=follow))


@task(
    iterable=["spec", "host"],
    help={"spec": _SPEC_HELP, "host": _HOST_HELP,
          "to": "release version to activate (default: the one active before the current one)",
          "token": _TOKEN_HELP, "token-file": _TOKEN_FILE_HELP},
)
def rollback(c, spec=None, host=None, to=None, token=None, token_file=None):
    """Switch hosts back to their previous release: config, current symlink, restart, verify."""
    from engine.deploy.commands import operate

    _exit_with(operate(_deploy_options(spec, host, token, token_file), "rollback", *(["--to", to] if to else [])))


_ONE_HOST_HELP = "the engine host (its name in the spec's hosts list), behind the spec's balancer"


@task(iterable=["spec"], help={"spec": _SPEC_HELP, "host": _ONE_HOST_HELP})
def drain(c, host, spec=None):
    """Take an engine host out of the balancer's rotation (HAProxy drain) and wait until it holds no request."""
    from engine.deploy.commands import drain as run_drain

    rc = run_drain(_deploy_options(spec, None), host)
    if rc:
        raise Exit(code=rc)


@task(iterable=["spec"], help={"spec": _SPEC_HELP, "host": _ONE_HOST_HELP})
def undrain(c, host, spec=None):
    """Put a drained engine host back into the balancer's rotation and wait until its health checks pass."""
    from engine.deploy.commands import undrain as run_undrain

    rc = run_undrain(_deploy_options(spec, None), host)
    if rc:
        raise Exit(code=rc)


@task(
    iterable=["spec"],
    help={"spec": "spec file(s), later ones layered on top (default: sysconfig/spec.yaml)",
          "out": "output directory for the .aie files (default: build/models)"},
)
def convert(c, spec=None, out="build/models"):
    """Convert every model in the spec's engine.models to OUT/<name>.aie and print planned memory."""
    from engine.deploy.convert_models import convert_spec_models
    from engine.errors import EngineError, error_lines, exit_status

    try:
        for summary in convert_spec_models(_specs(spec), ROOT / out, progress=print):
            print("\n".join(summary.lines()))
    except EngineError as exc:  # a spec problem or a model the converter refuses
        raise Exit("\n".join(error_lines(exc, "convert")), code=exit_status(exc)) from None


@task(
    help={"model": "the fp32 ONNX model",
          "calibration": "calibration samples: a .npy (one-input model), a .npz (one array per input) or a directory",
          "out": "output QDQ model (default: MODEL with .int8.onnx); written only if accepted",
          "method": "activation ranges: minmax (default) or percentile",
          "percentile": "for --method percentile (default 99.999)",
          "max-rel-err": "refuse (write nothing, exit 1) above this max relative error against fp32",
          "min-top1-agreement": "refuse when top-1 agrees with fp32 on less than this fraction of samples"},
)
def quantize(c, model, calibration, out=None, method="minmax", percentile=99.999, max_rel_err=None,
             min_top1_agreement=None):
    """Quantise an ONNX model to int8 (standard QDQ ONNX) and print its error against fp32."""
    from engine.errors import EngineError, error_lines, exit_status
    from engine.quantize import QuantizeOptions, quantize_file

    src = Path(model)
    opts = QuantizeOptions(method=method, percentile=float(percentile),
                           max_rel_err=None if max_rel_err is None else float(max_rel_err),
                           min_top1_agreement=None if min_top1_agreement is None else float(min_top1_agreement))
    try:
        result = quantize_file(src, calibration, Path(out) if out else src.with_suffix(".int8.onnx"), opts,
                               progress=print)
    except EngineError as exc:
        raise Exit("\n".join(error_lines(exc, "quantize")), code=exit_status(exc)) from None
    print("\n".join(result.lines()))


@task(
    iterable=["spec"],
    help={
        "spec": _SPEC_HELP,
        "host": "the host to load (default: the spec's first host)",
        "rate": "steady-state requests per second; warm-up runs at 50%, the spike at 150% (default 200)",
        "warmup-s": "warm-up phase length in seconds (default 5)",
        "steady-s": "steady phase length in seconds (default 20)",
        "spike-s": "spike phase length in seconds (default 10)",
        "recovery-s": "phase after the spike, at the steady rate, in which the recovery time is measured "
                      "(default 10; 0: none)",
        "workers": "client threads, each with a keep-alive connection (default 32)",
        "model": "model to load (default: the spec's first model)",
        "out": "report directory (default: build/reports)",
        "max-error-rate": "fail (exit 1) when more than this fraction of the requests got errors (default 0.1)",
        "token": _TOKEN_HELP,
        "token-file": _TOKEN_FILE_HELP,
    },
)
def bench(c, spec=None, host=None, rate=200.0, warmup_s=5.0, steady_s=20.0, spike_s=10.0, recovery_s=10.0, workers=32,
          model=None, out="build/reports", max_error_rate=0.1, token=None, token_file=None):
    """Load (warm-up, steady, 150% spike, recovery at the target rate) on a deployed engine; markdown + PNG plots
    in build/reports: p50/p90/p99/p99.9 end to end and per layer (Server-Timing), the recovery time after the spike.

    Checks the engine's health first. Every answer is compared with the model's smoke reference: wrong
    answers are counted apart from HTTP errors; any wrong answer, or errors above --max-error-rate, make
    the task exit 1 and the report goes to bench-<host>-failed.md, leaving the last good one.
    """
    from engine.deploy.commands import bench as run_bench

    _exit_with(run_bench(_deploy_options(spec, [host] if host else None, token, token_file), rate=float(rate),
                         warmup_s=float(warmup_s), steady_s=float(steady_s), spike_s=float(spike_s),
                         recovery_s=float(recovery_s), workers=int(workers), model=model, out_dir=ROOT / out,
                         max_error_rate=float(max_error_rate)))


@task(
    help={
        "update-baseline": "measure (three times the pairs) and write this machine's "
                           "benchmarks/gate_baselines/<machine>.json instead of comparing; commit the file, "
                           "its diff is the review",
        "items": "comma-separated subset of mlp,mobilenetv2,resnet18,serve-mlp (default: all)",
        "record": "append this run's ratios and verdicts to this TSV file",
        "baseline-from": "measure nothing: write the baseline from a --record file of >= 5 runs of unchanged code "
                         "(each item's median ratio and the runs' spread)",
    }
)
def bench_gate(c, update_baseline=False, items="", record="", baseline_from=""):
    """Latency gate: ai-engine/onnxruntime ratios vs the committed baseline (~80 s). Exit 0 pass, 1 regression, 2 broken.

    A ratio fails when it is worse than the baseline by more than max(3 x its standard error, 8%) twice
    in a row (one automatic re-measure). See benchmarks/bench_gate.py and README "Latency gate".
    """
    import shlex

    argv = [sys.executable, str(ROOT / "benchmarks" / "bench_gate.py")]
    argv += ["--update-baseline"] if update_baseline else []
    argv += ["--items", items] if items else []
    argv += ["--record", record] if record else []
    argv += ["--baseline-from", baseline_from] if baseline_from else []
    _exit_with(c.run(" ".join(shlex.quote(a) for a in argv), pty=False, warn=True).exited)


# --- tasks added by later work go above this line ---------------------------

ns = Collection(test, build_kernels, render, provision, zoo, convert, quantize, deploy, bundle, stop, status, logs, rollback,
                drain, undrain, bench, bench_gate)
# Piped (CI logs, files), the echoed command carries no ANSI escape codes.
ns.configure({"run": {"echo": True, **({} if sys.stdout.isatty() else {"echo_format": "{command}"})}})
