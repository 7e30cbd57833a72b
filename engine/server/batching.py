"""The batching policy of one model: which queued requests run next, when,
and which are refused because they cannot meet their deadline. Pure: no
event loop, no threads; time comes from an injected clock, so every rule is
tested deterministically with a fake one (tests/serve/test_batching_policy.py).
engine.server.scheduler applies its decisions on the event loop.

Order (highest first):
- Priority level (Triton semantics, 1 is the highest): a lower level runs
  only when every higher one is empty.
- Within a level, earliest deadline first; requests without a deadline after
  every request with one, FIFO among themselves (ties in deadline: FIFO).
  queue_order: fifo keeps arrival order instead (Triton's).

A batch starts from the first request in that order (the head) and takes
the requests that are compatible with it -- the same dtypes and the same
non-batch dimensions: nothing is ever padded, so padding waste is 0% -- in
the same order, until max_batch_size (or the largest preferred size that the
queue can fill). A request too large for the room left is passed over for a
smaller one behind it, and so is one that would make the batch compute
(expected c(size), below) past a deadline of a request already in it that
could still be met: a tight request is not sunk by the loose ones joining it.

Merging must pay: a request of m items does not join a batch of n when the
measured batch of n + m computes no faster than a batch of n and one of m
run one after the other (ComputeTimes.joins: the median of each size, not
the fitted line, which is straight; MobileNetV2's batch of 16 took 22% more
CPU per sample in the server than two of 8 on one core, docs/PERFORMANCE.md
session 9). Then the
queue's order runs them one after the other: the first answers after c(n)
instead of c(n + m), the second no later, and nothing is copied to join
them. Where a size is not measured, or the merged size not in the last
REPROBE_RUNS batches, they merge: that is how its time is learnt, and
relearnt when the host's load changes it.

Size-aware: a request is large when its batch is >= LARGE_FRACTION of the
model's max_batch_size. When a batch led by a large request leaves while
small requests of its level are still queued, the next batch of that level
is led by the first of those small requests. So a small request waits behind
at most one large-led batch that started after it was queued (plus the batch
running when it arrived, and higher priority levels).

Hopeless deadlines: a request is refused, without running, when
    now + LOWER_BOUND_MARGIN * (R + W + own) >= deadline
where R is the expected remainder of the batches running now, W the
compute of the queued requests that run before it in queue order (every
higher priority level; in its level, EDF: earlier deadlines, ties FIFO;
fifo: everything queued before it), batched as the policy forms them (per
shape, full batches of max_batch_size and one of the rest), and `own` the
compute its own batch adds (it joins the last partial batch of its shape);
R + W are spread over the model's instances. A batch of b costs
    f(b) = min(c(b), max{m(b') : b' <= b measured})
(c the fitted line, ComputeTimes; m(b') the median measured time of batches
of b' items): a request runs in a batch of at least its own size, a larger
batch never computes faster, and a fit of a curved cost can overshoot the
small sizes. With nothing running or queued ahead this is the request's own
compute alone. Requests ahead that are themselves
hopeless do not count (they will not run). Checked when it is submitted
(against the queue then) and again whenever an instance takes a batch (the
whole queue walked in order: requests ahead may have been served, expired
or cancelled, or a run took longer than expected). Under EDF two more
rules, both about who gives way when not everyone can make it:
- a newcomer that would make a request of its level already queued miss
  is refused itself (an admitted request keeps its place: EDF never
  refuses one that FIFO would have served because a later arrival cut in);
- in the walk, when a request is late and leaving out the most urgent
  request counted before it in its level would let it make it, that one
  is refused instead (Moore-Hodgson's rule for the most deadlines met on
  one machine, for requests of equal cost): one of the two is lost either
  way, and the one kept has the more slack, so it is the more likely to
  make it on a host whose run times vary.
Why: under overload EDF otherwise serves the requests closest to their
deadlines, which a slow run then sinks, while the rest expire behind them
(the EDF domino: bench_deadlines, session 11, EDF met fewer than FIFO in
bursts). Refusing at once keeps the instance on requests that can still
make it and answers the others without their waiting for the timeout.
Nothing is refused before a batch of its size or smaller has been measured.

When to dispatch (the head's batch is not full):
- At once when traffic is sequential: the last batch held one request,
  nothing arrived while it ran, this is the only request queued and nothing
  runs -- waiting would be pure latency.
- Fixed window (max_queue_delay_us = N): the head waits at most N us from
  its arrival.
- Adaptive window (max_queue_delay_us = auto), from the item arrival rate
  lambda (an exponentially decayed count of arrivals, time constant
  RATE_TAU_S, taken RATE_SIGMAS deviations below its estimate: see
  ArrivalRate.confident) and the cost of a batch as the host runs now,
  c(b), with its run-to-run spread sigma (engine.server.window.PairedCosts:
  the shape from the ratios of consecutive runs, so a host whose slow
  spells make the large batches is not read as batching not paying; the
  fitted line until two sizes ran back to back). With n items queued for
  the head's batch, for each candidate size b >= n, the expected 99th
  percentile latency (engine.server.window.p99_latency):
      L(b) = (b - n) / lambda  +  exp(2.33 sigma) (r99(k) + q(k) + c(b))
      r99(k) = c(k) (1 - 0.01 / rho),  rho = lambda c(k) / k,  k = max(b, lambda c(b))
      q(k) = c(k) (exp(sigma^2) - 1) / 2 * rho / (1 - rho)
  (the time to gather b items; then, at the run times' 99th percentile, the
  residual of the batch running when a request arrives, busy a fraction
  rho of the time, k being the batch the arrivals during this run make
  next; the queue that runs longer than their mean leave behind it
  (Kingman's mean wait for the run times' spread, batches of k as the
  customers); and its own
  batch), and L = inf where rho >= 1 (that batch size cannot keep up).
  The head waits for the b* that minimises L, i.e. until (b* - n) / lambda
  after the last arrival, among the b whose wait does not build a queue:
      (b - n) / lambda  <=  (b / n) c(n) - c(b)
  (the instance idles while it gathers b items; that is at most the
  compute the batch of b saves against its items in batches of n, so the
  work queued behind the wait ends no later than without it). Why: the
  tail model counts the head's wait but not the queue that forms behind an
  idle instance, and it reads a rate past batch-1 capacity as batches of
  one not keeping up (L(n) = inf) where the batches that form while one
  runs keep up without a wait; live, auto held back 0.2-2% of batches for
  ~7-12 ms each against window 0's ~4 ms service, and its p99 was 1.15-1.18x
  window 0's (steady, sine; docs/PERFORMANCE.md, session 12). So no wait at
  all while batches of n keep up (lambda c(n) <= n: decided without
  weighing the sizes), and none at 2x the batch-1 capacity of the bench
  model's shape; at a burst's rate the wait pays for itself and is taken
  (tests/serve/test_window_model.py). Where a batch costs its size, rho
  does not fall with b and that is never a wait; where batching pays, the
  tail model waits near saturation on a host whose run times vary, where
  q (~ rho / (1 - rho)) falls faster with b than the wait for company
  adds. Never longer than min(AUTO_CAP_S, c(max
  batch)) after the instance could have run the head; no wait at all
  before anything has been measured.
- Either way, never past the point where the earliest deadline among the
  compatible requests would be missed: leave by deadline - c(n).
- No wait at all when one more request of the head's size would not pay
  to merge (ComputeTimes.joins, below).
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from engine.server.window import PairedCosts, p99_latency

QUEUED, RUNNING, DONE = 0, 1, 2

LARGE_FRACTION = 0.5        # of max_batch_size: a request this large is "large"
RATE_TAU_S = 0.03           # time constant of the arrival-rate EMA: ~30 ms of history
SAMPLES = 16                # runs per batch size the compute estimate keeps (their median)
RATE_SIGMAS = 2.0           # the adaptive window decides on the rate this many deviations below its estimate
AUTO_CAP_S = 0.01           # the adaptive window never exceeds 10 ms
AUTO_SIZES = 64             # candidate batch sizes the adaptive window weighs beyond n
LOWER_BOUND_MARGIN = 0.9    # measured compute times vary ~10% on a busy host: refuse only when clearly hopeless
REPROBE_RUNS = 64           # batches after which a merged size that did not pay is tried (and timed) again


class ArrivalRate:
    """Items per second: an exponentially decayed count of arrivals. Each
    arrival adds items / tau; the sum decays as exp(-dt / tau), so under a
    steady rate lambda it settles at lambda, and when arrivals stop it falls
    away on its own (a burst's end is seen without a new arrival)."""

    def __init__(self, tau_s: float = RATE_TAU_S):
        self.tau = tau_s
        self._value = 0.0
        self._at = 0.0

    def add(self, now: float, items: int) -> None:
        self._value = self.at(now) + items / self.tau
        self._at = now

    def at(self, now: float) -> float:
        dt = now - self._at
        return self._value * math.exp(-dt / self.tau) if dt > 0 else self._value

    def confident(self, now: float) -> float:
        """The rate RATE_SIGMAS standard deviations below the estimate. The
        decayed count of a Poisson stream at rate lambda deviates by
        1/sqrt(2 lambda tau) of lambda (22% at 356/s with tau 30 ms), and
        the adaptive window starts waiting where batches of one stop
        keeping up: deciding on the estimate itself, one high reading in
        eight started waits that steady traffic below that point never
        needed (+10-20% p99 in bench_deadlines --simulate)."""
        lam = self.at(now)
        return lam * max(0.0, 1 - RATE_SIGMAS / math.sqrt(2 * lam * self.tau)) if lam > 0 else 0.0


class ComputeTimes:
    """Expected compute seconds of a batch of b items: c(b) = a + k * b,
    fitted to what the instances measured. A shared host times the same
    batch 3-5x apart from one run to the next, and one number per size (the
    old per-size EMA) let a single slow run of a batch of 1 make batching
    look necessary, or a lucky batch of 2 make waiting look free. So:
    - per size, the median of its last SAMPLES runs (one 5x outlier in a
      window moves it by one rank, not 5x);
    - one line through those medians over every size, weighted by how many
      runs each holds (a size seen once counts once), then refitted once with
      the sizes far off the line down-weighted (Cauchy weights on the
      residual over twice their median): no size's noise bends the rest;
    - a >= 0 and k >= 0: a larger batch never computes faster;
    - one size measured: c(b) = c(size) * b / size (no gain from batching
      assumed until a larger batch shows one)."""

    def __init__(self, paired: bool = True):
        self._runs: dict[int, deque] = {}
        self._median: dict[int, float] = {}
        self._records = 0                       # batches recorded, for joins()' re-probe
        self._last_run: dict[int, int] = {}     # size -> the value of _records when it last ran
        # (a: seconds per batch, k: seconds per item), fitted when first read
        # after a record: ~20 us of Python per fit, which a server with a
        # fixed window and no deadlines would otherwise pay on every batch.
        self._line: tuple[float, float] | None = (0.0, 0.0)
        # The adaptive window's drift-free costs (engine.server.window); only it reads
        # them, so a fixed window does not pay their bookkeeping per batch.
        self.paired = PairedCosts() if paired else None

    def record(self, items: int, seconds: float) -> None:
        if self.paired is not None:
            self.paired.record(items, seconds)
        runs = self._runs.get(items)
        if runs is None:
            runs = self._runs[items] = deque(maxlen=SAMPLES)
        runs.append(seconds)
        self._median[items] = statistics.median(runs)
        self._line = None
        self._records += 1
        self._last_run[items] = self._records

    @property
    def fixed(self) -> float:
        return (self._line or self._fit())[0]

    @property
    def per_item(self) -> float:
        return (self._line or self._fit())[1]

    def _fit(self) -> tuple[float, float]:
        sizes = sorted(self._median)
        ys = [self._median[b] for b in sizes]
        if len(sizes) == 1:
            self._line = (0.0, ys[0] / sizes[0])
            return self._line
        counts = [len(self._runs[b]) for b in sizes]
        a, k = _weighted_line(sizes, ys, counts)
        residuals = [abs(y - (a + k * b)) for b, y in zip(sizes, ys)]
        scale = 2 * statistics.median(residuals)
        if scale > 0:
            weights = [n / (1 + (r / scale) ** 2) for n, r in zip(counts, residuals)]
            a, k = _weighted_line(sizes, ys, weights)
        self._line = (a, k)
        return self._line

    @property
    def measured(self) -> bool:
        return bool(self._median)

    def table(self) -> dict[int, float]:
        """The median measured seconds per batch size."""
        return dict(sorted(self._median.items()))

    def estimate(self, items: float) -> float:
        """Expected compute seconds of a batch of `items`; 0.0 when nothing is measured."""
        if not self._median:
            return 0.0
        a, k = self._line or self._fit()
        return a + k * items

    def joins(self, items: int, more: int) -> bool:
        """Whether a batch of `items` should take `more` items (module
        docstring, "Merging must pay"): no only when the three sizes are
        measured, the merged one within the last REPROBE_RUNS batches, and
        its median is no less than the other two's sum. (The fitted line
        would not do for a size not measured: it is straight, so it puts
        the merge at a tie or a gain wherever the measured sizes do not.)"""
        merged = self._median.get(items + more)
        apart = self._median.get(items), self._median.get(more)
        if merged is None or None in apart or self._records - self._last_run[items + more] >= REPROBE_RUNS:
            return True
        return merged < apart[0] + apart[1]

    def floor(self, items: int) -> float:
        """What a batch holding `items` is expected to compute for at least:
        the fit at `items`, and no more than the largest median of a size
        <= items (a fit of a curved cost can overshoot the small sizes);
        0.0 until a size <= items has been measured."""
        below = [m for b, m in self._median.items() if b <= items]
        return min(self.estimate(items), max(below)) if below else 0.0

    def lower_bound(self, items: int) -> float:
        """A batch holding `items` computes for at least this long: floor()
        less the noise margin."""
        return LOWER_BOUND_MARGIN * self.floor(items)


def _weighted_line(xs: list[int], ys: list[float], ws: list[float]) -> tuple[float, float]:
    """Weighted least squares y = a + k x with a >= 0 and k >= 0."""
    sw = sum(ws)
    mx = sum(w * x for w, x in zip(ws, xs)) / sw
    my = sum(w * y for w, y in zip(ws, ys)) / sw
    sxx = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs))
    k = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys)) / sxx if sxx > 0 else 0.0
    if k <= 0:
        return my, 0.0
    a = my - k * mx
    if a < 0:  # through the origin
        return 0.0, sum(w * x * y for w, x, y in zip(ws, xs, ys)) / sum(w * x * x for w, x in zip(ws, xs))
    return a, k


