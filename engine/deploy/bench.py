"""`invoke bench`: the seeds' three-phase load against a deployed engine —
warm-up at half the target rate, steady state at the target rate, then a
spike to 150% — bounded in time, and a report under build/reports/:
bench-<host>.md plus PNG plots of latency percentiles, throughput and queue
depth (sampled from /metrics) over time.

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
import random
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from engine.deploy import DeployError

MAX_TOTAL_S = 600.0  # the whole run, all phases: load must stay bounded
SAMPLE_METRICS_S = 0.5
_QUEUE_RE = re.compile(r'^aie_queue_depth\{model="([^"]+)"\}\s+([0-9.eE+-]+)', re.M)


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    rate: float  # requests per second


def phases(rate: float, warmup_s: float, steady_s: float, spike_s: float) -> list[Phase]:
    plan = [Phase("warm-up", warmup_s, rate * 0.5), Phase("steady", steady_s, rate), Phase("spike", spike_s, rate * 1.5)]
    total = sum(p.seconds for p in plan)
    if rate <= 0 or any(p.seconds < 0 for p in plan) or total <= 0:
        raise DeployError("bench needs a positive rate and phase durations", where="--rate/--*-s")
    if total > MAX_TOTAL_S:
        raise DeployError(f"bench would run {total:g} s; the limit is {MAX_TOTAL_S:g} s", where="--*-s",
                          hint="shorten the phases")
    return plan


@dataclass
class Sample:
    sent_at: float      # scheduled time, seconds since the start
    latency_s: float
    ok: bool
    phase: str


@dataclass
class BenchResult:
    url: str
    model: str
    plan: list[Phase]
    samples: list[Sample] = field(default_factory=list)
    queue_depth: list[tuple[float, float]] = field(default_factory=list)  # (t, depth)
    workers: int = 0


def _request_body(url: str, model: str, seed: int = 0) -> bytes:
    """One batch-1 request from the model's metadata, seeded random data."""
    conn = _connect(url)
    try:
        conn.request("GET", f"/v2/models/{model}")
        resp = conn.getresponse()
        meta = json.loads(resp.read() or b"{}")
    finally:
        conn.close()
    if resp.status != 200:
        raise DeployError(f"model metadata answered HTTP {resp.status}", where=f"{url}/v2/models/{model}",
                          hint="is the engine deployed and serving this model? (invoke status)")
    rng = random.Random(seed)
    inputs = []
    for t in meta["inputs"]:
        shape = [d if d > 0 else 1 for d in t["shape"]]
        n = 1
        for d in shape:
            n *= d
        data = [rng.random() for _ in range(n)] if t["datatype"].startswith("FP") else [rng.randrange(2) for _ in range(n)]
        inputs.append({"name": t["name"], "shape": shape, "datatype": t["datatype"], "data": data})
    return json.dumps({"inputs": inputs}).encode()


def _connect(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=30)


def _worker(url: str, path: str, body: bytes, jobs: queue.Queue, out: list, lock: threading.Lock, t0: float) -> None:
    conn = _connect(url)
    headers = {"Content-Type": "application/json"}
    while True:
        job = jobs.get()
        if job is None:
            break
        scheduled, phase = job
        delay = t0 + scheduled - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        try:
            conn.request("POST", path, body, headers)
            resp = conn.getresponse()
            resp.read()
            ok = resp.status == 200
        except (OSError, http.client.HTTPException):
            ok = False
            conn.close()
            conn = _connect(url)
        sample = Sample(scheduled, time.monotonic() - (t0 + scheduled), ok, phase)
        with lock:
            out.append(sample)
    conn.close()


def _sample_queue(url: str, model: str, stop: threading.Event, out: list, t0: float) -> None:
    conn = _connect(url)
    while not stop.wait(SAMPLE_METRICS_S):
        try:
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = _connect(url)
            continue
        depth = sum(float(v) for m, v in _QUEUE_RE.findall(text) if m == model)
        out.append((time.monotonic() - t0, depth))
    conn.close()


