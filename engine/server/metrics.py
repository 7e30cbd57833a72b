"""Counters, histograms and Triton-shaped statistics, rendered as Prometheus
text (exposition format 0.0.4) for /metrics and as JSON for /v2/models/stats.

Everything here is touched only from the event-loop thread (the scheduler
records results after the executor hands them back), so no locks.
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict

from engine.server.timing import PHASES

# Allocator arena totals exported as aie_arena_bytes{kind=...} (engine.server.state.arena_stats).
ARENA_BYTES = ("reserved", "in_use", "requested", "peak_in_use", "free", "largest_free")

# Seconds. Spans 10 us (decoding a tiny request, one phase of engine.server.timing)
# to 10 s (a huge batch on a busy host).
LATENCY_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0)


# The five phase histograms (engine.server.timing defines the boundaries);
# queue and compute keep the names they had before the phases existed.
PHASE_HELP = {
    "network": "Answered requests: first byte read to body read (head, admission, body arrival).",
    "decode": "Answered requests: body read to admitted to the scheduler (routing, decoding, validation).",
    "queue": "Answered requests: admitted to the scheduler to their batch's start.",
    "compute": "Answered requests: their batch's run, start to results on the event loop (per request).",
    "encode_write": "Answered requests: results to the answer written (encoding, writing).",
}


class Histogram:
    __slots__ = ("counts", "sum", "count")

    def __init__(self):
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.sum += seconds
        self.count += 1


class Duration:
    """Triton's {count, ns} pair."""
    __slots__ = ("count", "ns")

    def __init__(self):
        self.count = 0
        self.ns = 0

    def add(self, ns: int, n: int = 1) -> None:
        self.count += n
        self.ns += ns

    def as_json(self) -> dict:
        return {"count": self.count, "ns": self.ns}


class ModelStats:
    """Per model name; survives reloads so counters never go backwards."""

    def __init__(self):
        self.success = Duration()
        self.fail = Duration()
        self.queue = Duration()
        self.compute_input = Duration()
        self.compute_infer = Duration()
        self.compute_output = Duration()
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference_ms = 0
        self.last_compute_s = 0.0
        self.batch_stats: dict[int, list[Duration]] = {}

    def record_batch(self, batch: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        self.execution_count += 1
        self.inference_count += batch
        self.last_inference_ms = int(time.time() * 1000)
        self.last_compute_s = infer_ns / 1e9
        for d, ns in zip((self.compute_input, self.compute_infer, self.compute_output), (input_ns, infer_ns, output_ns)):
            d.add(ns, batch)
        per = self.batch_stats.setdefault(batch, [Duration(), Duration(), Duration()])
        for d, ns in zip(per, (input_ns, infer_ns, output_ns)):
            d.add(ns)

    def as_json(self, name: str, version: str) -> dict:
        return {
            "name": name, "version": version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.as_json(), "fail": self.fail.as_json(), "queue": self.queue.as_json(),
                "compute_input": self.compute_input.as_json(), "compute_infer": self.compute_infer.as_json(),
                "compute_output": self.compute_output.as_json(), "cache_hit": {"count": 0, "ns": 0},
                "cache_miss": {"count": 0, "ns": 0},
            },
            "batch_stats": [
                {"batch_size": b, "compute_input": d[0].as_json(), "compute_infer": d[1].as_json(),
                 "compute_output": d[2].as_json()}
                for b, d in sorted(self.batch_stats.items())
            ],
        }


def _labels(**labels) -> str:
    def esc(v):
        return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels.items()) + "}"


