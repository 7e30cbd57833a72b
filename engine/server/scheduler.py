"""Per-model dynamic batcher on the event loop: the decisions -- order,
batch selection, the batch window, hopeless deadlines -- are made by
engine.server.batching.BatchPolicy (read its docstring for the rules); this
module applies them: deadline timers, the wait for company, and batches
executed on one C thread per instance (engine.server.runner: completion
arrives on an eventfd), so the loop never blocks on compute.

- A request whose deadline passes is answered with ServeError 504 at that
  moment by its timer -- not when the running batch ends. If it was still
  queued it never runs; if its batch is already running, the batch finishes
  for the others and its share of the result is discarded. One that cannot
  meet its deadline (the policy's rule) gets the same error at once.
- A full queue refuses at once (ServeError 429 + Retry-After); an unloading
  model refuses with 503.
- The wait for company ends on an arrival or at the policy's time. Loop
  timers have ~1 ms granularity (uvloop rounds to whole milliseconds and
  fires up to ~1 ms early or late on a busy host), so a wait is a timer for
  all but its last SPIN_S, then repeated yields to the loop that re-check
  time.monotonic() (each yield lets the loop poll its sockets with a zero
  timeout, so an arrival still ends the wait): 300-800 us waits end a
  median 2 us late against ~560 us for a bare timer on the loaded test VM
  (tests/serve/test_deadline_sched.py), at the cost of a busy loop for at
  most SPIN_S per wait.
"""

from __future__ import annotations

import asyncio
import math
import os
import time

import numpy as np

from engine.server.batching import DONE, QUEUED, ArrivalRate, BatchPolicy
from engine.server.errors import ServeError
from engine.server.metrics import Metrics
from engine.server.models import LoadedModel
from engine.server.runner import InstanceRunner

SPIN_S = 0.001  # the last part of a wait, re-checked by yielding instead of a ~1 ms-granular timer
clock = time.monotonic  # the scheduler's one clock: arrivals, deadlines, windows
# Benchmark diagnostics (bench_deadlines --trace, --cells diag), not configuration:
# AIE_SCHED_TRACE=dir writes every request's and batch's times per model there;
# AIE_SCHED_VARIANT="model=nowait,model2=timer,model3=before" runs a model's
# adaptive window without applying its waits, with a timer in place of the
# spin, or without the rule that a wait must not build a queue.
_TRACE_DIR = os.environ.get("AIE_SCHED_TRACE")
_VARIANTS = dict(v.split("=", 1) for v in os.environ.get("AIE_SCHED_VARIANT", "").split(",") if "=" in v)


async def wait_timer(event: asyncio.Event, until: float) -> None:
    """wait_until with a loop timer alone (the diagnostic variant "timer")."""
    try:
        async with asyncio.timeout(max(0.0, until - clock())):
            await event.wait()
    except TimeoutError:
        pass


async def wait_until(event: asyncio.Event, until: float) -> None:
    """Until `event` is set or clock() reaches `until`, whichever comes first
    (see the module docstring for why the last SPIN_S is not a timer)."""
    coarse = until - clock() - SPIN_S
    if coarse > 0:
        try:
            async with asyncio.timeout(coarse):
                await event.wait()
            return
        except TimeoutError:
            pass
    while not event.is_set() and clock() < until:
        await asyncio.sleep(0)


def _closed_error(message: str) -> ServeError:
    """503: the model is unloading; another server (or this one, reloaded) may answer."""
    return ServeError(message, status=503, headers=[("Retry-After", "1")])


class InferenceRequest:
    __slots__ = ("inputs", "batch", "key", "priority", "deadline", "arrival", "future", "timer", "state",
                 "seq", "large", "need_s", "queue_ns", "batch_size", "instance", "started", "done", "out", "waited")

    def __init__(self, inputs: dict[str, np.ndarray], batch: int, priority: int, deadline: float | None,
                 future: asyncio.Future, arrival: float, out: dict[str, np.ndarray] | None = None):
        self.inputs = inputs
        self.out = out                    # {output: array} a run of this request alone writes into
        self.batch = batch
        # Requests join a batch only when every non-batch dimension and dtype agree.
        self.key = tuple((n, a.dtype.str, a.shape[1:]) for n, a in sorted(inputs.items()))
        self.priority = priority
        self.deadline = deadline          # clock() seconds, or None
        self.arrival = arrival
        self.future = future
        self.timer: asyncio.TimerHandle | None = None
        self.state = QUEUED
        self.seq = 0                      # set by the policy
        self.large = False
        self.need_s = 0.0                 # set by the policy when it refuses the request as hopeless
        self.queue_ns = 0
        self.batch_size = 0               # size of the batch it ran in
        self.instance = -1                # index of the model instance that ran it
        self.started = 0.0                # clock() when its batch started, and when the results were back
        self.done = 0.0                   # (engine.server.timing: the queue and compute phases)
        self.waited = 0.0                 # seconds its batch was held back by the window (diagnostics)


