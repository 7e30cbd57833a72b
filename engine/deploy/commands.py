"""The deploy commands behind `invoke deploy|bundle|stop|status|logs|rollback`:
each builds a Pipeline, runs one operation, prints the outcome and returns
the exit status. Errors print as one line, never a traceback."""

from __future__ import annotations

import sys
import json
from functools import wraps
from pathlib import Path
from engine.deploy import DeployError
from engine.deploy.pipeline import Options, Pipeline
from engine.deploy.report import Reporter
from engine.deploy.targets import HostResult


def _one_line_errors(fn):
    @wraps(fn)
    def wrapper(*args, **kwargs) -> int:
        from hostspec.errors import SpecError

        try:
            return fn(*args, **kwargs)
        except SpecError as exc:
            for problem in exc.problems:
                print(f"error: {problem}", file=sys.stderr)
        except DeployError as exc:
            print(f"error: {exc}", file=sys.stderr)
        except OSError as exc:
            print(f"error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        except KeyboardInterrupt:
            print("error: interrupted; hosts finished or untouched are consistent, rerun deploy to converge",
                  file=sys.stderr)
            return 130
        return 1
    return wrapper


def _sample_line(pipeline: Pipeline, results: list[HostResult]) -> None:
    """For each serving host the deployer can reach: its URL and one real prediction."""
    from engine.deploy import verify
    from engine.deploy.bundle import read_member
    from engine.deploy.install import base_url
    from engine.deploy.reference import describe_sample

    bundle = pipeline.bundle()
    targets = {t.name: t for t in pipeline.targets()}
    models = bundle.manifest["engine"]["models"]
    for r in results:
        if not r.ok or not models:
            continue
        target = targets[r.name]
        url = target.url(bundle.manifest) or (base_url(bundle.manifest) if target.kind == "local" else None)
        if url is None:
            continue
        model = models[0]
        reference = json.loads(read_member(bundle.path, model["smoke"]))
        try:
            outputs = verify.smoke(url, reference)
        except DeployError as exc:
            pipeline.report.note(f"[red]{r.name}: sample inference failed: {exc}[/]")
            continue
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
def bundle(options: Options) -> int:
    pipeline = Pipeline(options)
    b = pipeline.bundle()
    print(f"{b.path}\nversion {b.version}  sha256 {b.sha256}  {b.size / 1e6:.1f} MB")
    return 0


@_one_line_errors
def operate(options: Options, op: str, *args: str) -> int:
    """stop | status | rollback on every targeted host, with a table."""
    pipeline = Pipeline(options, Reporter())
    results = pipeline.operate(op, *args)
    if op == "status":
        pipeline.report.status_table(results)
    else:
        pipeline.report.table(results, title=op)
    return 0 if all(r.ok for r in results) else 1


@_one_line_errors
def logs(options: Options, lines: int, follow: bool) -> int:
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
        print(f"==> {r.name} <==")
        print(r.data.get("text", "").rstrip("\n") if r.ok else f"error: {r.reason}")
    return 0 if all(r.ok for r in results) else 1


@_one_line_errors
def bench(options: Options, *, rate: float, warmup_s: float, steady_s: float, spike_s: float, workers: int,
          model: str | None, out_dir: Path) -> int:
    """Three-phase load against one deployed host; report under out_dir."""
    from engine.deploy import bench as load
    from engine.deploy.install import base_url

    pipeline = Pipeline(options, Reporter())
    targets = pipeline.targets()
    target = targets[0]
    if len(targets) > 1:
        pipeline.report.note(f"benchmarking {target.name} (the first host; pick one with --host)")
    engine = pipeline.spec.data["engine"]
    where = {"engine": {"listen": engine["listen"], "http_port": engine["http_port"]}}
    url = target.url(where) or (base_url(where) if target.kind == "local" else None)
    if url is None:
        raise DeployError(f"{target.name} serves on {engine['listen']} only: not reachable from here",
                          where="engine.listen", hint="bench a local host, or listen on an address this machine reaches")
    name = model or engine["models"][0]["name"]
    plan = load.phases(rate, warmup_s, steady_s, spike_s)
    try:
        # The reference of the release the host runs, not of the last local build.
        reference = json.loads(target.read_active(f"models/{name}.smoke.json"))
    except ValueError:
        raise DeployError("the smoke reference is not JSON", where=f"{target.name}: models/{name}.smoke.json",
                          hint="redeploy") from None
    finally:
        target.close()
    pipeline.report.note(f"load on {url} model {name}: " + ", ".join(f"{p.name} {p.seconds:g} s at {p.rate:g}/s"
                                                                  for p in plan))
    result = load.run_load(url, name, plan, load.reference_requests(reference), workers)
    path = load.write_report(result, out_dir, target.name)
    rows = load.summary(result)
    for row in rows:
        pipeline.report.note(f"  {row['phase']:<8} {row['achieved_rps']:7.1f} req/s ok, {row['mismatches']} wrong "
                             f"answers, {row['errors']} errors, p50 {row['p50']:.2f} ms, p99 {row['p99']:.2f} ms")
    for text in result.examples[load.MISMATCH]:
        pipeline.report.note(f"  [red]wrong answer[/]: {text}")
    pipeline.report.note(f"report: {path}")
    # Wrong answers are a failed bench; errors under a 150% spike may be the
    # server shedding load as configured, which the report shows.
    return 1 if any(row["mismatches"] for row in rows) else 0
