"""The traffic-weighted canary (deploy.canary with a balancer): the canary
host, already running the new release, takes a growing share of the
traffic through HAProxy weights; after each step its error rate and p99
latency over that step are judged against the rest of the fleet's, and the
first step that fails sends its traffic elsewhere at once (weight 0) and
puts its previous release back.

Figures come from each engine's own /metrics (Prometheus text): the answers
by status code (aie_requests_total) and the request latency histogram
(aie_request_duration_seconds), as deltas between the step's start and end,
so whatever the hosts served before does not count. A step ends when the
canary has answered min_requests in it, or after step_s; fewer answers by
then fail the step (no evidence is no go: a quiet hour never widens a
release nobody has tried). Errors are server errors (status >= 500: the
binary protocol's error frames carry the same codes); a 4xx is the client's.

Pure parts (weights, parsing, percentiles, the judgement) are functions on
numbers; run_canary is the loop that applies them.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from hostspec.balancer import backends, balancer_hosts
from hostspec.schema import fill_defaults, load_schema

from engine.deploy import DeployError
from engine.deploy.haproxy import MAX_WEIGHT, RuntimeAPI
from engine.deploy.targets import HostResult, Target

POLL_S = 0.1        # how often the canary's counters are read while a step runs


@dataclass(frozen=True)
class Policy:
    host: str
    steps: tuple[int, ...]
    step_s: float
    min_requests: int
    max_error_rate: float
    max_p99_ratio: float

    @classmethod
    def from_spec(cls, canary: str | dict | None) -> "Policy | None":
        """deploy.canary of a loaded spec: a host name is {host: NAME} with
        the schema's defaults (the one place they are written)."""
        if canary is None:
            return None
        if isinstance(canary, str):
            schema = load_schema()["properties"]["deploy"]["properties"]["canary"]
            canary = fill_defaults({"host": canary}, schema)
        return cls(canary["host"], tuple(canary["steps"]), float(canary["step_s"]), int(canary["min_requests"]),
                   float(canary["max_error_rate"]), float(canary["max_p99_ratio"]))


# ---- weights --------------------------------------------------------------------

def share_weights(percent: int, others: int) -> tuple[int, int]:
    """(canary weight, weight of each other host) so that the canary's share
    canary / (canary + others * other) is `percent`, as near as HAProxy's
    whole weights 0..256 allow (the largest such pair: finer steps)."""
    if not 1 <= percent <= 100:
        raise ValueError(f"a share is 1..100 percent, not {percent!r}")
    if percent == 100 or others == 0:
        return MAX_WEIGHT, 0
    best = (float("inf"), 0, 0)
    for other in range(MAX_WEIGHT, 0, -1):
        # Clamped: with many hosts the exact share may lie beyond 1..256.
        canary = min(MAX_WEIGHT, max(1, round(percent * others * other / (100 - percent))))
        error = abs(100 * canary / (canary + others * other) - percent)
        if error < best[0] - 1e-12:
            best = (error, canary, other)
    return best[1], best[2]


# ---- figures ----------------------------------------------------------------------

