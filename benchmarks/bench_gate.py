"""Latency gate: same-run ratios ai-engine / onnxruntime, compared with a
committed baseline for this machine (benchmarks/gate_baselines/<machine>.json,
one per CPU model and kernel level). CI runs it after the tests (.ci/run);
`invoke bench-gate` is the same thing.

    .venv/bin/python benchmarks/bench_gate.py                     # measure, compare, exit 0/1/2
    .venv/bin/python benchmarks/bench_gate.py --update-baseline   # measure (3x the pairs), write the baseline
        [--items mlp,mobilenetv2,resnet18,serve-mlp] [--blocks 7] [--block-s 0.4] [--record runs.tsv]

What it measures (every ratio <= 1.0: ai-engine is faster):
  mlp, mobilenetv2, resnet18   InferenceSession.run / onnxruntime session.run,
                               batch 1, 2 threads each (onnxruntime without
                               spinning, all graph optimisations)
  serve-mlp                    one HTTP/1.1 keep-alive client sending the zoo
                               MLP (KServe v2 binary tensors) one request at a
                               time to our server / to onnxruntime behind
                               uvicorn + starlette (benchmarks/ort_peer.py);
                               client on one core, servers on the other. The
                               figure is each server's CPU seconds per request
                               (all its threads, /proc/PID/task/*/schedstat),
                               not the client's wall time: see server_cpu_cost

Each item is timed in --blocks pairs of blocks (ours, then the peer's, each
about --block-s seconds of calls, --pause seconds idle before each block so
the other runtime's workers have given the cores back). A pair gives one
ratio: for a model, the 25th percentile call of our block / that of the
peer's block (a call preempted by another job lands above it); for a
server, CPU per request / the peer's. The two blocks are under a
second apart, so drifting load hits both about alike; but a load that takes
a core slows a 2-thread run (ours or the peer's) by more than it slows the
other, so on a loaded host some pairs are far off. The item's ratio is the
25th percentile of its pair ratios (the less disturbed pairs), with its
standard error from a seeded bootstrap of the pairs (`se`, relative); the
table also shows the spread of one pair (robust sigma: 1.4826 x median
absolute deviation / median), which says how loaded the host was.

Baselines are per machine: a ratio to onnxruntime is a property of the CPU
(AVX-512 or AMX kernels on one, AVX2 on another; onnxruntime's own kernels
differ too), so a baseline taken on one machine says nothing about another.
The file is named for the CPU model, its count and the best kernel level this
CPU runs (not what AIE_ISA forces: forcing a slower path is a way to see the
gate fail). On a machine with no baseline the gate measures, prints the
ratios and says it judged nothing (exit 0): a new machine is not a regression,
and the printed commands record one. A --baseline file recorded on another
machine is refused (exit 2).

Verdict: with r_b, se_b the baseline's ratio and standard error, r, se
this run's, and drift the baseline's run-to-run spread of the ratio (what
one run's pairs cannot show: the host's state shifting between runs; set by
--baseline-from from a record of runs of unchanged code, which also takes
the baseline's ratio as the median of those runs: one run, however many
pairs it has, is one moment of the host), an item regresses when

    r / r_b - 1 > margin = max(K * sqrt(se_b^2 + se^2 + drift^2), FLOOR),  K = 3, FLOOR = 0.08

A regressed item is measured once more; the gate fails only if it regresses
again. Exit status: 0 pass, 1 regression, 2 the benchmark itself is broken
(a wrong answer, a server that does not start, a missing or malformed
baseline, an exception).

AIE_GATE_SLOWDOWN=0.25 (read here only, never by the engine) makes the
harness busy-wait, after each of OUR calls or requests, 25% of our figure
calibrated on one block (for serve-mlp the client's busy-wait CPU is added
to our server's): a regression of known size to prove the gate sees it.
On a loaded host the busy-wait is preempted too, so what it adds is
somewhat more than asked (+28..40% measured for 0.25 at load average 13).
"""

from __future__ import annotations

import os

# OpenBLAS settings of the host's environment change numpy's (and with it the
# harness's) behaviour between machines; benchmarks run without them. Popped
# before numpy loads, and the servers started below inherit the cleaned env
# (only when run as a program: an importing process keeps its environment).
if __name__ == "__main__":
    for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        os.environ.pop(_var, None)

import argparse  # noqa: E402
import http.client  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