def run_load(url: str, model: str, plan: list[Phase], workers: int = 32) -> BenchResult:
    """Drive the phases against url; every request is scheduled up front."""
    body = _request_body(url, model)
    result = BenchResult(url=url, model=model, plan=plan, workers=workers)
    jobs: queue.Queue = queue.Queue()
    start = 0.0
    for p in plan:
        n = int(p.seconds * p.rate)
        for i in range(n):
            jobs.put((start + i / p.rate, p.name))
        start += p.seconds
    lock, stop = threading.Lock(), threading.Event()
    t0 = time.monotonic() + 0.2  # time for the workers to connect
    threads = [threading.Thread(target=_worker, args=(url, f"/v2/models/{model}/infer", body, jobs, result.samples,
                                                      lock, t0), daemon=True) for _ in range(workers)]
    for _ in threads:
        jobs.put(None)
    sampler = threading.Thread(target=_sample_queue, args=(url, model, stop, result.queue_depth, t0), daemon=True)
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


def per_second(result: BenchResult) -> list[dict]:
    """One row per second of the run: sent, ok, p50/p90/p99 latency (ms)."""
    rows: dict[int, list[Sample]] = {}
    for s in result.samples:
        rows.setdefault(int(s.sent_at), []).append(s)
    out = []
    for sec in sorted(rows):
        lat = [s.latency_s * 1e3 for s in rows[sec] if s.ok]
        out.append({"t": sec, "sent": len(rows[sec]), "ok": len(lat), "p50": _percentile(lat, 50),
                    "p90": _percentile(lat, 90), "p99": _percentile(lat, 99)})
    return out


def summary(result: BenchResult) -> list[dict]:
    rows = []
    for p in result.plan:
        ss = [s for s in result.samples if s.phase == p.name]
        lat = [s.latency_s * 1e3 for s in ss if s.ok]
        rows.append({"phase": p.name, "seconds": p.seconds, "target_rps": p.rate, "sent": len(ss),
                     "ok": len(lat), "errors": len(ss) - len(lat),
                     "achieved_rps": len(lat) / p.seconds if p.seconds else 0.0,
                     "p50": _percentile(lat, 50), "p90": _percentile(lat, 90), "p99": _percentile(lat, 99),
                     "max": max(lat) if lat else float("nan")})
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
    ax.plot(t, [r["ok"] for r in rows], label="answered OK")
    ax.legend()
    ax.set_title("throughput (requests per second, by scheduled second)")
    finish(ax, "requests / s", "throughput")

    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.step([q[0] for q in result.queue_depth], [q[1] for q in result.queue_depth], where="post")
    ax.set_title(f"queue depth of {result.model} (from /metrics every {SAMPLE_METRICS_S:g} s)")
    finish(ax, "queued requests", "queue")
    return files


def write_report(result: BenchResult, out_dir: Path, host: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"bench-{host}"
    plots = _plots(result, out_dir, stem)
    lines = [
        f"<!-- generated by `invoke bench --host {host}` (engine.deploy.bench); rerun to refresh -->",
        f"# Load report: {result.model} on {host}",
        "",
        f"Target {result.url}, {result.workers} client threads with keep-alive, open loop (latency measured "
        "from each request's scheduled time), one batch-1 JSON request per call.",
        "",
        "| phase | s | target req/s | sent | ok | errors | achieved req/s | p50 ms | p90 ms | p99 ms | max ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary(result):
        lines.append(f"| {r['phase']} | {r['seconds']:g} | {r['target_rps']:g} | {r['sent']} | {r['ok']} | "
                     f"{r['errors']} | {r['achieved_rps']:.1f} | {r['p50']:.2f} | {r['p90']:.2f} | "
                     f"{r['p99']:.2f} | {r['max']:.2f} |")
    depth = [d for _, d in result.queue_depth]
    lines += ["", f"Queue depth (from /metrics): max {max(depth) if depth else 0:g}, "
                  f"{len(depth)} samples.", ""]
    lines += [f"![{p.stem.split('-')[-1]}]({p.name})" for p in plots] or ["(matplotlib not installed: no plots)"]
    path = out_dir / f"{stem}.md"
    path.write_text("\n".join(lines) + "\n")
    return path
