"""The set of served models. Each name maps to an entry whose `scheduler`
is swapped in one assignment on the event loop, so a request sees either the
old version or the new one, never a mix."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

from engine.arena import PLAN_ARENAS, ArenaPolicy
from engine.server.config import EngineConfig, ModelConfig
from engine.server.errors import ServeError
from engine.server.metrics import Metrics
from engine.server.models import LoadedModel
from engine.server.scheduler import ModelScheduler


class ModelEntry:
    def __init__(self, name: str):
        self.name = name
        self.scheduler: ModelScheduler | None = None
        self.error: str | None = None        # last load failure, cleared by a good load
        self.loaded_at = 0.0

    @property
    def model(self) -> LoadedModel | None:
        return self.scheduler.model if self.scheduler else None


class ModelRegistry:
    def __init__(self, metrics: Metrics):
        self.metrics = metrics
        self.entries: dict[str, ModelEntry] = {}
        self._retiring: set[asyncio.Task] = set()
        # engine.server.warmpath.warm_request_path, set by the server (it
        # sits above the protocol modules, which sit above this one): run on
        # every new version before it is switched in.
        self.warm: Callable[[ModelScheduler, int], Awaitable[int]] | None = None

    def get(self, name: str) -> ModelEntry | None:
        return self.entries.get(name)

    def ready(self) -> bool:
        return bool(self.entries) and all(e.scheduler is not None for e in self.entries.values())

    def capped_warm_ups(self) -> dict[str, str]:
        """{model: why} for the models serving now whose warm-up left plans
        to build on first use (WarmPlans.capped): logged after each apply."""
        return {n: e.model.warm.capped for n, e in self.entries.items() if e.model is not None and e.model.warm.capped}

    async def load_model(self, mcfg: ModelConfig, threads: int, plan_cache_size: int,
                         arena: ArenaPolicy | None = None) -> LoadedModel:
        # Opening a model reads and maps files: keep it off the event loop.
        return await asyncio.get_running_loop().run_in_executor(None, LoadedModel, mcfg, threads, plan_cache_size,
                                                                arena)

    async def apply(self, config: EngineConfig, drain_timeout_s: float) -> dict[str, str]:
        """Load every model of `config` beside the current ones, then switch
        each that loaded; a failed one keeps its old version. Models no longer
        listed are drained and removed. Returns {model: error} for failures."""
        errors: dict[str, str] = {}
        # engine.arena.size bounds every plan arena of the process, whichever model holds it.
        PLAN_ARENAS.limit = config.arena.size
        arena = ArenaPolicy(hugepages=config.arena.hugepages, mlock=config.arena.mlock,
                            page_size=config.hugepage_size)
        results = await asyncio.gather(*(self.load_model(m, config.threads, config.plan_cache_size, arena)
                                         for m in config.models),
                                       return_exceptions=True)
        for mcfg, result in zip(config.models, results):
            entry = self.entries.setdefault(mcfg.name, ModelEntry(mcfg.name))
            if isinstance(result, BaseException):
                msg = str(result) if isinstance(result, ServeError) else f"{type(result).__name__}: {result}"
                entry.error = msg
                errors[mcfg.name] = msg
                self.metrics.load_failures[mcfg.name] += 1
                continue
            scheduler = await self._warmed(result, config.limits.max_json_elements)
            old, entry.scheduler = entry.scheduler, scheduler
            entry.error = None
            entry.loaded_at = time.time()
            if old is not None:
                self._retire(old, drain_timeout_s)
        for name in [n for n in self.entries if config.model(n) is None]:
            entry = self.entries.pop(name)
            if entry.scheduler is not None:
                self._retire(entry.scheduler, drain_timeout_s)
        return errors

    async def _warmed(self, model: LoadedModel, max_json_elements: int) -> ModelScheduler:
        """A scheduler for `model` whose request path has run once per
        declared shape; those requests count in no client-facing metric."""
        scheduler = ModelScheduler(model, Metrics())
        if self.warm is not None and model.warm.shapes and model.warm.error is None:
            t0 = time.perf_counter_ns()
            try:
                model.warm.requests = await self.warm(scheduler, max_json_elements)
            except Exception as exc:  # noqa: BLE001 - as a failed warm plan: reported, the model still serves
                model.warm.error = f"warm-up request failed: {type(exc).__name__}: {exc}"
            model.warm.request_ns = time.perf_counter_ns() - t0
        scheduler.serve_clients(self.metrics)
        return scheduler

    def _retire(self, scheduler: ModelScheduler, drain_timeout_s: float) -> None:
        async def retire():
            await scheduler.drain(drain_timeout_s)
            await scheduler.close()

        task = asyncio.get_running_loop().create_task(retire())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def drain_all(self, timeout_s: float) -> bool:
        schedulers = [e.scheduler for e in self.entries.values() if e.scheduler]
        done = await asyncio.gather(*(s.drain(timeout_s) for s in schedulers))
        if self._retiring:
            await asyncio.wait(self._retiring, timeout=timeout_s)
        return all(done)

    async def close_all(self) -> None:
        for e in self.entries.values():
            if e.scheduler:
                await e.scheduler.close()
                e.scheduler = None
        for t in list(self._retiring):
            t.cancel()