BASELINES = REPO / "benchmarks" / "gate_baselines"
ITEMS = ("mlp", "mobilenetv2", "resnet18", "serve-mlp")
K = 3.0          # standard errors of the difference a regression must exceed
FLOOR = 0.08     # never fail on less than 8%, however quiet both runs were
QUANTILE = 0.25  # of the calls in a block, and of the pair ratios: the least disturbed ones
BOOTSTRAP = 2000
BASELINE_BLOCKS = 3  # --update-baseline takes this many times --blocks pairs
MARGIN_FORMULA = f"max({K:g} * sqrt(se_base^2 + se_now^2 + drift^2), {FLOOR:g})"
EXIT_PASS, EXIT_REGRESSION, EXIT_BROKEN = 0, 1, 2


class GateError(Exception):
    """The benchmark cannot give a trustworthy figure (wrong answer, dead server, bad baseline)."""


# ---- the decision (pure: tested with recorded samples) -------------------------
@dataclass(frozen=True)
class Stat:
    ratio: float   # the 25th percentile of the pair ratios
    se: float      # its standard error (bootstrap), relative to it
    noise: float   # robust relative standard deviation of one pair ratio (how loaded the host was)
    n: int         # pairs
    drift: float = 0.0  # baseline only: run-to-run relative sigma of the ratio (series_from_record)


def summarize(samples: list[float]) -> Stat:
    """Pair ratios -> their 25th percentile, its bootstrap standard error, the spread of one pair."""
    a = np.asarray(samples, float)
    if len(a) < 3 or not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise GateError(f"need >= 3 finite positive pair ratios, got {samples!r}")
    q = float(np.quantile(a, QUANTILE))
    # seeded: the same samples always give the same verdict
    boot = np.quantile(np.random.default_rng(0).choice(a, (BOOTSTRAP, len(a))), QUANTILE, axis=1)
    med = float(np.median(a))
    return Stat(q, float(np.std(boot)) / q, float(1.4826 * np.median(np.abs(a - med)) / med), len(a))


def margin(base: Stat, now: Stat) -> float:
    """The relative worsening of a ratio that counts as a regression (see the module doc)."""
    return max(K * math.sqrt(base.se ** 2 + now.se ** 2 + base.drift ** 2), FLOOR)


def excess(base: Stat, now: Stat) -> float:
    """How much worse now's ratio is than the baseline's, relative (0.25: 25% slower against the peer)."""
    return now.ratio / base.ratio - 1.0


def regressed(base: Stat, now: Stat) -> bool:
    return excess(base, now) > margin(base, now)


@dataclass
class Row:
    item: str
    base: Stat | None            # None: no baseline for this machine, measured but not judged
    first: Stat
    second: Stat | None = None   # the re-measure, taken only after a first regression

    @property
    def failed(self) -> bool:
        return self.base is not None and regressed(self.base, self.first) and self.second is not None and regressed(self.base, self.second)

    @property
    def verdict(self) -> str:
        if self.base is None:
            return "not judged"
        if not regressed(self.base, self.first):
            return "pass"
        return "REGRESSION" if self.failed else "pass on re-measure"


def judge(baseline: dict[str, Stat], measure: Callable[[list[str]], dict[str, list[float]]],
          items: list[str]) -> list[Row]:
    """Measure `items`, re-measure once those that regressed; one Row each.
    `measure(names) -> {name: pair ratios}` is the benchmark (or recorded numbers)."""
    missing = [i for i in items if i not in baseline]
    if missing:
        raise GateError(f"the baseline has no entry for {', '.join(missing)} "
                        "(run `invoke bench-gate --update-baseline` and commit the file)")
    first = measure(items)
    rows = [Row(i, baseline[i], summarize(first[i])) for i in items]
    again = [r.item for r in rows if regressed(r.base, r.first)]
    if again:
        second = measure(again)
        for r in rows:
            if r.item in second:
                r.second = summarize(second[r.item])
    return rows


def exit_status(rows: list[Row]) -> int:
    return EXIT_REGRESSION if any(r.failed for r in rows) else EXIT_PASS


