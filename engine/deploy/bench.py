"""`invoke bench`: the seeds' load against a deployed engine — warm-up at
half the target rate, steady state at the target rate, a spike to 150%,
then the target rate again to see it recover — bounded in time, and a
report under build/reports/: bench-<host>.md plus PNG plots of latency
percentiles, throughput, queue depth (sampled from /metrics) and the
per-layer breakdown over time.

Per layer: every answer's `Server-Timing` header (engine.server.timing:
network, decode, queue, compute, encode, in ms) gives p50/p90/p99/p99.9 per
layer and load phase, beside the client's end-to-end latency; "other" in
the breakdown plot is what the header does not hold (writing the answer, the
network both ways, the client's own queueing).

Recovery time: steady-state p99 is the p99 of the steady phase's answered
requests. Windows of RECOVERY_WINDOW_S, by scheduled send time, start at the
spike's end and move in RECOVERY_STEP_S steps; the recovery time is the
start of the first window with answers whose p99 is within RECOVERY_FACTOR x
the steady p99, measured from the spike's end (0 when the first window
already is; "not recovered" when no window within the recovery phase is).

The requests are the model's smoke inputs (models/<name>.smoke.json of the
host's active release), one sample row per request, taken in turn; each
answer is compared with the reference output the converter recorded for that
row. A fast server that answers wrongly is not a fast server: answers that do
not match count as mismatches, apart from HTTP and transport errors, and
neither counts towards the "ok" throughput.

Open loop: requests are scheduled at fixed times and each latency is
measured from its scheduled time, so a slow server cannot hide its backlog
by slowing the load down (coordinated omission). A bounded pool of worker
threads with keep-alive connections sends them; when every worker is busy
the lateness shows up in the latencies, as it would for real clients.
"""

from __future__ import annotations

import http.client
import json
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from engine.deploy import DeployError
from engine.deploy.verify import compare

MAX_TOTAL_S = 600.0  # the whole run, all phases: load must stay bounded
SAMPLE_METRICS_S = 0.5
RECOVERY_WINDOW_S = 1.0
RECOVERY_STEP_S = 0.1
RECOVERY_FACTOR = 1.2
LAYERS = ("network", "decode", "queue", "compute", "encode")   # Server-Timing's names, in its order
PERCENTILES = (50, 90, 99, 99.9)
_QUEUE_RE = re.compile(r'^aie_queue_depth\{model="([^"]+)"\}\s+([0-9.eE+-]+)', re.M)


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    rate: float  # requests per second


def phases(rate: float, warmup_s: float, steady_s: float, spike_s: float, recovery_s: float = 0.0) -> list[Phase]:
    plan = [Phase("warm-up", warmup_s, rate * 0.5), Phase("steady", steady_s, rate), Phase("spike", spike_s, rate * 1.5)]
    if recovery_s:
        plan.append(Phase("recovery", recovery_s, rate))
    total = sum(p.seconds for p in plan)
    if rate <= 0 or any(p.seconds < 0 for p in plan) or total <= 0:
        raise DeployError("bench needs a positive rate and phase durations", where="--rate/--*-s")
    if total > MAX_TOTAL_S:
        raise DeployError(f"bench would run {total:g} s; the limit is {MAX_TOTAL_S:g} s", where="--*-s",
                          hint="shorten the phases")
    return plan


OK, MISMATCH, ERROR = "ok", "mismatch", "error"
MAX_EXAMPLES = 5  # mismatch and error texts kept for the report


@dataclass
class Sample:
    sent_at: float      # scheduled time, seconds since the start
    latency_s: float
    outcome: str        # ok (right answer) | mismatch (HTTP 200, wrong answer) | error (HTTP or transport)
    phase: str
    layers: tuple[float, ...] | None = None   # Server-Timing's LAYERS in ms, when the answer carried it

    @property
    def ok(self) -> bool:
        return self.outcome == OK

    @property
    def answered(self) -> bool:
        """The server answered 200 (right or wrong): its latency is real."""
        return self.outcome != ERROR