@dataclass(frozen=True)
class Counts:
    """One engine's inference answers so far: total, server errors, and the
    latency histogram (cumulative counts per upper bound, +inf last)."""
    answers: int = 0
    errors: int = 0
    bounds: tuple[float, ...] = ()
    buckets: tuple[int, ...] = ()

    def minus(self, earlier: "Counts") -> "Counts":
        """The answers since `earlier` (counters only grow while one engine runs)."""
        if not earlier.bounds:
            return self
        return Counts(self.answers - earlier.answers, self.errors - earlier.errors, self.bounds,
                      tuple(a - b for a, b in zip(self.buckets, earlier.buckets)))

    def plus(self, other: "Counts") -> "Counts":
        if not other.bounds:
            return self
        if not self.bounds:
            return other
        return Counts(self.answers + other.answers, self.errors + other.errors, self.bounds,
                      tuple(a + b for a, b in zip(self.buckets, other.buckets)))

    @property
    def error_rate(self) -> float:
        return self.errors / self.answers if self.answers else 0.0

    def p99(self) -> float | None:
        return quantile(0.99, self.bounds, self.buckets)


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\} (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_counts(text: str) -> Counts:
    """The inference answers in an engine's /metrics text, over every model
    and both protocols (health checks and metadata are not inferences)."""
    answers = errors = 0
    per_bound: dict[float, int] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        name, labels, value = m.group(1), dict(_LABEL.findall(m.group(2))), float(m.group(3))
        if name == "aie_requests_total" and labels.get("model") and labels.get("protocol") in ("http", "binary"):
            answers += int(value)
            errors += int(value) if int(labels.get("code", "0")) >= 500 else 0
        elif name == "aie_request_duration_seconds_bucket":
            bound = float("inf") if labels["le"] == "+Inf" else float(labels["le"])
            per_bound[bound] = per_bound.get(bound, 0) + int(value)
    bounds = tuple(sorted(per_bound))
    return Counts(answers, errors, bounds, tuple(per_bound[b] for b in bounds))


def quantile(q: float, bounds: tuple[float, ...], cumulative: tuple[int, ...]) -> float | None:
    """The q-quantile of a cumulative histogram, interpolated linearly inside
    its bucket as Prometheus' histogram_quantile does; None without samples.
    In the +inf bucket: the last finite bound (nothing larger is known)."""
    if not cumulative or cumulative[-1] <= 0:
        return None
    rank = q * cumulative[-1]
    lower, below = 0.0, 0
    for bound, count in zip(bounds, cumulative):
        if count >= rank:
            if bound == float("inf"):
                return lower
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, count
    return lower


# ---- the judgement ------------------------------------------------------------------

@dataclass
class Step:
    """One step of the ramp, as the decision log keeps it."""
    percent: int
    weights: tuple[int, int]         # (canary, each other host)
    requests: int
    errors: int
    p99_s: float | None
    fleet_p99_s: float | None
    seconds: float
    decision: str                    # widen | done | roll back
    reason: str = ""

    def line(self, index: int, total: int) -> str:
        ms = lambda s: "-" if s is None else f"{s * 1e3:.2f} ms"  # noqa: E731
        rate = self.errors / self.requests if self.requests else 0.0
        return (f"step {index}/{total} share {self.percent}%: {self.requests} requests in {self.seconds:.1f} s, "
                f"error rate {rate:.2%}, p99 {ms(self.p99_s)} vs fleet {ms(self.fleet_p99_s)}: {self.decision}"
                + (f" ({self.reason})" if self.reason else ""))


def judge(policy: Policy, canary: Counts, fleet_p99_s: float | None) -> str:
    """Why the step fails, or "" when the canary may widen. Error rate first
    (a wrong answer matters more than a slow one), then evidence, then p99
    against the fleet's (no fleet reference: that rule cannot fail)."""
    if canary.answers and canary.error_rate > policy.max_error_rate:
        return (f"error rate {canary.error_rate:.2%} ({canary.errors} of {canary.answers}) is above "
                f"max_error_rate {policy.max_error_rate:.2%}")
    if canary.answers < policy.min_requests:
        return (f"only {canary.answers} requests in {policy.step_s:g} s, fewer than min_requests "
                f"{policy.min_requests}: not enough evidence to widen")
    p99 = canary.p99()
    if p99 is not None and fleet_p99_s:
        ratio = p99 / fleet_p99_s
        if ratio > policy.max_p99_ratio:
            return (f"p99 {p99 * 1e3:.2f} ms is {ratio:.2f}x the fleet's {fleet_p99_s * 1e3:.2f} ms, above "
                    f"max_p99_ratio {policy.max_p99_ratio:g}")
    return ""


def failed_early(policy: Policy, canary: Counts) -> bool:
    """More errors than the step could hold within max_error_rate even if
    every answer up to min_requests succeeded: no need to wait it out."""
    return canary.errors > policy.max_error_rate * max(policy.min_requests, canary.answers)


# ---- the ramp -----------------------------------------------------------------------

@dataclass(frozen=True)
class Host:
    name: str                       # the host's server name in HAProxy
    metrics: Callable[[], str]      # its /metrics text


def metrics_reader(base_url: str, token: str | None = None, timeout_s: float = 5.0) -> Callable[[], str]:
    """GET base_url/metrics (with the deployer's token where auth closes it)."""
    def read() -> str:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        req = urllib.request.Request(base_url.rstrip("/") + "/metrics", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return resp.read().decode()
        except OSError as exc:
            raise DeployError(f"cannot read the engine's metrics: {exc}", where=req.full_url) from None
    return read


@dataclass
class CanaryResult:
    ok: bool
    reason: str = ""
    steps: list[Step] = field(default_factory=list)
    rollback: str = ""               # what the rollback said (failed ramps only)
    rolled_back: bool = False        # the previous release serves again on the canary
    log: Path | None = None


def _counts(hosts: list[Host]) -> Counts:
    total = Counts()
    for h in hosts:
        total = total.plus(parse_counts(h.metrics()))
    return total


def run_canary(api: RuntimeAPI, canary: Host, fleet: list[Host], policy: Policy,
               say: Callable[[str], None], rollback: Callable[[], str], log_dir: Path) -> CanaryResult:
    """Ramp `canary` through policy.steps against `fleet` (the other engine
    hosts behind the balancer). Passed: every host back at its weight of
    before, the canary serving the new release. Failed: the canary's weight
    0 at once, then `rollback()` (its previous release; returns what it
    did, raises DeployError), then its weight back. The decision log goes to
    `say` line by line and to log_dir/canary-<timestamp>.{log,json}."""
    before = api.weights()
    result = CanaryResult(ok=False)
    fleet_p99: float | None = None
    try:
        for index, percent in enumerate(policy.steps, 1):
            weights = share_weights(percent, len(fleet))
            api.set_weight(canary.name, weights[0])
            for h in fleet:
                api.set_weight(h.name, weights[1])
            t0 = time.monotonic()
            start_canary, start_fleet = parse_counts(canary.metrics()), _counts(fleet)
            while True:
                seen = parse_counts(canary.metrics()).minus(start_canary)
                elapsed = time.monotonic() - t0
                if seen.answers >= policy.min_requests or elapsed >= policy.step_s or failed_early(policy, seen):
                    break
                time.sleep(POLL_S)  # polling the canary's own counters, bounded by step_s
            served = _counts(fleet).minus(start_fleet)
            # At 100% the fleet serves nothing: the reference is its last step's p99.
            fleet_p99 = served.p99() if served.answers else fleet_p99
            reason = judge(policy, seen, fleet_p99)
            decision = "roll back" if reason else ("done" if index == len(policy.steps) else "widen")
            step = Step(percent, weights, seen.answers, seen.errors, seen.p99(), fleet_p99,
                        round(elapsed, 2), decision, reason)
            result.steps.append(step)
            say(step.line(index, len(policy.steps)))
            if reason:
                result.reason = f"canary {canary.name} at {percent}%: {reason}"
                api.set_weight(canary.name, 0)
                for h in fleet:
                    api.set_weight(h.name, before.get(h.name, 100))
                break
        else:
            result.ok = True
    except DeployError as exc:
        # The balancer or a host's metrics stopped answering: no figures, no go.
        result.reason = f"canary {canary.name}: {exc}"
        _try(lambda: api.set_weight(canary.name, 0))
        for h in fleet:
            _try(lambda h=h: api.set_weight(h.name, before.get(h.name, 100)))
    if result.ok:
        for name in [canary.name, *(h.name for h in fleet)]:
            api.set_weight(name, before.get(name, 100))
        say(f"canary {canary.name}: every step held; weights back to {before.get(canary.name, 100)}")
    else:
        say(f"rolling canary {canary.name} back: {result.reason}")
        try:
            result.rollback = rollback()
            result.rolled_back = True
            api.set_weight(canary.name, before.get(canary.name, 100))
            say(f"canary {canary.name}: {result.rollback}; its weight is back to {before.get(canary.name, 100)}")
        except DeployError as exc:
            result.rollback = f"rollback failed: {exc}; the canary stays at weight 0"
            say(f"canary {canary.name}: {result.rollback}")
    result.log = write_log(log_dir, canary.name, policy, result)
    return result


def _try(action: Callable[[], None]) -> None:
    try:
        action()
    except DeployError:
        pass  # best effort while already failing; the reason reported is the first one


def write_log(log_dir: Path, host: str, policy: Policy, result: CanaryResult) -> Path:
    """log_dir/canary-<UTC timestamp, ms>.log (the lines said) and .json (the figures)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    now = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"{int(now * 1000) % 1000:03d}Z"
    path = log_dir / f"canary-{stamp}.log"
    lines = [s.line(i, len(policy.steps)) for i, s in enumerate(result.steps, 1)]
    lines.append(("passed: every step held" if result.ok else f"rolled back: {result.reason}; {result.rollback}"))
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
    doc = {"host": host, "policy": asdict(policy), "ok": result.ok, "reason": result.reason,
           "rollback": result.rollback, "steps": [asdict(s) for s in result.steps]}
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path.with_suffix(".json"))
    return path


# ---- the deploy pipeline's canary step -------------------------------------------------

def fleet_ramp(spec, bundle_manifest: dict, say: Callable[[str, str], None], log_dir: Path,
               api: RuntimeAPI | None = None) -> Callable[[Target, HostResult], HostResult] | None:
    """What run_fleet does with the canary once its install succeeded, for a
    spec whose canary stands behind a balancer with other engine hosts: the
    ramp, and on failure the host's own rollback (`remote rollback`). None
    where there is no ramp (no canary, no balancer: deployed alone first).
    Each engine's /metrics is read where the balancer reaches it."""
    data = spec.data
    policy = Policy.from_spec(data["deploy"]["canary"])
    behind = {b.name: b.address for b in backends(data)} if balancer_hosts(data) else {}
    if policy is None or policy.host not in behind or len(behind) < 2:
        return None
    if api is None:   # the pipeline passes the balancer host's client (local socket or over SSH)
        api = RuntimeAPI(data["balancer"]["runtime_socket"])
    port = data["engine"]["http_port"]

    def ramp(target: Target, installed: HostResult) -> HostResult:
        auth = bundle_manifest["engine"].get("auth") or {}
        token = None if auth.get("open_metrics", True) else target.deployer_token(auth)
        hosts = {n: Host(n, metrics_reader(f"http://{f'[{a}]' if ':' in a else a}:{port}", token))
                 for n, a in behind.items()}

        def rollback() -> str:
            back = target.operate("rollback")
            if back.status != "switched":
                raise DeployError(back.reason or back.status, where=target.name)
            return f"rolled back to release {back.active}"

        result = run_canary(api, hosts[policy.host], [h for n, h in hosts.items() if n != policy.host], policy,
                            lambda line: say(target.name, line), rollback, log_dir)
        installed.steps += [s.line(i, len(policy.steps)) for i, s in enumerate(result.steps, 1)]
        if not result.ok:
            installed.status = "rolled-back" if result.rolled_back else "failed"
            installed.reason = f"{result.reason}; {result.rollback}"
            installed.active = installed.data.get("previous") if result.rolled_back else None
        installed.steps.append(f"canary log: {result.log}")
        return installed

    return ramp