def table(rows: list[Row]) -> str:
    """The report: one line per item; `now` is the re-measure where one was taken."""
    out = [f"{'item':<12} {'baseline':>8} {'±se':>6} {'now':>7} {'±se':>6} {'spread':>6} {'worse by':>8} {'margin':>7}  verdict"]
    for r in rows:
        shown = [r.first] + ([r.second] if r.second else [])
        for i, now in enumerate(shown):
            label = r.item if i == 0 else "  re-measure"
            verdict = r.verdict if i == len(shown) - 1 else ("regressed" if regressed(r.base, now) else "pass")
            out.append(f"{label:<12} {r.base.ratio:>8.3f} {r.base.se:>6.1%} {now.ratio:>7.3f} {now.se:>6.1%} {now.noise:>6.1%} "
                       f"{excess(r.base, now):>+8.1%} {margin(r.base, now):>7.1%}  {verdict}")
    return "\n".join(out)


def load_baseline(path: Path) -> dict[str, Stat]:
    try:
        doc = json.loads(path.read_text())
        items = {name: Stat(float(e["ratio"]), float(e["se"]), float(e["noise"]), int(e["pairs"]),
                            float(e.get("drift", 0.0))) for name, e in doc["items"].items()}
        recorded_on = doc.get("machine")
    except FileNotFoundError:
        raise GateError(f"{path}: no baseline (run `invoke bench-gate --update-baseline` and commit the file)") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise GateError(f"{path}: not a gate baseline ({type(exc).__name__}: {exc}); expected "
                        '{"items": {NAME: {"ratio": R, "se": E, "noise": S, "pairs": N}}}') from None
    if recorded_on != machine():
        raise GateError(f"{path}: recorded on {recorded_on!r}, this machine is {machine()!r}; ratios of different "
                        f"machines are not comparable (record one here: see README \"Latency gate\")")
    return items


def machine() -> str:
    """What a baseline is valid for: the CPU model and count, and the best kernel
    level this CPU runs (not one AIE_ISA forces)."""
    from bench_serve import _cpu_model
    from engine.kernels import levels

    return f"{_cpu_model()}, kernel level {levels.best_level()}"


def machine_baseline() -> Path:
    """This machine's baseline file: benchmarks/gate_baselines/<machine, as a file name>.json."""
    return BASELINES / (re.sub(r"[^a-z0-9]+", "-", machine().lower().replace("kernel level", "")).strip("-") + ".json")


# ---- the measurement ---------------------------------------------------------------
def _slowdown() -> float:
    raw = os.environ.get("AIE_GATE_SLOWDOWN", "0")
    try:
        value = float(raw)
    except ValueError:
        raise GateError(f"AIE_GATE_SLOWDOWN={raw!r}: expected a fraction such as 0.25") from None
    if not 0 <= value < 10:
        raise GateError(f"AIE_GATE_SLOWDOWN={raw!r}: expected a fraction between 0 and 10")
    return value