@dataclass(frozen=True)
class Request:
    label: str               # which smoke row, for the report
    body: bytes
    expected: list[dict]     # reference output tensors (name, shape, data)
    rtol: float
    atol: float

    def check(self, status: int, raw: bytes) -> tuple[str, str]:
        """(outcome, why) for one answer."""
        if status != 200:
            return ERROR, f"HTTP {status}: {raw[:200].decode(errors='replace')}"
        try:
            outputs = {o.get("name"): o for o in json.loads(raw).get("outputs", [])}
        except (ValueError, AttributeError):
            return MISMATCH, "answer is not KServe v2 JSON"
        for want in self.expected:
            got = outputs.get(want["name"])
            if got is None:
                return MISMATCH, f"output {want['name']!r} missing"
            if list(got.get("shape", [])) != list(want["shape"]):
                return MISMATCH, f"output {want['name']!r} shape {got.get('shape')}, reference {want['shape']}"
            diff = compare(want["name"], got.get("data", []), want["data"], self.rtol, self.atol)
            if diff:
                return MISMATCH, diff
        return OK, ""


@dataclass
class BenchResult:
    url: str
    model: str
    plan: list[Phase]
    samples: list[Sample] = field(default_factory=list)
    queue_depth: list[tuple[float, float]] = field(default_factory=list)  # (t, depth)
    workers: int = 0
    requests: int = 0                                   # distinct request bodies, used in turn
    examples: dict[str, list[str]] = field(default_factory=lambda: {MISMATCH: [], ERROR: []})


def _rows(tensor: dict, n: int) -> list[dict]:
    """A tensor whose first dimension is n, as n tensors of first dimension 1."""
    shape = tensor["shape"]
    width = len(tensor["data"]) // n
    return [{**tensor, "shape": [1, *shape[1:]], "data": tensor["data"][i * width:(i + 1) * width]}
            for i in range(n)]


def reference_requests(reference: dict) -> list[Request]:
    """The smoke reference as requests: one per sample row when every input
    and output has the same first (batch) dimension, else the whole input."""
    ins, outs = reference["inputs"], reference["outputs"]
    first = {t["shape"][0] if t["shape"] else None for t in ins + outs}
    n = first.pop() if len(first) == 1 else None
    tol = {"rtol": reference["rtol"], "atol": reference["atol"]}

    def body(tensors: list[dict]) -> bytes:
        return json.dumps({"inputs": [{k: t[k] for k in ("name", "shape", "datatype", "data")}
                                      for t in tensors]}).encode()
    if not isinstance(n, int) or n < 2:
        return [Request("the smoke input", body(ins), outs, **tol)]
    in_rows = [_rows(t, n) for t in ins]
    out_rows = [_rows(t, n) for t in outs]
    labels = reference.get("labels") or list(range(n))
    return [Request(f"sample row {i} (label {labels[i]})", body([r[i] for r in in_rows]), [r[i] for r in out_rows],
                    **tol) for i in range(n)]


def _connect(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=30)


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def parse_server_timing(value: str | None) -> tuple[float, ...] | None:
    """LAYERS' durations (ms) from a Server-Timing header; None when absent
    or when it lacks one of them (an engine older than the header)."""
    if not value:
        return None
    found = {}
    for item in value.split(","):
        name, _, params = item.strip().partition(";")
        for param in params.split(";"):
            key, _, dur = param.strip().partition("=")
            if key == "dur":
                try:
                    found[name] = float(dur)
                except ValueError:
                    return None
    try:
        return tuple(found[name] for name in LAYERS)
    except KeyError:
        return None


def _worker(url: str, path: str, requests: list[Request], jobs: queue.Queue, result: BenchResult,
            lock: threading.Lock, t0: float, token: str | None) -> None:
    conn = _connect(url)
    headers = {"Content-Type": "application/json", **_headers(token)}
    while True:
        job = jobs.get()
        if job is None:
            break
        scheduled, phase, index = job
        request = requests[index % len(requests)]
        delay = t0 + scheduled - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        layers = None
        try:
            conn.request("POST", path, request.body, headers)
            resp = conn.getresponse()
            raw = resp.read()
            latency = time.monotonic() - (t0 + scheduled)  # the answer is in; checking it is our time
            outcome, why = request.check(resp.status, raw)
            layers = parse_server_timing(resp.getheader("Server-Timing"))
        except (OSError, http.client.HTTPException) as exc:
            latency = time.monotonic() - (t0 + scheduled)
            outcome, why = ERROR, f"{type(exc).__name__}: {exc}"
            conn.close()
            conn = _connect(url)
        with lock:
            result.samples.append(Sample(scheduled, latency, outcome, phase, layers))
            if outcome != OK and len(result.examples[outcome]) < MAX_EXAMPLES:
                result.examples[outcome].append(f"{request.label}: {why}")
    conn.close()


