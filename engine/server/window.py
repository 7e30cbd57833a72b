"""The adaptive batch window's model of one instance (max_queue_delay_us:
auto; engine.server.batching decides with it): what a batch of b costs on
the host as it is now, and the expected 99th-percentile latency of a
request if the instance runs batches of b.

Why not the fitted line of engine.server.batching.ComputeTimes: on a shared
host the batches that run while the host is slow are the large ones (a
queue forms because the host is slow), so the median of each size mixes
the size's cost with the host's speed when that size ran. The live
benchmark's medians had a batch of 8 at 11.8x a batch of 1 where the model
costs 3.0x (measured in process with the sizes interleaved; session 9's
had a batch of 2 cheaper than a batch of 1; docs/PERFORMANCE.md, session
10); the line through them said batching gains nothing, so auto never
waited. Two runs back to back see the same host, so PairedCosts takes the
cost *shape* only from the ratio of consecutive runs and the *level* from
the last runs.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import deque

import numpy as np

PAIRS = 32          # ratios kept per pair of sizes (their median)
RECENT = 16         # last runs that set the level (the host's speed now)
TAIL = 0.01         # the window minimises the expected (1 - TAIL) quantile: p99
Z = 2.326           # the standard normal's 99th percentile
RESOLVE_EVERY = 8   # records between solves of the shape (it moves slowly; the level follows every run)


class PairedCosts:
    """Seconds per batch of b, as the host runs now: exp(level + x_b).
    x_b (the log cost of b relative to the smallest connected size) solves
    the least squares over the medians of log(t_j / t_i) for consecutive
    runs i, j of different sizes (a host drifting over seconds cancels in
    each ratio); level is the median of log(t) - x_size over the last
    RECENT runs. A larger batch never computes faster (x is made
    non-decreasing), and a size never measured is interpolated linearly
    between measured ones (beyond the largest: the last segment's slope;
    below the smallest: proportional, no gain assumed). What pairing cannot
    cancel: a slowdown that starts between the two runs of a pair. The
    sizes that form at the onset of a slow spell read too costly (3 and 4
    at 2.4-5.5x a batch of 1 live, 1.4x in process), which errs toward
    fewer waits."""

    def __init__(self):
        self._prev: tuple[int, float] | None = None
        self._diffs: dict[tuple[int, int], deque] = {}
        self._recent: deque = deque(maxlen=RECENT)
        self._shape: dict[int, float] = {}
        self._stale = 0                 # records since the shape was solved
        self._curve: tuple | None = ()

    def record(self, items: int, seconds: float) -> None:
        if seconds <= 0:
            return
        lt = math.log(seconds)
        if self._prev is not None and self._prev[0] != items:
            (a, la), (b, lb) = sorted([self._prev, (items, lt)])
            d = self._diffs.setdefault((a, b), deque(maxlen=PAIRS))
            d.append(lb - la)
            self._stale += 1
        self._prev = (items, lt)
        self._recent.append((items, lt))
        self._curve = None

    def shape(self) -> dict[int, float]:
        """{size: log cost relative to the smallest connected size},
        solved again every RESOLVE_EVERY new pairs (a solve over many
        sizes costs ~ms of Python; once per batch would tax the loop)."""
        if self._stale and (self._stale >= RESOLVE_EVERY or not self._shape):
            # The pairs' medians too: a record runs between a batch's end and
            # the next one's start, on the loop, so it only appends.
            self._shape = _solve({pair: (statistics.median(d), len(d)) for pair, d in self._diffs.items()})
            self._stale = 0
        return self._shape

    def _fit(self) -> tuple[list[int], list[float], float] | None:
        """(sizes, their seconds now, sigma), computed when first read after a record."""
        if self._curve is None:
            shape = self.shape()
            logs = [(lt - shape[b]) for b, lt in self._recent if b in shape]
            if not logs:
                self._curve = ()
                return None
            level = statistics.median(logs)
            sigma = 1.4826 * statistics.median(abs(v - level) for v in logs)
            sizes = sorted(shape)
            self._curve = (sizes, [math.exp(level + shape[s]) for s in sizes], sigma)
        return self._curve or None

    def seconds(self, b: float) -> float | None:
        """Expected seconds of a batch of b now; None until two sizes ran back to back."""
        fit = self._fit()
        if fit is None:
            return None
        sizes, cost, _ = fit
        if b <= sizes[0]:
            return cost[0] * b / sizes[0]
        if b >= sizes[-1]:
            return cost[-1] + (b - sizes[-1]) * max(0.0, (cost[-1] - cost[-2]) / (sizes[-1] - sizes[-2]))
        i = bisect.bisect_left(sizes, b)
        lo, hi = sizes[i - 1], sizes[i]
        return cost[i - 1] + (b - lo) * (cost[i] - cost[i - 1]) / (hi - lo)

    def spread(self) -> float:
        """Sigma of log(run time) around its expected value: 1.4826 x the
        median absolute deviation of the last runs' log residuals (robust
        to the one-in-twenty 5x outlier); 0.0 until measured."""
        fit = self._fit()
        return fit[2] if fit else 0.0


def _solve(edges: dict[tuple[int, int], tuple[float, int]]) -> dict[int, float]:
    """Weighted least squares for x over edges (a, b) -> (x_b - x_a, weight),
    on the component of the smallest size, x = 0 there, then made
    non-decreasing in size."""
    if not edges:
        return {}
    adj: dict[int, set] = {}
    for a, b in edges:
        adj.setdefault(a, set()).add(b)
        adj.setdefault(b, set()).add(a)
    root = min(adj)
    seen, todo = {root}, [root]
    while todo:
        for nb in adj[todo.pop()]:
            if nb not in seen:
                seen.add(nb)
                todo.append(nb)
    sizes = sorted(seen)
    index = {s: i for i, s in enumerate(sizes)}
    # Built in Python lists: a few dozen edges, where np.add.at's per-call
    # overhead was most of a solve (~80 us, on the loop between batches).
    n = len(sizes)
    lap = [[0.0] * n for _ in range(n)]
    rhs = [0.0] * n
    for (a, b), (d, w) in edges.items():
        if a in index:
            i, j = index[a], index[b]
            lap[i][i] += w
            lap[j][j] += w
            lap[i][j] -= w
            lap[j][i] -= w
            rhs[j] += w * d
            rhs[i] -= w * d
    x = np.zeros(n)
    x[1:] = np.linalg.solve(np.array(lap)[1:, 1:], np.array(rhs)[1:])
    return dict(zip(sizes, np.maximum.accumulate(x).tolist()))


def p99_latency(b: float, items: float, lam: float, cost, sigma: float) -> float:
    """Expected 99th-percentile latency of the requests of a batch the
    instance holds back until it has b items (n = items queued), at arrival
    rate lam, a batch of b costing cost(b) seconds with a lognormal spread
    sigma from run to run:
        (b - n) / lam  +  exp(Z sigma) * (r99(k) + q(k) + c(b))
    the wait for company (the head's), then the wait behind the batch
    running when a request arrives, the queue that forms behind it, and
    its own batch, at the run times' 99th percentile. k = max(b, lam c(b))
    is the batch the arrivals during one run make next, busy a fraction
    rho = lam c(k) / k of the time. The residual of the run in progress is
    uniform, so its 99th percentile is r99 = c(k) (1 - TAIL / rho) where
    rho > TAIL, else 0. Runs that take longer than their mean leave more
    queued than one batch takes: Kingman's (G/G/1) mean wait for the run
    times' spread alone, batches of k as the customers,
        q(k) = c(k) (exp(sigma^2) - 1) / 2 * rho / (1 - rho)
    It grows like rho / (1 - rho) near saturation, and a larger b lowers
    rho where a batch costs less per item: that is where waiting pays
    before batches of n stop keeping up, on a host whose run times vary
    (session 11's sine peaks). The arrivals' own variation (1/k in
    Kingman's) is left out: a batching instance takes whatever bunched
    during a run in its next batch, and with it auto waited in sine's peaks
    where window 0 was best (bench_deadlines --simulate: 1.15 against
    1.05). Where batches cost their size, c(k)/k and so rho do not fall
    with b, and waiting only adds. L = inf where rho >= 1 (batches of b
    cannot keep up)."""
    c = cost(b)
    k = max(b, lam * c)
    ck = cost(k)
    rho = lam * ck / k
    if rho >= 1:
        return math.inf
    r99 = ck * (1 - TAIL / rho) if rho > TAIL else 0.0
    queue = ck * math.expm1(sigma * sigma) / 2 * rho / (1 - rho)
    return (b - items) / lam + math.exp(Z * sigma) * (r99 + queue + c)
