"""Per-model dynamic batcher: a bounded queue per priority level, deadlines
enforced by timers on the event loop, and batches executed on one C thread
per instance (engine.server.runner: completion arrives on an eventfd), so
the loop never blocks on compute.

Rules, in the order they decide:
- Priority (Triton semantics): level 1 runs first; FIFO within a level.
- A batch starts from the oldest request of the highest non-empty level and
  takes compatible requests (same non-batch shapes and dtypes: no padding)
  in that order until max_batch_size; a request too large for the room left
  is passed over for a smaller one behind it (small first among equals).
- A lone request waits at most max_queue_delay_us for company, counted from
  its arrival; a batch that reaches max_batch_size (or the largest preferred
  size) leaves at once. Event-loop timers have 1 ms granularity (uvloop: a
  wait under 0.5 ms does not happen at all, 0.6-1.5 ms ones take ~1.1 ms), so
  the delay is honoured to within a millisecond, not a microsecond.
- It does not wait at all when waiting cannot help: traffic is sequential
  (the last batch held one request and nothing arrived while it ran), it is
  the only request queued and nothing runs -- nobody else is coming, so the
  delay would be pure latency (a client at concurrency 1 paid it on every
  request). Any overlap -- a request arriving while another is queued or
  running, a batch of more than one -- restores the delay as configured.
- A request whose deadline passes is answered with DeadlineExceeded at that
  moment by its timer -- not when the running batch ends. If it was still
  queued it never runs; if its batch is already running, the batch finishes
  for the others and its share of the result is discarded.
- A full queue refuses at once (QueueFull -> HTTP 429 + Retry-After).
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
import numpy as np

from engine.server.metrics import Metrics
from engine.server.models import LoadedModel
from engine.server.runner import InstanceRunner

QUEUED, RUNNING, DONE = 0, 1, 2


class QueueFull(Exception):
    def __init__(self, model: str, size: int, retry_after_s: int):
        super().__init__(f"model {model!r}: queue full ({size} requests waiting); retry later")
        self.retry_after_s = retry_after_s


class DeadlineExceeded(Exception):
    pass


class SchedulerClosed(Exception):
    pass


class InferenceRequest:
    __slots__ = ("inputs", "batch", "key", "priority", "deadline", "arrival", "future", "timer", "state",
                 "queue_ns", "compute_ns", "batch_size", "instance")

    def __init__(self, inputs: dict[str, np.ndarray], batch: int, priority: int, deadline: float | None,
                 future: asyncio.Future):
        self.inputs = inputs
        self.batch = batch
        # Requests join a batch only when every non-batch dimension and dtype agree.
        self.key = tuple((n, a.dtype.str, a.shape[1:]) for n, a in sorted(inputs.items()))
        self.priority = priority
        self.deadline = deadline          # loop.time() seconds, or None
        self.arrival = time.monotonic()
        self.future = future
        self.timer: asyncio.TimerHandle | None = None
        self.state = QUEUED
        self.queue_ns = 0
        self.compute_ns = 0
        self.batch_size = 0               # size of the batch it ran in
        self.instance = -1                # index of the model instance that ran it


class ModelScheduler:
    def __init__(self, model: LoadedModel, metrics: Metrics):
        self.model = model
        self.config = model.config
        self.metrics = metrics
        self.levels = [collections.deque() for _ in range(self.config.priority_levels)]
        self.queued = 0
        self.running = 0
        self.closing = False
        self._arrival = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        loop = asyncio.get_running_loop()
        self._runners = [InstanceRunner(loop) for _ in model.sessions]
        self._workers = [asyncio.get_running_loop().create_task(self._worker(i, s))
                         for i, s in enumerate(model.sessions)]
        # Since the last dispatch, a request arrived while others were queued or running.
        self._overlap = False
        self._sequential = True           # the last batch: one request, nothing arrived while it ran
        self._mean_compute_s = 0.0
        preferred = sorted(s for s in self.config.preferred_batch_sizes if s <= model.max_batch)
        self._preferred = preferred
        self._target = preferred[-1] if preferred else model.max_batch

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

    def submit(self, inputs: dict[str, np.ndarray], batch: int, priority: int, timeout_us: int) -> InferenceRequest:
        """Queue a validated request; its `future` resolves to {name: array}."""
        if self.closing:
            raise SchedulerClosed(f"model {self.model.name!r} is being unloaded")
        if self.queued >= self.config.max_queue_size:
            self.metrics.queue_rejections[self.model.name] += 1
            raise QueueFull(self.model.name, self.queued, self.retry_after_s())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_us / 1e6 if timeout_us else None
        req = InferenceRequest(inputs, batch, priority, deadline, loop.create_future())
        if deadline is not None:
            req.timer = loop.call_at(deadline, self._expire, req)
        if self.queued or self.running:
            self._overlap = True
        self.levels[priority - 1].append(req)
        self.queued += 1
        self._idle.clear()
        self._arrival.set()
        return req

    def retry_after_s(self) -> int:
        # Time for the queue ahead to clear at the observed batch rate, >= 1 s
        # because Retry-After has second resolution.
        batches = self.queued / max(1, self._target) / max(1, len(self.model.sessions))
        return max(1, math.ceil(batches * self._mean_compute_s))

    def _expire(self, req: InferenceRequest) -> None:
        req.timer = None
        if req.state == DONE:
            return
        waited_us = (time.monotonic() - req.arrival) * 1e6
        if req.state == QUEUED:
            self.queued -= 1
            why = f"request deadline passed after {waited_us:.0f} us in the queue; it did not run"
        else:
            # Its batch is running: answer now; _record drops its share of the result.
            why = (f"request deadline passed after {waited_us:.0f} us, while its batch was running; "
                   f"the result is discarded")
        req.state = DONE
        self.metrics.timeouts[self.model.name] += 1
        if not req.future.done():
            req.future.set_exception(DeadlineExceeded(f"model {self.model.name!r}: {why}"))
        self._check_idle()

    # ---- batching ---------------------------------------------------------
    def _head(self) -> InferenceRequest | None:
        for level in self.levels:
            while level and level[0].state != QUEUED:
                level.popleft()
            if level:
                return level[0]
        return None

    def _compatible_count(self, key) -> int:
        n = 0
        for level in self.levels:
            for r in level:
                if r.state == QUEUED and r.key == key:
                    n += r.batch
                    if n >= self._target:
                        return n
        return n

    def _take(self, head: InferenceRequest) -> list[InferenceRequest]:
        if not self.model.batchable:
            self._remove([head])
            return [head]
        room = self.model.max_batch
        available = self._compatible_count(head.key)
        if self._preferred and available < room:
            fitting = [p for p in self._preferred if p <= available]
            room = fitting[-1] if fitting else room
        taken = []
        for level in self.levels:
            for r in level:
                if room == 0:
                    break
                if r.state == QUEUED and r.key == head.key and r.batch <= room:
                    taken.append(r)
                    room -= r.batch
        self._remove(taken)
        return taken

    def _remove(self, taken: list[InferenceRequest]) -> None:
        ids = {id(r) for r in taken}
        for i, level in enumerate(self.levels):
            if any(id(r) in ids for r in level):
                self.levels[i] = collections.deque(r for r in level if id(r) not in ids and r.state == QUEUED)
        for r in taken:
            r.state = RUNNING  # its deadline timer stays armed: it may fire while the batch runs
        self.queued -= len(taken)

    async def _wait_for_company(self, head: InferenceRequest) -> None:
        if self._sequential and not self._overlap and self.queued == 1 and not self.running:
            return  # sequential traffic: nobody else is coming (see the module docstring)
        leave_at = head.arrival + self.config.max_queue_delay_us / 1e6
        while head.state == QUEUED and self._compatible_count(head.key) < self._target:
            remaining = leave_at - time.monotonic()
            if remaining <= 0:
                return
            self._arrival.clear()
            try:
                async with asyncio.timeout(remaining):
                    await self._arrival.wait()
            except TimeoutError:
                return

    async def _worker(self, instance: int, session) -> None:
        loop = asyncio.get_running_loop()
        while True:
            head = self._head()
            if head is None:
                if self.closing:
                    return
                self._arrival.clear()
                await self._arrival.wait()
                continue
            if self.model.batchable and self.config.max_queue_delay_us:
                await self._wait_for_company(head)
                if head.state != QUEUED:
                    continue  # expired, or another instance took it
            batch = self._take(head)
            self._overlap = False
            now = loop.time()
            live = []
            for r in batch:
                if r.deadline is not None and now >= r.deadline:
                    if r.timer:
                        r.timer.cancel()
                    r.state = QUEUED
                    self.queued += 1
                    self._expire(r)   # passed while we waited for company: never run it
                else:
                    live.append(r)
            if not live:
                continue
            self.running += 1
            start = time.monotonic()
            for r in live:
                r.queue_ns = int((start - r.arrival) * 1e9)
                r.instance = instance
            try:
                results = await self._runners[instance].run(session, self.model, live)
            except Exception as exc:  # noqa: BLE001 - a failed run fails its requests, not the server
                for r in live:
                    _settle(r)
                    if not r.future.done():
                        r.future.set_exception(exc)
            else:
                self._record(live, results)
            finally:
                self.running -= 1
                self._sequential = len(live) == 1 and not self._overlap
                self._check_idle()

    def _record(self, live: list[InferenceRequest], results) -> None:
        outputs, input_ns, infer_ns, output_ns = results
        batch = sum(r.batch for r in live)
        stats = self.metrics.stats[self.model.name]
        stats.record_batch(batch, input_ns, infer_ns, output_ns)
        self.metrics.compute_latency[self.model.name].observe(infer_ns / 1e9)
        self._mean_compute_s = 0.9 * self._mean_compute_s + 0.1 * infer_ns / 1e9 if self._mean_compute_s else infer_ns / 1e9
        for r, out in zip(live, outputs):
            _settle(r)
            r.compute_ns = infer_ns
            r.batch_size = batch
            stats.queue.add(r.queue_ns)
            self.metrics.queue_latency[self.model.name].observe(r.queue_ns / 1e9)
            if not r.future.done():  # the client may have gone or its deadline passed: dropped
                r.future.set_result(out)

    def _check_idle(self) -> None:
        if self.queued == 0 and self.running == 0:
            self._idle.set()

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
        for level in self.levels:
            for r in level:
                if r.state == QUEUED and not r.future.done():
                    r.future.set_exception(SchedulerClosed(f"model {self.model.name!r} unloaded before it ran"))
                    _settle(r)
            level.clear()
        self.queued = 0
        self._arrival.set()
        for w in self._workers:
            w.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        # A runner may still be running a batch if drain timed out; close()
        # does not wait for it on the loop.
        for runner in self._runners:
            runner.close()
        self.model.close()


def _settle(r: InferenceRequest) -> None:
    r.state = DONE
    if r.timer:
        r.timer.cancel()  # do not keep the request (and its tensors) alive until a far deadline
        r.timer = None
