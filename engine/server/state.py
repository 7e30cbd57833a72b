"""The server's shared state (one object, as uvicorn's ServerState) and the
protocol-independent inference path both front ends call."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from engine import arena
from engine.server.auth import Authenticator, Principal, RateLimiter
from engine.server.clientlimits import ByteBudget, ConnectionCaps
from engine.server.config import EngineConfig
from engine.server.errors import ServeError
from engine.server.logs import JsonLogger
from engine.server.metrics import ARENA_BYTES, Metrics
from engine.server.models import LoadedModel
from engine.server.registry import ModelRegistry
from engine.server.shm import SystemSharedMemory


UNKNOWN_MODEL = "_unknown"   # the one label every unconfigured model name shares


class ServerState:
    def __init__(self, config: EngineConfig, logger: JsonLogger):
        self.config = config
        self.logger = logger
        self.metrics = Metrics()
        self.registry = ModelRegistry(self.metrics)
        self.auth = Authenticator(config.auth)
        self.rate_limiter = RateLimiter(config.auth.rate_limit)
        self.failure_limiter = RateLimiter(config.auth.failure_limit)
        self.started = time.time()
        self.draining = False                 # SIGTERM: readiness 503, connections told to close
        self.in_flight = 0                    # requests accepted and not yet answered
        self.buffered = ByteBudget()          # request bytes held, against limits.max_buffered_bytes
        self.connection_caps = ConnectionCaps(logger)
        self.shm = SystemSharedMemory(lambda: self.config.limits)  # closed by the server's shutdown
        # JSON (de)coding of large tensors takes milliseconds: done here, off the loop.
        self.codec_pool = ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1)),
                                             thread_name_prefix="codec")

    # ---- admission --------------------------------------------------------
    def authenticate(self, authorization: str | None, client: str) -> Principal:
        """`client` is the peer's address (no port): failed attempts are
        limited per address, before any token is parsed, so guessing and
        flooding cost the server a dictionary lookup each."""
        if self.auth.enabled and (wait := self.failure_limiter.wait(client)):
            self.metrics.rate_limited += 1
            raise ServeError(f"too many failed authentications from {client}; retry in {wait:.0f} s", status=429,
                             headers=[("Retry-After", str(max(1, int(wait + 0.999))))])
        try:
            principal = self.auth.authenticate(authorization)
        except ServeError as exc:  # the token is refused (401)
            self.metrics.auth_failures += 1
            self.failure_limiter.acquire(client)
            raise ServeError(exc.message, status=exc.status,
                             headers=[("WWW-Authenticate", 'Bearer realm="ai-engine"')]) from None
        wait = self.rate_limiter.acquire(principal.subject or client)
        if wait:
            self.metrics.rate_limited += 1
            raise ServeError(f"rate limit of {self.rate_limiter.rate:g} requests/s exceeded for this client",
                             status=429, headers=[("Retry-After", str(max(1, int(wait + 0.999))))])
        return principal

    def model_label(self, name: str) -> str:
        """The metrics label for a model name a client sent: only configured
        names become label values, or any client could grow /metrics without
        bound by inventing names."""
        return name if name in self.registry.entries else UNKNOWN_MODEL

    def model(self, name: str, version: str | None = None) -> LoadedModel:
        entry = self.registry.get(name)
        if entry is None or entry.scheduler is None:
            known = ", ".join(sorted(self.registry.entries)) or "none"
            raise ServeError(f"unknown model {name!r} (served: {known})", status=404)
        model = entry.scheduler.model
        if version and version != model.version:
            raise ServeError(f"model {name!r} has no version {version!r} (serving version {model.version!r})",
                             status=404)
        return model

    # ---- inference --------------------------------------------------------
    async def infer(self, name: str, version: str | None, inputs: dict[str, np.ndarray], *,
                    priority: int | None, timeout_us: int | None, principal: Principal, info: dict,
                    out: dict[str, np.ndarray] | None = None):
        """Validate, queue and await one request; {output name: array}.
        `info` receives batch/queue/compute figures for the request log;
        `out` are arrays the run may write outputs into (shared memory)."""
        model = self.model(name, version)
        if not principal.may_infer(name):
            raise ServeError(f"token lacks scope 'infer:{name}' (or 'infer')", status=403)
        scheduler = self.registry.get(name).scheduler
        try:
            # validate: 400; submit: 429 (queue full), 503 (model unloading)
            batch = model.validate(inputs)
            inputs, size = model.pad(inputs)
            prio = scheduler.resolve_priority(priority, principal.priority)
            timeout = scheduler.resolve_timeout_us(timeout_us)
            request = scheduler.submit(inputs, batch, prio, timeout, out=out)
        except ValueError as exc:  # a priority or timeout out of range
            raise ServeError(str(exc)) from None
        info["batch"] = batch
        info["priority"] = prio
        try:
            outputs = await request.future
        except ServeError:  # the scheduler's answer: 504 (deadline), 503 (unloaded before it ran)
            raise
        except Exception as exc:  # noqa: BLE001 - the model failed; answer, do not crash
            self.logger.error("inference_failed", model=name, error=f"{type(exc).__name__}: {exc}")
            raise ServeError(f"inference failed: {type(exc).__name__}: {exc}", status=500) from None
        outputs = model.cut(outputs, size)
        # The queue and compute phases' stamps (engine.server.timing); the
        # front end adds its own and observes the five phases.
        info["t_admitted"], info["t_started"], info["t_done"] = request.arrival, request.started, request.done
        info["queue_us"] = int((request.started - request.arrival) * 1e6)
        info["compute_us"] = int((request.done - request.started) * 1e6)
        info["batch_size"] = request.batch_size
        info["instance"] = request.instance
        return model, outputs

    # ---- reporting --------------------------------------------------------
    def queue_depth(self) -> dict[str, int]:
        return {n: (e.scheduler.queued if e.scheduler else 0) for n, e in self.registry.entries.items()}

    def scheduler_snapshots(self) -> dict[str, dict]:
        return {n: e.scheduler.snapshot() for n, e in self.registry.entries.items() if e.scheduler}

    def load_errors(self) -> dict[str, str | None]:
        return {n: e.error for n, e in self.registry.entries.items()}


ARENA_COUNTS = ("live_allocations", "total_allocations", "failed_allocations")


def arena_stats() -> dict:
    """The process's arenas for /health and /metrics: totals over the open
    allocator arenas (ARENA_BYTES, ARENA_COUNTS), the plan arenas' bytes by
    backing ("hugepage" from the reserved pool, "4k" pages otherwise: the
    hugepage fallback our latency depends on), the fallbacks by reason, and
    engine.arena.size against what plan arenas hold."""
    every = arena.stats_all()
    totals: dict = {"arenas": len(every)}
    for stats in every:
        for key in ARENA_BYTES + ARENA_COUNTS:
            totals[key] = totals.get(key, 0) + stats[key]
    totals["backing_bytes"] = arena.PLAN_ARENAS.bytes_by_backing()
    totals["hugepage_fallbacks"] = arena.hugepage_fallbacks()
    totals["plan_arena_bytes"] = arena.PLAN_ARENAS.used()
    totals["plan_arena_limit"] = arena.PLAN_ARENAS.limit
    return totals


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0