class ModelScheduler:
    def __init__(self, model: LoadedModel, metrics: Metrics):
        self.model = model
        self.config = model.config
        self.metrics = metrics
        self.policy = BatchPolicy(levels=self.config.priority_levels, max_batch=model.max_batch,
                                  batchable=model.batchable, preferred=self.config.preferred_batch_sizes,
                                  delay_us=self.config.max_queue_delay_us, clock=clock,
                                  edf=self.config.queue_order == "edf", instances=len(model.sessions))
        for items, seconds in model.warm_compute:
            self.policy.compute.record(items, seconds)
        variant = _VARIANTS.get(model.name)
        self.policy.apply_waits = variant != "nowait"
        self.policy.queue_rule = variant != "before"
        self._wait = wait_timer if variant == "timer" else wait_until
        self._trace = open(os.path.join(_TRACE_DIR, f"{model.name}.trace"), "a", buffering=1) \
            if _TRACE_DIR else None
        self.closing = False
        self._arrival = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        loop = asyncio.get_running_loop()
        self._runners = [InstanceRunner(loop) for _ in model.sessions]
        self._workers = [loop.create_task(self._worker(i, s)) for i, s in enumerate(model.sessions)]

    def serve_clients(self, metrics: Metrics) -> None:
        """From now on, count into the server's metrics (warm-up's requests
        counted into a scratch set), with an arrival rate that has not seen
        warm-up's requests."""
        self.metrics = metrics
        self.policy.rate = ArrivalRate()

    @property
    def queued(self) -> int:
        return self.policy.queued

    @property
    def running(self) -> int:
        return self.policy.running

    # ---- admission --------------------------------------------------------
    def resolve_priority(self, requested: int | None, ceiling: int | None = None) -> int:
        """Triton semantics: 0/None = the model's default; 1 is the highest.
        `ceiling` (a token's claim) is the best level the client may use;
        0 is the lowest level, None no ceiling (authentication off)."""
        levels = self.config.priority_levels
        p = requested or self.config.default_priority or levels
        if not 1 <= p <= levels:
            raise ValueError(f"priority {p} outside 1..{levels} (priority_levels of {self.model.name!r})")
        if ceiling is not None:
            p = max(p, min(int(ceiling) or levels, levels))
        return p

    def resolve_timeout_us(self, requested: int | None) -> int:
        if requested is not None and requested < 0:
            raise ValueError(f"timeout must be >= 0 microseconds, got {requested}")
        t = requested or self.config.default_timeout_us
        cap = self.config.max_timeout_us
        if cap:
            t = min(t, cap) if t else cap
        return t

    def submit(self, inputs: dict[str, np.ndarray], batch: int, priority: int, timeout_us: int,
               out: dict[str, np.ndarray] | None = None) -> InferenceRequest:
        """Queue a validated request; its `future` resolves to {name: array}
        (the arrays of `out` where it ran alone and they fit)."""
        if self.closing:
            raise _closed_error(f"model {self.model.name!r} is being unloaded")
        if self.queued >= self.config.max_queue_size:
            self.metrics.queue_rejections[self.model.name] += 1
            raise ServeError(f"model {self.model.name!r}: queue full ({self.queued} requests waiting); retry later",
                             status=429, headers=[("Retry-After", str(self.retry_after_s()))])
        loop = asyncio.get_running_loop()
        now = clock()
        deadline = now + timeout_us / 1e6 if timeout_us else None
        req = InferenceRequest(inputs, batch, priority, deadline, loop.create_future(), now, out)
        if self.policy.hopeless(req, now):
            req.state = DONE
            self._refuse(req, now)
            return req
        if deadline is not None:
            req.timer = loop.call_later(deadline - now, self._expire, req)
        self.policy.add(req)
        self._idle.clear()
        self._arrival.set()
        return req

    def retry_after_s(self) -> int:
        # Time for the queue ahead to clear at the measured batch time, >= 1 s
        # because Retry-After has second resolution.
        target = self.policy.target
        batches = self.queued / max(1, target) / max(1, len(self.model.sessions))
        return max(1, math.ceil(batches * self.policy.compute.estimate(target)))

    def _refuse(self, req: InferenceRequest, now: float) -> None:
        """A request that cannot meet its deadline: the expired one's error, never run."""
        if req.timer:
            req.timer.cancel()
            req.timer = None
        if now >= req.deadline:
            self._answer_expired(req, f"request deadline passed after {(now - req.arrival) * 1e6:.0f} us in "
                                      f"the queue; it did not run")
            return
        self.metrics.deadline_rejections[self.model.name] += 1
        if self._trace:
            self._trace.write(f"R {req.arrival:.6f} 0 {now:.6f} 504 0 0\n")  # refused: never started
        left_us = (req.deadline - now) * 1e6
        if req.need_s > 0:
            why = (f"its batch of {req.batch}, behind the work running and queued ahead of it, computes for at "
                   f"least {req.need_s * 1e6:.0f} us, {left_us:.0f} us were left")
        else:
            why = (f"running it first would make a request queued before it miss its own ({left_us:.0f} us were "
                   f"left)")
        if not req.future.done():
            req.future.set_exception(ServeError(
                f"model {self.model.name!r}: request deadline cannot be met: {why}; it did not run", status=504))

    def _expire(self, req: InferenceRequest) -> None:
        req.timer = None
        if req.state == DONE:
            return
        waited_us = (clock() - req.arrival) * 1e6
        if self.policy.remove(req):
            why = f"request deadline passed after {waited_us:.0f} us in the queue; it did not run"
        else:
            # Its batch is running: answer now; _record drops its share of the result.
            why = (f"request deadline passed after {waited_us:.0f} us, while its batch was running; "
                   f"the result is discarded")
            req.state = DONE
        self._answer_expired(req, why)
        self._check_idle()

    def _answer_expired(self, req: InferenceRequest, why: str) -> None:
        self.metrics.timeouts[self.model.name] += 1
        if self._trace:
            self._trace.write(f"R {req.arrival:.6f} {req.started:.6f} {clock():.6f} 504 {req.batch_size} "
                              f"{req.waited:.6f}\n")
        if not req.future.done():
            req.future.set_exception(ServeError(f"model {self.model.name!r}: {why}", status=504))

    # ---- batching ---------------------------------------------------------
    async def _worker(self, instance: int, session) -> None:
        while True:
            decision = self.policy.decide()
            now = clock()
            for r in decision.hopeless:
                self._refuse(r, now)
            if decision.batch:
                for r in decision.batch:
                    r.waited = decision.waited_s
                await self._run(instance, session, decision.batch)
            elif decision.hopeless:
                self._check_idle()
            elif decision.wait_until is not None:
                self._arrival.clear()
                await self._wait(self._arrival, decision.wait_until)
            else:
                if self.closing:
                    return
                self._arrival.clear()
                await self._arrival.wait()

    async def _run(self, instance: int, session, live: list[InferenceRequest]) -> None:
        start = clock()
        for r in live:
            r.queue_ns = int((start - r.arrival) * 1e9)
            r.instance = instance
            r.started = start
        seconds = None
        try:
            results = await self._runners[instance].run(session, self.model, live)
        except Exception as exc:  # noqa: BLE001 - a failed run fails its requests, not the server
            for r in live:
                _settle(r)
                if not r.future.done():
                    r.future.set_exception(exc)
        else:
            seconds = results[2] / 1e9
            self._record(live, results, clock())
            if self._trace:
                self._trace.write(f"B {start:.6f} {clock():.6f} {sum(r.batch for r in live)} {seconds:.6f} "
                                  f"{live[0].waited:.6f} {min(r.arrival for r in live):.6f}\n")
        finally:
            self.policy.finished(live, seconds)
            self._check_idle()

    def _record(self, live: list[InferenceRequest], results, done: float) -> None:
        outputs, input_ns, infer_ns, output_ns = results
        batch = sum(r.batch for r in live)
        stats = self.metrics.stats[self.model.name]
        stats.record_batch(batch, input_ns, infer_ns, output_ns)
        for r, out in zip(live, outputs):
            _settle(r)
            r.batch_size = batch
            r.done = done
            stats.queue.add(r.queue_ns)
            if self._trace:
                self._trace.write(f"R {r.arrival:.6f} {r.started:.6f} {done:.6f} 200 {batch} {r.waited:.6f}\n")
            if not r.future.done():  # the client may have gone or its deadline passed: dropped
                r.future.set_result(out)

    def _check_idle(self) -> None:
        if self.queued == 0 and self.running == 0:
            self._idle.set()

    def snapshot(self) -> dict:
        """The scheduler's decisions so far, for /health and /metrics."""
        return {**self.policy.snapshot(), "deadline_rejections": self.metrics.deadline_rejections[self.model.name],
                "deadline_expired": self.metrics.timeouts[self.model.name]}

    # ---- lifecycle --------------------------------------------------------
    async def drain(self, timeout_s: float) -> bool:
        """Stop taking new requests, finish queued and running ones. True if
        everything finished within the timeout."""
        self.closing = True
        self._arrival.set()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
            return True
        except TimeoutError:
            return False

    async def close(self) -> None:
        self.closing = True
        for r in self.policy.drop_all():
            if not r.future.done():
                r.future.set_exception(_closed_error(f"model {self.model.name!r} unloaded before it ran"))
            _settle(r)
        self._arrival.set()
        for w in self._workers:
            w.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        # A runner may still be running a batch if drain timed out; close()
        # does not wait for it on the loop.
        for runner in self._runners:
            runner.close()
        if self._trace:
            self._trace.close()
        self.model.close()


def _settle(r: InferenceRequest) -> None:
    r.state = DONE
    if r.timer:
        r.timer.cancel()  # do not keep the request (and its tensors) alive until a far deadline
        r.timer = None