def _sample_queue(url: str, model: str, stop: threading.Event, out: list, t0: float, token: str | None) -> None:
    conn = _connect(url)
    while not stop.wait(SAMPLE_METRICS_S):
        try:
            conn.request("GET", "/metrics", headers=_headers(token))
            text = conn.getresponse().read().decode()
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = _connect(url)
            continue
        depth = sum(float(v) for m, v in _QUEUE_RE.findall(text) if m == model)
        out.append((time.monotonic() - t0, depth))
    conn.close()


def run_load(url: str, model: str, plan: list[Phase], requests: list[Request], workers: int = 32,
             token: str | None = None) -> BenchResult:
    """Drive the phases against url with `requests` (reference_requests of the
    model's smoke reference), each answer checked against its expected
    output; every request is scheduled up front, the k-th one sending
    requests[k mod len(requests)]."""
    if not requests:
        raise DeployError("bench needs at least one request", where=model)
    result = BenchResult(url=url, model=model, plan=plan, workers=workers, requests=len(requests))
    jobs: queue.Queue = queue.Queue()
    start, index = 0.0, 0
    for p in plan:
        n = int(p.seconds * p.rate)
        for i in range(n):
            jobs.put((start + i / p.rate, p.name, index))
            index += 1
        start += p.seconds
    lock, stop = threading.Lock(), threading.Event()
    t0 = time.monotonic() + 0.2  # time for the workers to connect
    threads = [threading.Thread(target=_worker, args=(url, f"/v2/models/{model}/infer", requests, jobs, result,
                                                      lock, t0, token), daemon=True) for _ in range(workers)]
    for _ in threads:
        jobs.put(None)
    sampler = threading.Thread(target=_sample_queue, args=(url, model, stop, result.queue_depth, t0, token),
                               daemon=True)
    sampler.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=MAX_TOTAL_S + 60)
    stop.set()
    sampler.join(timeout=5)
    result.samples.sort(key=lambda s: s.sent_at)
    return result


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return values[k]


def layer_percentiles(result: BenchResult) -> list[dict]:
    """Per load phase and layer (LAYERS, then the client's end-to-end):
    PERCENTILES in ms over the answered requests that carried Server-Timing
    (end-to-end: over every answered request)."""
    rows = []
    for p in result.plan:
        answered = [s for s in result.samples if s.phase == p.name and s.answered]
        timed = [s.layers for s in answered if s.layers is not None]
        columns = [(name, [t[i] for t in timed]) for i, name in enumerate(LAYERS)]
        columns.append(("end-to-end", [s.latency_s * 1e3 for s in answered]))
        for name, values in columns:
            rows.append({"phase": p.name, "layer": name, "n": len(values),
                         **{f"p{q:g}": _percentile(values, q) for q in PERCENTILES}})
    return rows


def recovery(result: BenchResult) -> dict:
    """The recovery time after the spike (module docstring): {steady_p99_ms,
    threshold_ms, spike_end_s, recovery_s (None: not recovered or no
    recovery phase), window_p99_ms (of the window that recovered)}."""
    start, spike_end, after = 0.0, None, None
    for p in result.plan:
        start += p.seconds
        if p.name == "spike":
            spike_end = start
        elif spike_end is not None and after is None:
            after = start        # the end of the phase after the spike
    steady = [s.latency_s * 1e3 for s in result.samples if s.phase == "steady" and s.answered]
    steady_p99 = _percentile(steady, 99)
    out = {"steady_p99_ms": steady_p99, "threshold_ms": steady_p99 * RECOVERY_FACTOR, "spike_end_s": spike_end,
           "recovery_s": None, "window_p99_ms": None}
    if spike_end is None or after is None or not steady:
        return out
    answered = sorted((s.sent_at, s.latency_s * 1e3) for s in result.samples if s.answered)
    steps = int(round((after - spike_end - RECOVERY_WINDOW_S) / RECOVERY_STEP_S))
    for k in range(max(0, steps) + 1):
        lo = spike_end + k * RECOVERY_STEP_S
        window = [lat for t, lat in answered if lo <= t < lo + RECOVERY_WINDOW_S]
        if window and (p99 := _percentile(window, 99)) <= out["threshold_ms"]:
            out["recovery_s"], out["window_p99_ms"] = round(k * RECOVERY_STEP_S, 3), p99
            break
    return out


