"""The deploy commands behind `invoke deploy|bundle|stop|status|logs|rollback`:
each builds a Pipeline, runs one operation, prints the outcome and returns
the exit status. Errors print as one line, never a traceback."""

from __future__ import annotations

import sys
import json
from functools import wraps
from pathlib import Path
from hostspec.errors import SpecError

from engine.deploy import DeployError, verify
from engine.deploy import bench as load
from engine.deploy.bundle import read_member
from engine.deploy.pipeline import Options, Pipeline
from engine.deploy.reference import describe_sample
from engine.deploy.report import Reporter
from engine.deploy.service import base_url
from engine.deploy.targets import HostResult
from engine.errors import print_error
from hostspec.errors import SpecError


def _one_line_errors(fn):
    @wraps(fn)
    def wrapper(*args, **kwargs) -> int:
        try:
            return fn(*args, **kwargs)
        except (SpecError, DeployError, OSError) as exc:
            print_error(exc)
        except KeyboardInterrupt:
            print("error: interrupted; hosts finished or untouched are consistent, rerun deploy to converge",
                  file=sys.stderr)
            return 130
        return 1
    return wrapper


def _sample_line(pipeline: Pipeline, results: list[HostResult]) -> None:
    """For each serving host the deployer can reach: its URL and one real prediction."""
    bundle = pipeline.bundle()
    targets = {t.name: t for t in pipeline.targets()}
    models = bundle.manifest["engine"]["models"]
    for r in results:
        if not r.ok or not models or r.name not in targets:  # a balancer host serves no model itself
            continue
        target = targets[r.name]
        url = target.url(bundle.manifest) or (base_url(bundle.manifest) if target.kind == "local" else None)
        if url is None:
            continue
        model = models[0]
        reference = json.loads(read_member(bundle.path, model["smoke"]))
        try:
            outputs = verify.smoke(url, reference, token=target.deployer_token(bundle.manifest["engine"].get("auth") or {}))
        except DeployError as exc:
            pipeline.report.note(f"[red]{r.name}: sample inference failed: {exc}[/]")
            continue
        finally:
            target.close()
        pipeline.report.note(f"{r.name}: engine serving at [bold]{url}[/] — model {model['name']} "
                             f"(POST {url}/v2/models/{model['name']}/infer)")
        pipeline.report.note(f"{r.name}: sample: {describe_sample(reference, outputs)}")


@_one_line_errors
def deploy(options: Options, show_sample: bool = True) -> int:
    pipeline = Pipeline(options)
    results = pipeline.deploy()
    pipeline.report.table(results, title=f"deploy of release {pipeline.bundle().version}")
    if show_sample:
        _sample_line(pipeline, results)
    return 0 if all(r.ok for r in results) else 1


@_one_line_errors
def provision_balancers(options: Options, check: bool = False) -> int:
    """`invoke provision`'s balancer part: on each balancer host of the spec,
    install haproxy.cfg (checked by `haproxy -c` first) and start or
    gracefully reload HAProxy; check: print the diffs, change nothing.
    0 done or in sync, 1 a host failed, 2 drift (check)."""
    pipeline = Pipeline(options, Reporter())
    balancers = pipeline.balancers()
    try:
        results = pipeline.provision_balancers(balancers, check=check)
    finally:
        for b in balancers:
            b.target.close()
    for r in results:
        if not r.ok:
            print(f"error: {r.name}: {r.reason}", file=sys.stderr)
        elif check:
            for step in r.steps:
                print(step)
        else:
            print(f"{r.name}: HAProxy {r.status}" + (f" ({r.reason})" if r.reason else ""))
    if not all(r.ok for r in results):
        return 1
    return 2 if any(r.status == "drift" for r in results) else 0


@_one_line_errors
def bundle(options: Options) -> int:
    pipeline = Pipeline(options)
    b = pipeline.bundle()
    print(f"{b.path}\nversion {b.version}  sha256 {b.sha256}  {b.size / 1e6:.1f} MB")
    return 0