def _once(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _slowed(fn: Callable[[], object], extra: float, clock: Callable[[], float]):
    """fn followed by `extra` seconds of busy-wait on `clock` (a busy-wait, not
    a sleep: it holds the core as slower code would). Returns the wrapped fn
    and a list the busy-wait adds its seconds to."""
    spent = [0.0]
    if extra <= 0:
        return fn, spent

    def run():
        fn()
        t = clock()
        while clock() - t < extra:
            pass
        spent[0] += clock() - t
    return run, spent


def wall_cost(fn: Callable[[], object], calls: int) -> float:
    """A block's figure for a model: the 25th percentile call (a call preempted by another job lands above it)."""
    return float(np.quantile([_once(fn) for _ in range(calls)], QUANTILE))


def _cpu_s(pid: int) -> float:
    """CPU seconds all threads of `pid` have run (schedstat: nanoseconds, not 10 ms ticks)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def server_cpu_cost(pid: int) -> Callable[[Callable[[], object], int], float]:
    """A block's figure for a server: its CPU seconds per request. Wall-clock
    latency of one request at a time is mostly wake-ups between threads and
    processes, and on a loaded host those wait for a core: measured that way
    our server went from 0.17x to 1.05x of uvicorn's between two runs of
    unchanged code. CPU time per request is what the serving code costs,
    whatever the load."""
    def cost(fn, calls):
        c0 = _cpu_s(pid)
        for _ in range(calls):
            fn()
        return (_cpu_s(pid) - c0) / calls
    return cost


@dataclass
class Runner:
    """One item: our call and the peer's, and how a block of calls becomes one figure."""
    ours: Callable[[], object]
    peer: Callable[[], object]
    ours_cost: Callable[[Callable[[], object], int], float] = wall_cost
    peer_cost: Callable[[Callable[[], object], int], float] = wall_cost


def pair_ratios(runner: Runner, blocks: int, block_s: float, pause: float, slowdown: float = 0.0) -> list[float]:
    """`blocks` ratios (our block's figure / the peer's block's figure), ours
    first in each pair; calls per block sized from warm-up calls so each
    block lasts about block_s seconds."""
    calls = {}
    for name, fn in (("ours", runner.ours), ("peer", runner.peer)):
        _once(fn)  # plans, arenas, connections
        calls[name] = max(3, min(1000, int(block_s / max(float(np.median([_once(fn) for _ in range(3)])), 1e-6))))
    extra, clock = 0.0, time.perf_counter
    if slowdown > 0:
        # calibrated on a whole block: a few calls on a loaded host overstate the time of one
        extra = slowdown * runner.ours_cost(runner.ours, calls["ours"])
        # a server's figure is CPU time: the client's busy-wait counts the CPU it spent, not the
        # wall time it was descheduled for
        clock = time.perf_counter if runner.ours_cost is wall_cost else time.thread_time
    ours, spent = _slowed(runner.ours, extra, clock)
    sides = (("ours", ours, runner.ours_cost), ("peer", runner.peer, runner.peer_cost))
    ratios = []
    for _ in range(blocks):
        figure = {}
        for name, fn, cost in sides:
            time.sleep(pause)  # the other runtime's intra-op workers give the cores back
            spent[0] = 0.0
            figure[name] = cost(fn, calls[name])
            if name == "ours" and cost is not wall_cost:
                # the injected busy-wait ran in this process, not in the server whose CPU is the figure
                figure[name] += spent[0] / calls[name]
        ratios.append(figure["ours"] / figure["peer"])
    return ratios


def _check_close(item: str, got, want) -> None:
    for g, w in zip(got, want):
        if not np.allclose(np.asarray(g, np.float64), w, rtol=1e-3, atol=1e-3):
            raise GateError(f"{item}: ai-engine's output differs from onnxruntime's "
                            f"(max |diff| {float(np.max(np.abs(np.asarray(g, np.float64) - w))):.3g})")


class Bench:
    """Models converted and servers started once; measure() can then run any
    item any number of times (the re-measure reuses them)."""

    def __init__(self, items: list[str], work: Path, blocks: int, block_s: float, pause: float):
        from bench_models import ort_runner
        from engine.convert import convert_file
        from engine.session import InferenceSession
        from models import zoo

        self.blocks, self.block_s, self.pause = blocks, block_s, pause
        self.slowdown = _slowdown()
        self.work, self.procs, self.runners = work, [], {}
        for item in items:
            if item not in ITEMS:
                raise GateError(f"unknown item {item!r} (expected some of: {', '.join(ITEMS)})")
            if item.startswith("serve-"):
                continue
            src = zoo.ensure(item)
            convert_file(src, work / f"{item}.aie")
            sess = InferenceSession(work / f"{item}.aie", threads=2)
            peer = ort_runner(src, 2, spinning=False)
            feeds = zoo.random_inputs(item, batch=1, seed=0)
            _check_close(item, sess.run(None, feeds), peer(feeds))
            self.runners[item] = Runner((lambda s, f: lambda: s.run(None, f))(sess, feeds),
                                        (lambda p, f: lambda: p(f))(peer, feeds))
        if "serve-mlp" in items:
            self.runners["serve-mlp"] = self._servers("mlp")

    def _servers(self, model: str):
        import yaml

        from bench_serve import decode_kserve, free_port, kserve_body, wait_http
        from engine.convert import convert_file
        from models import zoo

        src = zoo.ensure(model)
        convert_file(src, self.work / f"{model}.serve.aie")
        cpus = sorted(os.sched_getaffinity(0))
        self.client_cpus, server_cpus = cpus[:1], (cpus[1:] or cpus)
        http_port, tcp_port, peer_port = free_port(), free_port(), free_port()
        (self.work / "engine.yaml").write_text(yaml.safe_dump({
            "http_port": http_port, "binary_port": tcp_port, "threads": 1, "log_level": "warning",
            "models": [{"name": model, "path": str(self.work / f"{model}.serve.aie")}]}))
        log = open(self.work / "servers.log", "wb")

        def pinned():
            os.sched_setaffinity(0, server_cpus)
        self.procs.append(subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--config",
                                            str(self.work / "engine.yaml")], preexec_fn=pinned, stdout=log,
                                           stderr=log, cwd=REPO))
        env = dict(os.environ, AIE_PEER_MODELS=f"{model}={src}", PYTHONPATH=str(REPO / "benchmarks"),
                   OMP_NUM_THREADS="1")
        self.procs.append(subprocess.Popen([sys.executable, "-m", "uvicorn", "ort_peer:app", "--port", str(peer_port),
                                            "--workers", "1", "--log-level", "warning", "--no-access-log"],
                                           preexec_fn=pinned, stdout=log, stderr=log, env=env))
        try:
            wait_http(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=60)
            wait_http(f"http://127.0.0.1:{peer_port}/", timeout=60)
        except RuntimeError as exc:
            raise GateError(f"serve-{model}: {exc} (log: {self.work / 'servers.log'})") from None
        x_name, x = next(iter(zoo.random_inputs(model, batch=1, seed=0).items()))
        body, headers = kserve_body(x_name, np.ascontiguousarray(x, np.float32), binary=True)

        def client(port):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

            def request():
                try:
                    conn.request("POST", f"/v2/models/{model}/infer", body, headers)
                    resp = conn.getresponse()
                except (ConnectionError, http.client.RemoteDisconnected):
                    # both servers close a keep-alive connection idle for seconds (uvicorn: 5 s), as
                    # between the items; the warm-up call of each measurement reconnects
                    conn.close()
                    conn.request("POST", f"/v2/models/{model}/infer", body, headers)
                    resp = conn.getresponse()
                data = resp.read()
                if resp.status != 200:
                    raise GateError(f"serve-{model}: port {port} answered {resp.status}: {data[:200]!r}")
                return decode_kserve(data, {k.lower(): v for k, v in resp.getheaders()})
            return request
        ours, peer = client(http_port), client(peer_port)
        _check_close(f"serve-{model}", [ours()], [peer()])
        return Runner(ours, peer, server_cpu_cost(self.procs[0].pid), server_cpu_cost(self.procs[1].pid))

    def measure(self, items: list[str]) -> dict[str, list[float]]:
        out = {}
        for item in items:
            t = time.monotonic()
            cpus = os.sched_getaffinity(0)
            if item.startswith("serve-"):
                os.sched_setaffinity(0, self.client_cpus)  # the servers have the other core
            try:
                out[item] = pair_ratios(self.runners[item], self.blocks, self.block_s, self.pause, self.slowdown)
            finally:
                os.sched_setaffinity(0, cpus)
            print(f"  {item:<12} pair ratios {' '.join(f'{r:.3f}' for r in out[item])} "
                  f"({time.monotonic() - t:.1f} s)", flush=True)
        return out

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# ---- provenance and records ----------------------------------------------------------
def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout.strip()
        return out + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_baseline(path: Path, samples: dict[str, list[float]], blocks: int, block_s: float,
                   drift: dict[str, float] | None = None) -> None:
    items = {}
    for name, s in samples.items():
        st = summarize(s)
        items[name] = {"ratio": round(st.ratio, 4), "se": round(st.se, 4), "noise": round(st.noise, 4), "pairs": st.n,
                       "drift": round((drift or {}).get(name, 0.0), 4), "pair_ratios": [round(x, 4) for x in s]}
    _write_baseline_doc(path, items, blocks=blocks, block_s=block_s)