def per_second(result: BenchResult) -> list[dict]:
    """One row per second of the run: sent, ok, p50/p90/p99 latency (ms)."""
    rows: dict[int, list[Sample]] = {}
    for s in result.samples:
        rows.setdefault(int(s.sent_at), []).append(s)
    out = []
    for sec in sorted(rows):
        lat = [s.latency_s * 1e3 for s in rows[sec] if s.answered]
        out.append({"t": sec, "sent": len(rows[sec]), "ok": sum(s.ok for s in rows[sec]),
                    "p50": _percentile(lat, 50), "p90": _percentile(lat, 90), "p99": _percentile(lat, 99)})
    return out


def summary(result: BenchResult) -> list[dict]:
    """Per phase: counts, latency percentiles and the achieved rate: right
    answers over the time the phase really took (its start to its last
    answer), so a server that falls behind reads as falling behind."""
    rows = []
    start = 0.0
    for p in result.plan:
        ss = [s for s in result.samples if s.phase == p.name]
        lat = [s.latency_s * 1e3 for s in ss if s.answered]
        ok = sum(s.ok for s in ss)
        elapsed = max((s.sent_at + s.latency_s for s in ss), default=start) - start
        start += p.seconds
        rows.append({"phase": p.name, "seconds": p.seconds, "target_rps": p.rate, "sent": len(ss),
                     "ok": ok, "mismatches": sum(s.outcome == MISMATCH for s in ss),
                     "errors": sum(s.outcome == ERROR for s in ss), "elapsed_s": elapsed,
                     "achieved_rps": ok / elapsed if elapsed > 0 else 0.0,
                     "p50": _percentile(lat, 50), "p90": _percentile(lat, 90), "p99": _percentile(lat, 99),
                     "p99.9": _percentile(lat, 99.9), "max": max(lat) if lat else float("nan")})
    return rows


def _plots(result: BenchResult, out_dir: Path, stem: str) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    rows = per_second(result)
    t = [r["t"] for r in rows]
    edges, start = [], 0.0
    for p in result.plan:
        edges.append((start, p.name))
        start += p.seconds
    files = []

    def finish(ax, ylabel: str, name: str) -> None:
        for x, label in edges:
            ax.axvline(x, color="grey", linestyle=":", linewidth=0.8)
            ax.text(x + 0.2, ax.get_ylim()[1] * 0.95, label, fontsize=8, va="top")
        ax.set_xlabel("time since start (s)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        path = out_dir / f"{stem}-{name}.png"
        ax.figure.tight_layout()
        ax.figure.savefig(path, dpi=100, metadata={"Software": "ai-engine bench"})
        plt.close(ax.figure)
        files.append(path)

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for q in ("p50", "p90", "p99"):
        ax.plot(t, [r[q] for r in rows], label=q)
    ax.legend()
    ax.set_title(f"latency, {result.model} at {result.url}")
    finish(ax, "latency (ms)", "latency")

    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(t, [r["sent"] for r in rows], label="offered", linestyle="--")
    ax.plot(t, [r["ok"] for r in rows], label="answered correctly")
    ax.legend()
    ax.set_title("throughput (requests per second, by scheduled second)")
    finish(ax, "requests / s", "throughput")

    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.step([q[0] for q in result.queue_depth], [q[1] for q in result.queue_depth], where="post")
    ax.set_title(f"queue depth of {result.model} (from /metrics every {SAMPLE_METRICS_S:g} s)")
    finish(ax, "queued requests", "queue")

    layers = layer_breakdown(result)
    if not layers:
        return files   # no answer carried Server-Timing (an engine older than the header)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.stackplot([r["t"] for r in layers], *[[r[name] for r in layers] for name in (*LAYERS, "other")],
                 labels=[*LAYERS, "other (write, network, client)"])
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title("mean latency per layer (Server-Timing), by scheduled second")
    finish(ax, "latency (ms)", "layers")
    return files


def layer_breakdown(result: BenchResult) -> list[dict]:
    """Per scheduled second: the mean of each Server-Timing layer and
    "other" (mean end-to-end minus their sum), over the answers that carried
    the header: the stack adds up to their mean end-to-end latency."""
    rows: dict[int, list[Sample]] = {}
    for s in result.samples:
        if s.answered and s.layers is not None:
            rows.setdefault(int(s.sent_at), []).append(s)
    out = []
    for sec in sorted(rows):
        ss = rows[sec]
        means = {name: sum(s.layers[i] for s in ss) / len(ss) for i, name in enumerate(LAYERS)}
        end_to_end = sum(s.latency_s for s in ss) * 1e3 / len(ss)
        out.append({"t": sec, **means, "other": max(0.0, end_to_end - sum(means.values()))})
    return out