@_one_line_errors
def operate(options: Options, op: str, *args: str) -> int:
    """stop | status | rollback on every targeted host, with a table."""
    pipeline = Pipeline(options, Reporter())
    if op == "status":
        results = pipeline.status()
        pipeline.report.status_table(results)
    else:
        results = pipeline.operate(op, *args)
        pipeline.report.table(results, title=op)
    return 0 if all(r.ok for r in results) else 1


@_one_line_errors
def drain(options: Options, host: str) -> int:
    """Take an engine host out of the balancer's rotation for maintenance:
    no new requests; wait (engine.limits.drain_timeout_s) until it holds none."""
    pipeline, rollout, took = _set_balancer_state(options, host, "drain")
    if took is None:
        print(f"error: {host}: requests still in flight after {rollout.drain_timeout_s:g} s "
              "(engine.limits.drain_timeout_s); it gets no new ones", file=sys.stderr)
        return 1
    pipeline.report.note(f"{host}: drained in {took:.1f} s, no request in flight; "
                         f"`invoke undrain --host {host}` puts it back")
    return 0


@_one_line_errors
def undrain(options: Options, host: str) -> int:
    """Put an engine host back into the rotation and wait until the
    balancer's health checks see it UP (deploy.health_timeout_s)."""
    pipeline, rollout, took = _set_balancer_state(options, host, "ready")
    if took is None:
        print(f"error: {host}: set ready, but its health checks do not pass within {rollout.up_timeout_s:g} s "
              "(deploy.health_timeout_s): is its engine serving? (invoke status)", file=sys.stderr)
        return 1
    pipeline.report.note(f"{host}: back in the rotation, UP after {took:.1f} s")
    return 0


def _set_balancer_state(options: Options, host: str, state: str):
    """Set the host's state on every balancer, wait for its effect, print
    where it stands: (pipeline, rollout, seconds waited or None at the bound)."""
    pipeline = Pipeline(options, Reporter())
    rollout, balancers = pipeline.balanced_host(host)
    try:
        rollout.set_state(host, state)
        took = rollout.wait_drained(host) if state == "drain" else rollout.wait_up(host)
        _print_states(pipeline, rollout, host)
    finally:
        for b in balancers:
            b.target.close()
    return pipeline, rollout, took


def _print_states(pipeline: Pipeline, rollout, host: str) -> None:
    for api in rollout.apis:
        pipeline.report.note(f"{api.where}: " + ", ".join(f"{s.backend} {s.status} weight {s.weight} "
                                                        f"(check {s.check or '-'})" for s in api.server(host)))


@_one_line_errors
def logs(options: Options, lines: int, follow: bool) -> int:
    if lines < 0:
        raise DeployError(f"{lines} is negative", where="--lines", hint="how many of the last lines; 0 prints none")
    pipeline = Pipeline(options, Reporter())
    targets = pipeline.targets()
    if follow:
        if len(targets) != 1:
            raise DeployError("--follow needs exactly one host", where="--host",
                              hint=f"pick one of: {', '.join(t.name for t in targets)}")
        try:
            return targets[0].follow_log(lines)
        finally:
            targets[0].close()
    results = pipeline.operate("logs", "--lines", str(lines))
    for r in results:
        text = r.data.get("text", "").rstrip("\n") if r.ok else f"error: {r.reason}"
        if len(results) > 1:
            print(f"==> {r.name} <==")
        if text:
            print(text)
    return 0 if all(r.ok for r in results) else 1