class Metrics:
    def __init__(self):
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)   # (model, protocol, code)
        self.request_latency: dict[tuple[str, str], Histogram] = defaultdict(Histogram)   # (model, protocol)
        # (model, protocol) -> one histogram per engine.server.timing.PHASES, answered requests only
        self.phase_latency: dict[tuple[str, str], tuple[Histogram, ...]] = {}
        self.stats: dict[str, ModelStats] = defaultdict(ModelStats)
        self.queue_rejections: dict[str, int] = defaultdict(int)
        self.timeouts: dict[str, int] = defaultdict(int)
        self.deadline_rejections: dict[str, int] = defaultdict(int)        # refused: deadline could not be met
        self.load_failures: dict[str, int] = defaultdict(int)
        self.reloads = 0
        self.rate_limited = 0
        self.auth_failures = 0
        self.protocol_errors: dict[str, int] = defaultdict(int)             # protocol -> count

    def count_request(self, model: str, protocol: str, code: int, seconds: float) -> None:
        self.requests[(model, protocol, code)] += 1
        if model:
            self.request_latency[(model, protocol)].observe(seconds)
            stats = self.stats[model]
            (stats.success if code == 200 else stats.fail).add(int(seconds * 1e9))

    def observe_phases(self, model: str, protocol: str, spans: tuple[float, ...]) -> None:
        """One answered request's five phases (engine.server.timing.phases)."""
        hists = self.phase_latency.get((model, protocol))
        if hists is None:
            hists = self.phase_latency[(model, protocol)] = tuple(Histogram() for _ in PHASES)
        for h, seconds in zip(hists, spans):   # Histogram.observe inlined: five per request
            h.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
            h.sum += seconds
            h.count += 1

    def render(self, *, queue_depth: dict[str, int], load_errors: dict[str, str | None],
               arena: dict, uptime_s: float, schedulers: dict[str, dict] | None = None) -> str:
        """`arena`: engine.server.state.arena_stats()."""
        out: list[str] = []

        def family(name, kind, help_text):
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")

        family("aie_uptime_seconds", "gauge", "Seconds since the server started.")
        out.append(f"aie_uptime_seconds {uptime_s:.3f}")
        family("aie_requests_total", "counter", "Requests answered, by model, protocol and status code.")
        for (model, proto, code), n in sorted(self.requests.items()):
            out.append(f"aie_requests_total{_labels(model=model, protocol=proto, code=code)} {n}")
        def by_model(name, kind, help_text, values: dict, label="model"):
            family(name, kind, help_text)
            for key, value in sorted(values.items()):
                out.append(f"{name}{_labels(**{label: key})} {value}")

        by_model("aie_inference_count_total", "counter", "Inferences run (each batch element counts once).",
                 {m: s.inference_count for m, s in self.stats.items()})
        by_model("aie_execution_count_total", "counter",
                 "Model executions (batches); inferences/executions = mean batch.",
                 {m: s.execution_count for m, s in self.stats.items()})
        phases = sorted(self.phase_latency.items())
        for metric, hists, help_text in (
            ("aie_request_duration_seconds", sorted(self.request_latency.items()),
             "Request latency, its first byte read to its answer written (every answer, errors too)."),
            *((f"aie_{phase}_duration_seconds", [(key, h[i]) for key, h in phases], PHASE_HELP[phase])
              for i, phase in enumerate(PHASES)),
        ):
            family(metric, "histogram", help_text)
            for (model, protocol), h in hists:
                cumulative = 0
                for bound, n in zip(LATENCY_BUCKETS + (float("inf"),), h.counts):
                    cumulative += n
                    le = "+Inf" if bound == float("inf") else repr(bound)
                    out.append(f"{metric}_bucket{_labels(model=model, protocol=protocol, le=le)} {cumulative}")
                out.append(f"{metric}_sum{_labels(model=model, protocol=protocol)} {h.sum:.9f}")
                out.append(f"{metric}_count{_labels(model=model, protocol=protocol)} {h.count}")
        by_model("aie_queue_depth", "gauge", "Requests waiting in the model's queue.", queue_depth)
        by_model("aie_queue_rejections_total", "counter", "Requests refused because the queue was full (429).",
                 self.queue_rejections)
        by_model("aie_request_timeouts_total", "counter", "Requests whose deadline passed before they ran.",
                 self.timeouts)
        by_model("aie_deadline_rejections_total", "counter",
                 "Requests refused at once because their deadline could not be met (measured compute time).",
                 self.deadline_rejections)
        self._render_schedulers(family, out, schedulers or {})
        by_model("aie_model_load_failures_total", "counter", "Model loads (start-up or reload) that failed.",
                 self.load_failures)
        by_model("aie_model_load_error", "gauge", "1 while the last load of the model failed (old version serves).",
                 {m: 1 if err else 0 for m, err in load_errors.items()})
        family("aie_reloads_total", "counter", "Configuration reloads (SIGHUP).")
        out.append(f"aie_reloads_total {self.reloads}")
        family("aie_rate_limited_total", "counter", "Requests refused by the per-client rate limit.")
        out.append(f"aie_rate_limited_total {self.rate_limited}")
        family("aie_auth_failures_total", "counter", "Requests refused for a missing or invalid token.")
        out.append(f"aie_auth_failures_total {self.auth_failures}")
        by_model("aie_protocol_errors_total", "counter", "Malformed requests or frames (connection closed).",
                 self.protocol_errors, label="protocol")
        by_model("aie_arena_bytes", "gauge", "Arena memory, by kind.",
                 {k: v for k, v in arena.items() if k in ARENA_BYTES}, label="kind")
        by_model("aie_arena_backing_bytes", "gauge",
                 "Plan arena memory by backing: hugepage (the reserved pool) or 4k (4 KiB pages, THP at best).",
                 arena.get("backing_bytes", {}), label="backing")
        by_model("aie_arena_hugepage_fallbacks_total", "counter",
                 "Arenas that asked for hugepages and got 4 KiB pages, by reason.",
                 arena.get("hugepage_fallbacks", {}), label="reason")
        if arena.get("plan_arena_limit") is not None:
            family("aie_arena_limit_bytes", "gauge", "engine.arena.size: the most plan arenas may hold together.")
            out.append(f"aie_arena_limit_bytes {arena['plan_arena_limit']}")
        return "\n".join(out) + "\n"

    @staticmethod
    def _render_schedulers(family, out: list[str], schedulers: dict[str, dict]) -> None:
        """The batcher's current decisions per model (engine.server.batching
        snapshots): window, arrival-rate EMA, queue depth per priority level
        (levels are bounded by priority_levels <= 16)."""
        family("aie_batch_window_seconds", "gauge", "The batch window last chosen (fixed, or adaptive when auto).")
        for model, snap in sorted(schedulers.items()):
            out.append(f"aie_batch_window_seconds{_labels(model=model)} {snap['window_us'] / 1e6:.9f}")
        family("aie_arrival_rate", "gauge", "Arrival-rate EMA the adaptive window uses. Unit: batch items/s.")
        for model, snap in sorted(schedulers.items()):
            out.append(f"aie_arrival_rate{_labels(model=model)} {snap['arrival_rate_per_s']}")
        family("aie_queue_depth_priority", "gauge", "Requests waiting in the model's queue, by priority level.")
        for model, snap in sorted(schedulers.items()):
            for level, depth in snap["queue_depth_by_priority"].items():
                out.append(f"aie_queue_depth_priority{_labels(model=model, priority=level)} {depth}")