def error_rate(result: BenchResult) -> float:
    """Errors (HTTP or transport) over every request sent; 1.0 when none was sent."""
    return sum(s.outcome == ERROR for s in result.samples) / len(result.samples) if result.samples else 1.0


def ms(value: float) -> str:
    """A latency for people: '-' where nothing answered (not 'nan')."""
    return "-" if value != value else f"{value:.2f}"


def write_report(result: BenchResult, out_dir: Path, host: str, failed: bool = False) -> Path:
    """bench-<host>.md (+ plots); a failed run writes bench-<host>-failed.md
    instead, so the last good report is never overwritten by a bad one."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"bench-{host}" + ("-failed" if failed else "")
    plots = _plots(result, out_dir, stem)
    lines = [
        f"<!-- generated by `invoke bench --host {host}` (engine.deploy.bench); rerun to refresh -->",
        f"# Load report: {result.model} on {host}",
        "",
        f"Target {result.url}, {result.workers} client threads with keep-alive, open loop (latency measured "
        "from each request's scheduled time), one JSON request per call: the model's smoke inputs "
        f"({result.requests} distinct request(s), in turn), each answer compared with its reference output. "
        "ok = HTTP 200 with the right answer; mismatches = HTTP 200 with a wrong answer; errors = any other "
        "HTTP status or no answer. Latencies are of every HTTP 200; achieved req/s = ok answers / the time the "
        "phase really took (from its start to its last answer).",
        *(["", "**This run failed** (see the errors below); the last good report is bench-"
           f"{host}.md."] if failed else []),
        "",
        "| phase | s | target req/s | sent | ok | mismatches | errors | took s | achieved req/s | p50 ms | p90 ms "
        "| p99 ms | p99.9 ms | max ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary(result):
        lines.append(f"| {r['phase']} | {r['seconds']:g} | {r['target_rps']:g} | {r['sent']} | {r['ok']} | "
                     f"{r['mismatches']} | {r['errors']} | {r['elapsed_s']:.2f} | {r['achieved_rps']:.1f} | "
                     f"{ms(r['p50'])} | {ms(r['p90'])} | {ms(r['p99'])} | {ms(r['p99.9'])} | {ms(r['max'])} |")
    rec = recovery(result)
    if rec["spike_end_s"] is None:
        rec_text = "no spike phase"
    elif rec["recovery_s"] is not None:
        rec_text = (f"**{rec['recovery_s']:g} s** after the spike ended (the first {RECOVERY_WINDOW_S:g} s window "
                    f"from there has p99 {ms(rec['window_p99_ms'])} ms)")
    elif any(p.name == "recovery" for p in result.plan):
        rec_text = "**not recovered** within the recovery phase"
    else:
        rec_text = "not measured (no recovery phase: --recovery-s 0)"
    lines += ["", f"Recovery time: {rec_text}; steady-state p99 {ms(rec['steady_p99_ms'])} ms, threshold "
                  f"{RECOVERY_FACTOR:g} x = {ms(rec['threshold_ms'])} ms (p99 of sliding {RECOVERY_WINDOW_S:g} s "
                  f"windows by send time, {RECOVERY_STEP_S:g} s steps, from the spike's end).",
              "", "Per layer (ms; the answers' Server-Timing headers: network = first byte to body read, decode, "
                  "queue, compute = the batch's run, encode = the answer's bytes built; end-to-end = the client's "
                  "latency from the scheduled send):", "",
              "| phase | layer | n | " + " | ".join(f"p{q:g}" for q in PERCENTILES) + " |",
              "|---|---|---|" + "---|" * len(PERCENTILES)]
    for r in layer_percentiles(result):
        lines.append(f"| {r['phase']} | {r['layer']} | {r['n']} | "
                     + " | ".join(ms(r[f'p{q:g}']) for q in PERCENTILES) + " |")
    for outcome, title in ((MISMATCH, "Mismatches (first few)"), (ERROR, "Errors (first few)")):
        if result.examples[outcome]:
            lines += ["", f"{title}:", ""] + [f"- {text}" for text in result.examples[outcome]]
    depth = [d for _, d in result.queue_depth]
    lines += ["", f"Queue depth (from /metrics): max {max(depth) if depth else 0:g}, "
                  f"{len(depth)} samples.", ""]
    lines += [f"![{p.stem.split('-')[-1]}]({p.name})" for p in plots] or ["(matplotlib not installed: no plots)"]
    path = out_dir / f"{stem}.md"
    path.write_text("\n".join(lines) + "\n")
    return path