@_one_line_errors
def bench(options: Options, *, rate: float, warmup_s: float, steady_s: float, spike_s: float, workers: int,
          model: str | None, out_dir: Path, max_error_rate: float = 0.1, recovery_s: float = 0.0) -> int:
    """Warm-up, steady, spike (and recovery) load against one deployed host; report under out_dir.
    Fails (exit 1) when nothing serves, on any wrong answer, and when more
    than max_error_rate of the requests got errors; a failed run never
    replaces the last good report."""
    pipeline = Pipeline(options, Reporter())
    engine = pipeline.spec.data["engine"]
    names = [m["name"] for m in engine["models"]]
    if model is not None and model not in names:
        raise DeployError(f"unknown model {model!r}", where="--model",
                          hint=f"the spec serves: {', '.join(names) or 'no model'}")
    if not names:
        raise DeployError("the spec serves no model", where="engine.models")
    if not 0 <= max_error_rate <= 1:
        raise DeployError(f"{max_error_rate:g} is not a fraction", where="--max-error-rate", hint="0 to 1, e.g. 0.1")
    targets = pipeline.targets()
    target = targets[0]
    if len(targets) > 1:
        pipeline.report.note(f"benchmarking {target.name} (the first host; pick one with --host)")
    where = {"engine": {"listen": engine["listen"], "http_port": engine["http_port"]}}
    url = target.url(where) or (base_url(where) if target.kind == "local" else None)
    if url is None:
        raise DeployError(f"{target.name} serves on {engine['listen']} only: not reachable from here",
                          where="engine.listen", hint="bench a local host, or listen on an address this machine reaches")
    name = model or names[0]
    plan = load.phases(rate, warmup_s, steady_s, spike_s, recovery_s)
    auth = engine.get("auth") or {}
    try:
        token = target.deployer_token(auth, lifetime_s=sum(p.seconds for p in plan) + 120)
        _check_ready(url, None if auth.get("open_health", True) else token, target.name)
        # The reference of the release the host runs, not of the last local build.
        reference = json.loads(target.read_active(f"models/{name}.smoke.json"))
    except ValueError:
        raise DeployError("the smoke reference is not JSON", where=f"{target.name}: models/{name}.smoke.json",
                          hint="redeploy") from None
    finally:
        target.close()
    pipeline.report.note(f"load on {url} model {name}: " + ", ".join(f"{p.name} {p.seconds:g} s at {p.rate:g}/s"
                                                                  for p in plan))
    result = load.run_load(url, name, plan, load.reference_requests(reference), workers, token=token)
    rows = load.summary(result)
    errors = load.error_rate(result)
    failed = any(row["mismatches"] for row in rows) or errors > max_error_rate
    path = load.write_report(result, out_dir, target.name, failed=failed)
    for row in rows:
        pipeline.report.note(f"  {row['phase']:<8} {row['achieved_rps']:7.1f} req/s ok, {row['mismatches']} wrong "
                             f"answers, {row['errors']} errors, p50 {load.ms(row['p50'])} ms, "
                             f"p99 {load.ms(row['p99'])} ms")
    for text in result.examples[load.MISMATCH]:
        pipeline.report.note(f"  [red]wrong answer[/]: {text}")
    for text in result.examples[load.ERROR][:3] if errors > max_error_rate else []:
        pipeline.report.note(f"  [red]error[/]: {text}")
    pipeline.report.note(f"report: {path}")
    if errors > max_error_rate:
        print(f"error: {errors:.0%} of the requests failed (over --max-error-rate {max_error_rate:g}); "
              f"the report is {path.name}, the last good one is left as it was", file=sys.stderr)
    # Wrong answers always fail; some errors under a 150% spike may be the
    # server shedding load as configured, up to max_error_rate.
    return 1 if failed else 0


def _check_ready(url: str, token: str | None, host: str) -> None:
    """One health request before any load: a stopped engine is one clear error,
    not a whole run of failures."""
    try:
        status, answer = verify.http_json("GET", f"{url}/v2/health/ready", timeout_s=5.0, token=token)
    except OSError as exc:
        raise DeployError(f"no engine answers at {url}: {getattr(exc, 'reason', exc)}", where=host,
                          hint="deploy it or start it (invoke deploy; invoke status shows the state)") from None
    if status != 200:
        raise DeployError(f"the engine at {url} is not ready (HTTP {status}: {answer.get('error', answer)})",
                          where=host, hint="invoke status; invoke logs")