def _write_baseline_doc(path: Path, items: dict, **how) -> None:
    """The baseline document, written whole or not at all (a gate killed mid-write
    must not leave a baseline the next run cannot read)."""
    from engine.kernels import levels

    doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": _commit(), "machine": machine(),
           "kernel_level": levels.level(),
           "load_average": round(os.getloadavg()[0], 2), **how, "margin": MARGIN_FORMULA, "items": items}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)


def _unchanged_runs(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The header and the unchanged runs (AIE_GATE_SLOWDOWN 0) of a --record file."""
    try:
        lines = [line.rstrip("\n").split("\t") for line in path.read_text().splitlines()]
    except OSError as exc:
        raise GateError(f"{path}: cannot read the record ({exc.strerror})") from None
    if not lines:
        raise GateError(f"{path}: empty record; expected the TSV that --record writes")
    head, runs = lines[0], [dict(zip(lines[0], r)) for r in lines[1:] if len(r) == len(lines[0])]
    try:
        runs = [r for r in runs if float(r.get("slowdown", "nan")) == 0]
    except ValueError as exc:
        raise GateError(f"{path}: a slowdown column that is not a number ({exc})") from None
    if len(runs) < 5:
        raise GateError(f"{path}: {len(runs)} unchanged runs (slowdown 0); expected >= 5 to measure a spread")
    return head, runs


def series_from_record(path: Path) -> dict[str, Stat]:
    """Per item, the baseline a series of unchanged runs gives: the median of
    each run's first ratio (a re-measure is the gate's second chance, not the
    run's figure), its standard error (1.2533 x sigma / sqrt(runs), the
    median's), and the run-to-run spread as drift (1.4826 x median absolute
    deviation / median). What a run's own pairs cannot show: a host whose
    state shifts between runs (another job pinned to the servers' core moved
    serve-mlp by +20% in the first series; one run of 20 on unchanged code
    measured the MLP 28% above the series' median in session 9)."""
    head, runs = _unchanged_runs(path)
    out = {}
    for col in head:
        if col.endswith(" ratio"):
            try:
                a = np.asarray([float(r[col].split("/")[0]) for r in runs])
            except ValueError as exc:
                raise GateError(f"{path}: column {col!r}: {exc}") from None
            med = float(np.median(a))
            drift = float(1.4826 * np.median(np.abs(a - med)) / med)
            out[col[: -len(" ratio")]] = Stat(med, 1.2533 * drift / math.sqrt(len(a)), drift, len(a), drift)
    return out


def write_series_baseline(path: Path, series: dict[str, Stat], record: Path) -> None:
    """The baseline from a series of runs (`pairs` counts the runs; `noise` is their spread)."""
    items = {name: {"ratio": round(st.ratio, 4), "se": round(st.se, 4), "noise": round(st.noise, 4),
                    "pairs": st.n, "drift": round(st.drift, 4), "from": f"median of {st.n} unchanged runs"}
             for name, st in series.items()}
    _write_baseline_doc(path, items, record=record.name)


def append_record(path: Path, rows: list[Row], status: int, wall_s: float, note: str) -> None:
    """One TSV line per gate run (the false-failure series): ratios, noise, verdicts."""
    new = not path.exists()
    with open(path, "a") as f:
        if new:
            f.write("utc\tload1\tslowdown\tnote\twall_s\texit\t"
                    + "\t".join(f"{r.item} ratio\t{r.item} se\t{r.item} worse by\t{r.item} margin\t{r.item} verdict"
                                for r in rows) + "\n")
        cells = []
        for r in rows:
            now = r.second or r.first
            judged = r.base is not None
            cells += [f"{r.first.ratio:.3f}" + (f"/{r.second.ratio:.3f}" if r.second else ""), f"{now.se:.3f}",
                      f"{excess(r.base, now):+.3f}" if judged else "nan", f"{margin(r.base, now):.3f}" if judged else "nan",
                      r.verdict]
        f.write("\t".join([time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()), f"{os.getloadavg()[0]:.2f}",
                           os.environ.get("AIE_GATE_SLOWDOWN", "0"), note, f"{wall_s:.0f}", str(status), *cells]) + "\n")