class _Backlog:
    """Compute seconds of the requests counted so far, batched as the policy
    forms them from a long queue: per shape, full batches of `size` and one
    of the rest, each costing cost(b)."""

    def __init__(self, cost: Callable[[int], float], size: int):
        self.cost = functools.cache(cost)   # one walk asks the same few sizes many times
        self.size = size
        self._full = cost(size)
        self._items: dict = {}
        self.seconds = 0.0

    def _batches(self, n: int) -> float:
        full, rest = divmod(n, self.size)
        return full * self._full + (self.cost(rest) if rest else 0.0)

    def adding(self, key, items: int) -> float:
        """The seconds once `items` more of shape `key` are counted (nothing changes)."""
        n = self._items.get(key, 0)
        return self.seconds - self._batches(n) + self._batches(n + items)

    def add(self, key, items: int) -> None:
        self.seconds = self.adding(key, items)
        self._items[key] = self._items.get(key, 0) + items

    def remove(self, key, items: int) -> None:
        n = self._items[key]
        self.seconds += self._batches(n - items) - self._batches(n)
        self._items[key] = n - items


GUARD_WALK = 64   # queued requests per level the hopeless walk looks at (see _overdue)


@dataclass
class Decision:
    batch: list = field(default_factory=list)       # run these now, as one batch
    hopeless: list = field(default_factory=list)    # refuse these: their deadline cannot be met
    wait_until: float | None = None                 # else: nothing before this clock time (None: idle)
    waited_s: float = 0.0                           # how long the window held `batch` back