def measure_unjudged(bench: "Bench", items: list[str], path: Path) -> list[Row]:
    """No baseline for this machine: the ratios (recorded like a judged run's, so
    a series can become the baseline), and how to record one. Not a failure (a
    new machine is not a regression), but said loudly."""
    rows = [Row(name, None, summarize(s)) for name, s in bench.measure(items).items()]
    print(f"latency gate: NOT JUDGED - no baseline for this machine ({machine()}): {path} does not exist")
    for r in rows:
        print(f"{r.item:<12} ratio {r.first.ratio:.3f} ± {r.first.se:.1%} (spread of one pair {r.first.noise:.1%}, "
              f"{r.first.n} pairs)")
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    print("to judge on this machine, quiet, record a series and commit the file it writes:\n"
          "    for i in $(seq 20); do invoke bench-gate --record runs.tsv; done\n"
          f"    invoke bench-gate --baseline-from runs.tsv        # writes {shown}")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", default=",".join(ITEMS), help=f"comma-separated, from {', '.join(ITEMS)}")
    ap.add_argument("--blocks", type=int, default=9, help="block pairs per item (>= 3)")
    ap.add_argument("--block-s", type=float, default=0.3, help="seconds of calls per block")
    ap.add_argument("--pause", type=float, default=0.15, help="idle seconds before each block")
    ap.add_argument("--baseline", type=Path,
                    help="baseline file (default: this machine's, benchmarks/gate_baselines/<machine>.json)")
    ap.add_argument("--update-baseline", action="store_true",
                    help=f"measure ({BASELINE_BLOCKS} x --blocks pairs) and write the baseline; no verdict")
    ap.add_argument("--record", type=Path, help="append this run's ratios and verdicts to a TSV file")
    ap.add_argument("--baseline-from", type=Path, metavar="RECORD",
                    help="measure nothing: write the baseline from a --record file of >= 5 runs of unchanged code "
                         "(each item's median ratio, its standard error and the runs' spread as drift)")
    ap.add_argument("--note", default="", help="a word for the --record line (e.g. busy-core)")
    args = ap.parse_args(argv)
    items = [i for i in args.items.split(",") if i]
    # Only this machine's own file may be absent (a machine CI has not run on before):
    # a file named on the command line that is missing is a mistake.
    unjudged = args.baseline is None and not args.update_baseline and not args.baseline_from \
        and not machine_baseline().exists()
    args.baseline = args.baseline or machine_baseline()
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="aie-gate-"))
    bench = None
    try:
        if args.baseline_from:
            series = series_from_record(args.baseline_from)
            args.baseline.parent.mkdir(parents=True, exist_ok=True)
            write_series_baseline(args.baseline, series, args.baseline_from)
            for name, st in series.items():
                print(f"{name:<12} ratio {st.ratio:.3f} ± {st.se:.1%} (run-to-run spread {st.drift:.1%}, {st.n} runs)")
            print(f"wrote {args.baseline} from {args.baseline_from}: review its diff and commit it")
            return EXIT_PASS
        if args.blocks < 3:
            raise GateError(f"--blocks {args.blocks}: expected >= 3 (the noise needs a spread)")
        baseline = None if args.update_baseline or unjudged else load_baseline(args.baseline)
        # The baseline is every later run's reference: three times the pairs make its 25th
        # percentile land among the undisturbed pairs even when a third of them were disturbed.
        blocks = args.blocks * (BASELINE_BLOCKS if args.update_baseline else 1)
        print(f"latency gate: {', '.join(items)}; {blocks} block pairs of ~{args.block_s:g} s, "
              f"{args.pause:g} s pause; load average {os.getloadavg()[0]:.2f}"
              + (f"; AIE_GATE_SLOWDOWN={_slowdown():g}" if _slowdown() else ""), flush=True)
        bench = Bench(items, work, blocks, args.block_s, args.pause)
        if unjudged:
            rows = measure_unjudged(bench, items, args.baseline)
        elif args.update_baseline:
            samples = bench.measure(items)
            try:  # the run-to-run drift is the host's, not this measurement's: kept
                drift = {k: st.drift for k, st in load_baseline(args.baseline).items()}
            except GateError:
                drift = {}
            args.baseline.parent.mkdir(parents=True, exist_ok=True)
            write_baseline(args.baseline, samples, blocks, args.block_s, drift)
            for name, s in samples.items():
                st = summarize(s)
                print(f"{name:<12} ratio {st.ratio:.3f} ± {st.se:.1%} (spread of one pair {st.noise:.1%}, {st.n} pairs)")
            print(f"wrote {args.baseline} in {time.monotonic() - start:.0f} s: review its diff and commit it")
            return EXIT_PASS
        else:
            rows = judge(baseline, bench.measure, items)
    except GateError as exc:
        print(f"latency gate broken: {exc}", file=sys.stderr)
        return EXIT_BROKEN
    except Exception:  # noqa: BLE001 - any other failure is a broken benchmark, not a regression
        traceback.print_exc()
        print("latency gate broken: unexpected error above", file=sys.stderr)
        return EXIT_BROKEN
    finally:
        if bench is not None:
            bench.close()
        shutil.rmtree(work, ignore_errors=True)
    status = exit_status(rows)
    wall = time.monotonic() - start
    if unjudged:
        print(f"not judged ({wall:.0f} s, load average {os.getloadavg()[0]:.2f})")
        if args.record:
            append_record(args.record, rows, status, wall, args.note)
        return status
    print(table(rows))
    print(f"{'FAIL: a ratio regressed twice' if status else 'pass'} ({wall:.0f} s, load average "
          f"{os.getloadavg()[0]:.2f}; margin = {MARGIN_FORMULA})")
    if args.record:
        append_record(args.record, rows, status, wall, args.note)
    return status


if __name__ == "__main__":
    sys.exit(main())