class BatchPolicy:
    """Queues and decisions for one model. Requests are objects with the
    attributes batch, key, priority (1-based), deadline (clock seconds or
    None), arrival (clock seconds) and state; the policy sets `state` and
    the attributes `seq` and `large`, and on a request it refuses as
    hopeless, `need_s`: the compute seconds it found the request needed
    before it could be answered (its queue ahead and its own batch)."""

    def __init__(self, *, levels: int, max_batch: int, batchable: bool, preferred=(),
                 delay_us: int | None, clock: Callable[[], float], edf: bool = True, instances: int = 1,
                 queue_guard: bool = True):
        self.clock = clock
        # False: the hopeless rule counts the request's own compute only (the
        # rule before the queue ahead was counted; kept to measure what it changes).
        self.queue_guard = queue_guard
        self.instances = max(1, instances)
        self._running_ends: list[float] = []   # expected end of each batch running (clock seconds)
        self.edf = edf                     # False: FIFO within a level (queue_order: fifo)
        self.batchable = batchable
        self.max_batch = max_batch if batchable else 1
        self.preferred = sorted(s for s in preferred if s <= self.max_batch)
        self.target = self.preferred[-1] if self.preferred else self.max_batch
        self.fixed_delay_s = None if delay_us is None else delay_us / 1e6
        self.large_at = max(2, math.ceil(LARGE_FRACTION * self.max_batch))
        self.rate = ArrivalRate()
        self.compute = ComputeTimes(paired=self.fixed_delay_s is None)
        self._heaps: list[list] = [[] for _ in range(levels)]
        self.depth = [0] * levels          # queued requests per level
        self.queued = 0
        self.queued_deadlines = 0          # of them, those with a deadline (only they can be overdue)
        self.running = 0
        self.window_s = self.fixed_delay_s or 0.0  # the wait last decided for a head
        self._seq = itertools.count()
        self._small_first = [False] * levels
        self._last_event = 0.0             # last arrival or completion: the auto window counts from it
        self._last_finish = 0.0            # last completion: when an instance could next run a batch
        # Since the last dispatch, a request arrived while others were queued or running.
        self._overlap = False
        self._sequential = True            # the last batch: one request, nothing arrived while it ran
        # What the window cost: batches dispatched after a wait, and the time
        # they waited once the instance could have run their head.
        self.waits = 0
        self.waited_s = 0.0
        self._waited = False
        # Diagnostics only (bench_deadlines --cells diag/ab), not configuration:
        # False, decide waits but dispatch anyway; False, the window without
        # the rule that a wait must not build a queue (as before session 13).
        self.apply_waits = True
        self.queue_rule = True

    @property
    def auto(self) -> bool:
        return self.fixed_delay_s is None

    # ---- admission --------------------------------------------------------
    def hopeless(self, req, now: float) -> bool:
        """Whether `req`, not queued yet, cannot meet its deadline behind the
        work now running and queued ahead of it (module docstring,
        "Hopeless deadlines")."""
        if req.deadline is None:
            return False
        if not (self.queue_guard and (self.queued or self._running_ends)):
            need = self.compute.lower_bound(req.batch)
            if now + need >= req.deadline:
                req.need_s = need
                return True
            return False
        late = self._overdue(now, req)
        if req in late:
            return True
        # Admitted requests keep their place: one that would make a request of
        # its level already queued miss is refused itself.
        level = req.priority - 1
        pushed = [r for r in late if r.priority - 1 == level]
        if pushed:
            before = set(map(id, self._overdue(now)))
            pushed = [r for r in pushed if id(r) not in before]
            if pushed:
                req.need_s = 0.0   # it could make it, at another's expense
                return True
        return False

    def _overdue(self, now: float, newcomer=None) -> list:
        """The queued requests (and `newcomer`, placed where add() would put
        it) that the work ahead of them in queue order makes miss their
        deadline, walking the queue in that order; each gets `need_s`. A
        request found overdue adds nothing for those behind it. EDF: where
        leaving out the most urgent request counted so far in its level
        lets the late one make it, that one is left out instead (module
        docstring, "Hopeless deadlines")."""
        if not self.compute.measured:
            return []
        spread = self.instances
        running = sum(max(0.0, end - now) for end in self._running_ends) / spread
        backlog = _Backlog(self.compute.floor, self.max_batch)
        last = newcomer.priority - 1 if newcomer is not None else len(self._heaps) - 1
        out = []
        for level, heap in enumerate(self._heaps[:last + 1]):
            # The first GUARD_WALK in order only: the walk runs on every submit
            # with a deadline and every decision, and a request further back is
            # still checked when it gets there. A newcomer placed beyond them is
            # judged by the work ahead that was counted (a lower bound: it is
            # refused less often, never more).
            entries = heapq.nsmallest(GUARD_WALK, (e for e in heap if e[2].state == QUEUED))
            if newcomer is not None and level == last:
                order = newcomer.deadline if self.edf else math.inf
                bisect.insort(entries, (order, math.inf, newcomer))
            counted: list = []
            for _, seq, r in entries:
                after = backlog.adding(r.key, r.batch)
                if r.deadline is not None:
                    need = LOWER_BOUND_MARGIN * (running + backlog.seconds / spread + after - backlog.seconds)
                    if now + need >= r.deadline:
                        if self.edf and counted and r is not newcomer:
                            first = heapq.heappop(counted)
                            backlog.remove(first[2].key, first[2].batch)
                            after = backlog.adding(r.key, r.batch)
                            need2 = LOWER_BOUND_MARGIN * (running + backlog.seconds / spread + after - backlog.seconds)
                            if now + need2 < r.deadline:
                                first[2].need_s = 0.0
                                out.append(first[2])
                                backlog.add(r.key, r.batch)
                                heapq.heappush(counted, (r.deadline, seq, r))
                                continue
                            backlog.add(first[2].key, first[2].batch)
                            heapq.heappush(counted, first)
                        r.need_s = need
                        out.append(r)
                        continue
                    heapq.heappush(counted, (r.deadline, seq, r))
                backlog.add(r.key, r.batch)
        return out

    def add(self, req) -> None:
        now = self.clock()
        req.seq = next(self._seq)
        req.large = self.batchable and req.batch >= self.large_at
        req.state = QUEUED
        if self.queued or self.running:
            self._overlap = True
        self.rate.add(now, req.batch)
        self._last_event = now
        level = req.priority - 1
        order = req.deadline if self.edf and req.deadline is not None else math.inf
        heapq.heappush(self._heaps[level], (order, req.seq, req))
        self.depth[level] += 1
        self.queued += 1
        self.queued_deadlines += req.deadline is not None

    def remove(self, req) -> bool:
        """Take a queued request out (expired, cancelled); True if it was queued.
        Its heap entry goes lazily, when it reaches the top."""
        if req.state != QUEUED:
            return False
        req.state = DONE
        self.depth[req.priority - 1] -= 1
        self.queued -= 1
        self.queued_deadlines -= req.deadline is not None
        return True

    def drop_all(self) -> list:
        """Empty every queue (the model is unloading); the requests that were queued."""
        dropped = [e[2] for heap in self._heaps for e in heap if e[2].state == QUEUED]
        for r in dropped:
            r.state = DONE
        self._heaps = [[] for _ in self._heaps]
        self.depth = [0] * len(self.depth)
        self.queued = self.queued_deadlines = 0
        return dropped

    # ---- decisions --------------------------------------------------------
    def decide(self) -> Decision:
        """What an idle instance does now."""
        now = self.clock()
        # Re-checked against the queue as it is now (module docstring, "Hopeless deadlines").
        # Only a request with a deadline can be overdue: without one queued the
        # walk (O(queue) per decision) is skipped, so deadline-free traffic
        # pays nothing for the guard.
        overdue = (self._overdue(now) if self.queue_guard and self.queued_deadlines
                   and (self.queued > 1 or self._running_ends) else [])
        for r in overdue:
            self.remove(r)
        head = self._head()
        if head is None:
            return Decision(hopeless=overdue)
        lone = self._sequential and not self._overlap and self.queued == 1 and not self.running
        if lone:
            self.window_s = 0.0
        elif self.batchable:
            items, earliest = self._company(head)
            # No wait for company that would not pay to take (one more request of the head's size).
            if items < self.target and self.compute.joins(items, head.batch):
                leave = self._leave_at(head, items, earliest, now)
                if now < leave and self.apply_waits:
                    self._waited = True
                    return Decision(wait_until=leave, hopeless=overdue)
        waited = 0.0
        if self._waited:
            waited = max(0.0, now - max(head.arrival, self._last_finish))
            self.waits += 1
            self.waited_s += waited
            self._waited = False
        batch = self._take(head)
        self._overlap = False
        live, hopeless = [], []
        for r in batch:
            need = self.compute.lower_bound(r.batch)
            if r.deadline is not None and now + need >= r.deadline:
                r.need_s = need
                hopeless.append(r)
            else:
                live.append(r)
        for r in hopeless:
            r.state = DONE
        if live:
            self.running += 1
            self._running_ends.append(now + self.compute.floor(sum(r.batch for r in live)))
        return Decision(batch=live, hopeless=overdue + hopeless, waited_s=waited)

    def finished(self, batch: list, seconds: float | None) -> None:
        """A batch from decide() ended; `seconds` its compute time (None: it failed)."""
        self.running -= 1
        if self._running_ends:   # which batch ended is not known: the one expected first
            self._running_ends.remove(min(self._running_ends))
        if seconds is not None:
            self.compute.record(sum(r.batch for r in batch), seconds)
        self._sequential = len(batch) == 1 and not self._overlap
        self._last_event = self._last_finish = self.clock()

    def auto_wait_s(self, items: int, now: float) -> float:
        """The adaptive window's wait for more company, from the last event
        (see the module docstring): (b* - n) / lambda."""
        lam = self.rate.confident(now)
        if lam <= 0 or not self.compute.measured:
            return 0.0
        cost, sigma = self._window_costs()
        alone = cost(items) / items
        if lam * alone <= 1 and self.queue_rule:
            # Batches of n keep up, so no b passes the rule below ((b - n) / lam
            # > (b - n) c(n) / n >= b c(n) / n - c(b)): the common case, decided
            # without weighing the sizes (~50 us of Python per decision).
            return 0.0
        best_b, best_cost = items, p99_latency(items, items, lam, cost, sigma)
        for b in range(items + 1, min(self.target, items + AUTO_SIZES) + 1):
            # The wait must not build a queue: it idles the instance no longer
            # than the batch of b saves against its items in batches of n.
            if (b - items) / lam > b * alone - cost(b) and self.queue_rule:
                continue
            c = p99_latency(b, items, lam, cost, sigma)
            if c < best_cost:
                best_b, best_cost = b, c
        return (best_b - items) / lam

    def _window_costs(self) -> tuple[Callable[[float], float], float]:
        """The adaptive window's cost of a batch and its spread: the paired
        costs (engine.server.window) once two sizes ran back to back, else
        the fitted line with no spread."""
        paired = self.compute.paired
        if paired is None or paired.seconds(1) is None:
            return self.compute.estimate, 0.0
        return paired.seconds, paired.spread()

    def _leave_at(self, head, items: int, earliest: float | None, now: float) -> float:
        if self.auto:
            # The window is the wait added once the instance could run the head.
            start = max(head.arrival, self._last_finish)
            cap = min(AUTO_CAP_S, self._window_costs()[0](self.target))
            leave = min(start + cap, max(self._last_event, start) + self.auto_wait_s(items, now))
        else:
            start = head.arrival
            leave = start + self.fixed_delay_s
        self.window_s = max(0.0, leave - start)
        if earliest is not None:
            leave = min(leave, earliest - self.compute.estimate(items))
        return leave

    # ---- queues -----------------------------------------------------------
    def _head(self):
        for level, heap in enumerate(self._heaps):
            while heap and heap[0][2].state != QUEUED:
                heapq.heappop(heap)
            if not heap:
                self._small_first[level] = False
                continue
            if self._small_first[level]:
                small = [e for e in heap if e[2].state == QUEUED and not e[2].large]
                if small:
                    return min(small)[2]
                self._small_first[level] = False
            return heap[0][2]
        return None

    def _company(self, head) -> tuple[int, float | None]:
        """Items queued that could join the head's batch (up to the target),
        and the earliest deadline among them."""
        items, earliest = 0, None
        for heap in self._heaps:
            for _, _, r in heap:
                if r.state == QUEUED and r.key == head.key:
                    items += r.batch
                    if r.deadline is not None and (earliest is None or r.deadline < earliest):
                        earliest = r.deadline
        return min(items, self.target), earliest

    def _take(self, head) -> list:
        if not self.batchable:
            return self._claim([head])
        room = self.max_batch
        available, _ = self._company(head)
        if self.preferred and available < room:
            fitting = [p for p in self.preferred if p <= available]
            room = fitting[-1] if fitting else room
        taken = [head]
        room -= head.batch
        items = head.batch
        now = self.clock()
        # The earliest deadline in the batch that it can still meet: nobody
        # joins if the larger batch would compute past it.
        due = head.deadline if head.deadline is not None and now + self.compute.estimate(items) <= head.deadline \
            else math.inf
        head.state = RUNNING  # so the scan below passes over it
        for heap in self._heaps:
            if room <= 0:
                break
            aside = []
            while heap and room > 0:
                entry = heapq.heappop(heap)
                r = entry[2]
                if r.state != QUEUED:
                    continue
                done_at = now + self.compute.estimate(items + r.batch)
                if (r.key == head.key and r.batch <= room and done_at <= due
                        and self.compute.joins(items, r.batch)):
                    r.state = RUNNING
                    taken.append(r)
                    room -= r.batch
                    items += r.batch
                    if r.deadline is not None and done_at <= r.deadline:
                        due = min(due, r.deadline)
                else:
                    aside.append(entry)
            for entry in aside:
                heapq.heappush(heap, entry)
        head.state = QUEUED
        taken = self._claim(taken)
        level = head.priority - 1
        self._small_first[level] = head.large and any(
            e[2].state == QUEUED and not e[2].large for e in self._heaps[level])
        return taken

    def _claim(self, taken: list) -> list:
        for r in taken:
            r.state = RUNNING
            self.depth[r.priority - 1] -= 1
            self.queued_deadlines -= r.deadline is not None
        self.queued -= len(taken)
        return taken

    # ---- reporting --------------------------------------------------------
    def snapshot(self) -> dict:
        now = self.clock()
        return {"window_us": round(self.window_s * 1e6, 1), "window": "auto" if self.auto else "fixed",
                "arrival_rate_per_s": round(self.rate.at(now), 3), "queue_depth": self.queued,
                "queue_depth_by_priority": {str(i + 1): d for i, d in enumerate(self.depth)},
                "compute_us_by_batch": {str(b): round(s * 1e6, 1) for b, s in self.compute.table().items()},
                "compute_fit_us": {"fixed": round(self.compute.fixed * 1e6, 1),
                                   "per_item": round(self.compute.per_item * 1e6, 1)},
                "window_waits": self.waits, "window_waited_us": round(self.waited_s * 1e6, 1),
                "window_costs_us": self._window_cost_table(), "window_cost_sigma": round(self._window_costs()[1], 3)}

    def _window_cost_table(self) -> dict[str, float]:
        """The adaptive window's c(b) now, per measured size (engine.server.window)."""
        cost = self._window_costs()[0]
        return {str(b): round(cost(b) * 1e6, 1) for b in self.compute.table()}
