"""engine.server.batching.BatchPolicy driven by a fake clock: every decision
is deterministic, no event loop and no sleeps."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from engine.server.batching import AUTO_CAP_S, DONE, QUEUED, ArrivalRate, BatchPolicy, ComputeTimes

KEY = (("x", "<f4", (16,)),)
OTHER_KEY = (("x", "<f4", (32,)),)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class Req:
    def __init__(self, clock: Clock, tag: str, *, batch: int = 1, priority: int = 1, timeout_s: float | None = None,
                 key=KEY):
        self.tag = tag
        self.batch = batch
        self.key = key
        self.priority = priority
        self.arrival = clock()
        self.deadline = None if timeout_s is None else clock() + timeout_s
        self.state = QUEUED

    def __repr__(self):
        return self.tag


def policy(clock, *, levels=1, max_batch=8, delay_us: int | None = 0, preferred=(), compute=None) -> BatchPolicy:
    p = BatchPolicy(levels=levels, max_batch=max_batch, batchable=max_batch > 1, preferred=preferred,
                    delay_us=delay_us, clock=clock)
    for items, seconds in (compute or {}).items():
        p.compute.record(items, seconds)
    return p


def run(p: BatchPolicy, clock: Clock, seconds: float = 0.0) -> list:
    """Dispatch one batch, let it compute for `seconds`, finish it: its tags."""
    d = p.decide()
    assert d.batch, d
    clock.advance(seconds)
    p.finished(d.batch, seconds or None)
    return [r.tag for r in d.batch]


def test_earliest_deadline_first_within_a_level_then_fifo_without_deadline():
    clock = Clock()
    p = policy(clock, max_batch=1)
    for tag, timeout in [("none-a", None), ("late", 5.0), ("none-b", None), ("soon", 0.005), ("mid", 1.0)]:
        p.add(Req(clock, tag, timeout_s=timeout))
        clock.advance(1e-4)
    assert [run(p, clock)[0] for _ in range(5)] == ["soon", "mid", "late", "none-a", "none-b"]
    assert p.decide().batch == [] and p.queued == 0


def test_priorities_still_come_first():
    clock = Clock()
    p = policy(clock, levels=3, max_batch=1)
    p.add(Req(clock, "low-soon", priority=3, timeout_s=0.001))
    p.add(Req(clock, "mid-none", priority=2))
    p.add(Req(clock, "high-late", priority=1, timeout_s=10.0))
    p.add(Req(clock, "mid-soon", priority=2, timeout_s=0.5))
    order = [run(p, clock)[0] for _ in range(4)]
    assert order == ["high-late", "mid-soon", "mid-none", "low-soon"]
    assert p.depth == [0, 0, 0]


def test_a_batch_takes_the_earliest_deadlines_of_its_shape_and_leaves_the_others():
    clock = Clock()
    p = policy(clock, max_batch=4)
    p.add(Req(clock, "none", timeout_s=None))
    p.add(Req(clock, "other-shape", timeout_s=0.001, key=OTHER_KEY))
    for tag, timeout in [("d3", 0.3), ("d1", 0.1), ("d2", 0.2), ("d4", 0.4)]:
        p.add(Req(clock, tag, timeout_s=timeout))
    assert run(p, clock) == ["other-shape"]   # the earliest deadline leads; nothing else shares its shape
    assert run(p, clock) == ["d1", "d2", "d3", "d4"]
    assert run(p, clock) == ["none"]


def test_nobody_joins_a_batch_if_that_makes_it_miss_a_deadline_of_a_request_in_it():
    clock = Clock()
    p = policy(clock, max_batch=8, compute={1: 0.004, 2: 0.006, 4: 0.010, 8: 0.020})
    tight = Req(clock, "tight", timeout_s=0.007)     # a batch of 2 (6 ms) makes it; 3 (8 ms) does not
    p.add(tight)
    for i in range(4):
        p.add(Req(clock, f"loose{i}", timeout_s=1.0))
    assert run(p, clock, 0.006) == ["tight", "loose0"]
    assert run(p, clock, 0.010) == ["loose1", "loose2", "loose3"]


def test_a_hopeless_deadline_is_refused_at_once_and_at_dispatch():
    clock = Clock()
    p = policy(clock, max_batch=4, compute={1: 0.010, 4: 0.020})
    # Lower bound for a batch of 1: 0.9 * 10 ms; for 4: 0.9 * 20 ms.
    assert p.hopeless(Req(clock, "5ms", timeout_s=0.005), clock())
    assert not p.hopeless(Req(clock, "50ms", timeout_s=0.050), clock())
    assert p.hopeless(Req(clock, "4x15ms", batch=4, timeout_s=0.015), clock())
    assert not p.hopeless(Req(clock, "no-deadline"), clock())
    # Queued with enough time, then the time runs out behind a long batch: refused when its batch forms.
    blocker = Req(clock, "blocker")
    p.add(blocker)
    assert p.decide().batch == [blocker]
    late = Req(clock, "late", timeout_s=0.030)
    fine = Req(clock, "fine", timeout_s=1.0)
    p.add(late)
    p.add(fine)
    clock.advance(0.025)                      # 5 ms left: less than a batch of 1 computes
    p.finished([blocker], 0.010)
    d = p.decide()
    assert d.hopeless == [late] and d.batch == [fine]
    assert late.state == DONE and p.queued == 0


def test_nothing_is_refused_before_a_batch_of_its_size_or_smaller_was_measured():
    clock = Clock()
    p = policy(clock, max_batch=4, compute={4: 1.0})
    assert not p.hopeless(Req(clock, "small", batch=1, timeout_s=0.001), clock())
    assert p.hopeless(Req(clock, "large", batch=4, timeout_s=0.5), clock())


def test_a_large_request_does_not_delay_small_ones_beyond_one_large_batch():
    clock = Clock()
    p = policy(clock, max_batch=8, compute={8: 0.01})
    # Three large requests (>= half of max_batch) queued ahead of small ones.
    for i in range(3):
        p.add(Req(clock, f"L{i}", batch=6))
    for i in range(3):
        p.add(Req(clock, f"s{i}", batch=1))
    first = run(p, clock, 0.01)
    assert first == ["L0", "s0", "s1"]        # room for two small ones beside the first large
    assert run(p, clock, 0.01) == ["s2", "L1"]  # the small one left over leads the next batch
    assert run(p, clock, 0.01) == ["L2"]


def test_small_requests_arriving_behind_a_stream_of_large_ones_wait_one_large_batch_at_most():
    clock = Clock()
    p = policy(clock, max_batch=8, compute={8: 0.01})
    for i in range(6):
        p.add(Req(clock, f"L{i}", batch=8))
    small = Req(clock, "small", batch=1)
    p.add(small)
    assert run(p, clock, 0.01) == ["L0"]
    assert run(p, clock, 0.01) == ["small"]   # not after L1..L5


def test_a_lone_request_on_an_idle_model_runs_at_once_even_with_a_window():
    clock = Clock()
    p = policy(clock, delay_us=2000)
    r = Req(clock, "lone")
    p.add(r)
    assert p.decide().batch == [r]


def test_fixed_window_waits_from_the_heads_arrival_and_no_longer_than_a_deadline_allows():
    clock = Clock()
    p = policy(clock, delay_us=2000, compute={1: 0.001, 2: 0.0012})
    a = Req(clock, "a")
    p.add(a)
    p.decide()                              # sequential: runs at once
    b = Req(clock, "b")
    p.add(b)                                # arrives while a runs: the next one waits for company
    clock.advance(0.001)
    p.finished([a], 0.001)
    d = p.decide()
    assert d.batch == [] and d.wait_until == pytest.approx(b.arrival + 0.002)
    c = Req(clock, "c", timeout_s=0.0015)  # its deadline is closer than the window
    p.add(c)
    d = p.decide()
    assert d.wait_until == pytest.approx(c.deadline - 0.0012)  # leave in time to compute a batch of 2
    clock.t = d.wait_until
    assert sorted(run(p, clock)) == ["b", "c"]


def test_arrival_rate_ema_settles_at_a_steady_rate_and_decays_when_arrivals_stop():
    rate, t = ArrivalRate(), 0.0
    for _ in range(2000):
        t += 0.001
        rate.add(t, 1)
    assert rate.at(t) == pytest.approx(1000, rel=0.02)
    assert rate.at(t + 0.5) < 10            # 5 time constants later


def test_compute_estimates_fit_a_line_through_the_median_of_each_size():
    c = ComputeTimes()
    assert c.estimate(4) == 0.0 and c.lower_bound(4) == 0.0
    c.record(1, 0.002)
    assert c.estimate(4) == pytest.approx(0.008)   # one size: no batching gain assumed
    c.record(8, 0.004)
    assert c.estimate(4) == pytest.approx(0.002 + 0.002 * 3 / 7)
    assert c.estimate(16) == pytest.approx(0.004 + 0.002 / 7 * 8)
    assert c.lower_bound(4) == pytest.approx(0.9 * 0.002)
    c.record(8, 0.004)
    c.record(8, 0.020)                               # one slow run among three: the median holds
    assert c.table()[8] == 0.004 and c.estimate(8) == pytest.approx(0.004)
    c.record(2, 0.001)                               # timed faster than a batch of 1 (a busy host)
    assert c.per_item >= 0 and c.estimate(2) >= c.estimate(1)
    assert c.lower_bound(2) <= 0.9 * 0.002


def noisy_runs(rng: random.Random, b: int) -> float:
    """A shared host's run of c(b) = 2 ms + 0.25 ms b: a heavy tail, and one run in 20 five times slower."""
    return (0.002 + 0.00025 * b) * rng.lognormvariate(0, 0.35) * (5.0 if rng.random() < 0.05 else 1.0)


def test_outliers_and_noise_do_not_move_the_compute_fit_much():
    rng = random.Random(5)
    c = ComputeTimes()
    for _ in range(40):
        for b in (1, 2, 3, 5, 8):
            c.record(b, noisy_runs(rng, b))
    for b in (1, 4, 8, 16):
        assert c.estimate(b) == pytest.approx(0.002 + 0.00025 * b, rel=0.2), b
    # A run of outliers at one size (3 of its 16 kept runs, 20x slow): the fit stays.
    before = c.estimate(1), c.estimate(8)
    for _ in range(3):
        c.record(2, 0.05)
    assert c.estimate(1) == pytest.approx(before[0], rel=0.1)
    assert c.estimate(8) == pytest.approx(before[1], rel=0.1)
    # The old per-size EMA took a single sample's word: a batch of 4 seen once, 5x slow.
    c.record(4, 5 * (0.002 + 0.00025 * 4))
    assert c.estimate(4) == pytest.approx(0.002 + 0.00025 * 4, rel=0.2)


def test_outliers_in_the_measurements_do_not_move_the_adaptive_window_much():
    clean, noisy = Clock(), Clock()
    p_clean = policy(clean, max_batch=16, delay_us=None,
                     compute={b: compute_time(b) for b in (1, 2, 4, 8, 16)})
    p_noisy = policy(noisy, max_batch=16, delay_us=None)
    rng = random.Random(6)
    for _ in range(30):
        for b in (1, 2, 4, 8, 16):
            p_noisy.compute.record(b, compute_time(b) * rng.lognormvariate(0, 0.35) *
                                   (5.0 if rng.random() < 0.05 else 1.0))
    for lam in (200.0, 1000.0, 2000.0):
        for p, clock in ((p_clean, clean), (p_noisy, noisy)):
            for k in range(200):                 # a steady stream at lam: the rate EMA settles
                clock.t += 1 / lam
                p.rate.add(clock.t, 1)
        w_clean, w_noisy = p_clean.auto_wait_s(1, clean()), p_noisy.auto_wait_s(1, noisy())
        # The window is a whole number of expected arrivals: at most one apart.
        assert abs(w_noisy - w_clean) <= 1.01 / p_clean.rate.confident(clean()), lam
        assert (w_noisy == 0) == (w_clean == 0), lam


# ---- the adaptive window -----------------------------------------------------
# A model with a large fixed cost per batch: c(b) = 2 ms + 0.05 ms * b.
FIXED_S, PER_ITEM_S = 0.002, 0.00005


def compute_time(b: int) -> float:
    return FIXED_S + PER_ITEM_S * b


def auto_policy(clock, max_batch=16) -> BatchPolicy:
    return policy(clock, max_batch=max_batch, delay_us=None, compute={b: compute_time(b) for b in (1, 2, 4, 8, 16)})


def simulate(p: BatchPolicy, clock: Clock, arrivals: list[float], cost=None) -> list[tuple[float, float, int, float]]:
    """Discrete-event run of one instance, a batch of b computing for
    cost(b) (default compute_time): requests arrive at the given times;
    returns (time, window waited, batch size, the wait the policy would
    choose for a lone request then) per dispatch."""
    cost = cost or compute_time
    pending = sorted(arrivals)
    i, busy_until, running, out = 0, None, None, []
    while i < len(pending) or p.queued or running:
        events = [t for t in (pending[i] if i < len(pending) else None, busy_until) if t is not None]
        d = p.decide() if running is None else None
        if d is not None and d.batch:
            running, busy_until = d.batch, clock() + cost(sum(r.batch for r in d.batch))
            out.append((clock(), p.window_s, len(d.batch), p.auto_wait_s(1, clock())))
            continue
        if d is not None and d.wait_until is not None:
            events.append(d.wait_until)
        clock.t = max(clock.t, min(events))
        if running is not None and clock.t >= busy_until:
            p.finished(running, cost(sum(r.batch for r in running)))
            running, busy_until = None, None
        while i < len(pending) and pending[i] <= clock.t:
            p.add(Req(clock, f"r{i}"))
            i += 1
    return out


def test_auto_window_is_zero_at_low_load():
    clock = Clock()
    p = auto_policy(clock)
    out = simulate(p, clock, [clock.t + k * 0.02 for k in range(200)])   # 50/s: 10% load
    assert all(size == 1 for _, _, size, _ in out)
    assert max(w for _, w, _, _ in out[20:]) == 0.0


def test_auto_window_does_not_wait_on_a_high_reading_of_steady_traffic_below_capacity():
    # 80% of the batch-1 capacity: batches of one keep up, but the 30 ms
    # rate EMA reads above capacity about one time in eight.
    clock = Clock()
    p = auto_policy(clock)
    lam = 0.8 / compute_time(1)
    out = simulate(p, clock, poisson(random.Random(4), clock.t, 3.0, lam))
    waited = [w for _, w, _, _ in out[50:] if w > 0]
    assert len(out) > 800 and len(waited) <= 0.01 * len(out), len(waited)   # 4% with the estimate itself


def optimal_window(true_lam: float, n: int = 1, max_batch: int = 16) -> float:
    """The model's optimum from engine.server.window.p99_latency's formula,
    independent of the policy's code path, at the rate it decides on for a
    settled estimate of true_lam (two deviations below), on the exact
    costs (the fake runs have no spread: sigma 0)."""
    lam = true_lam * (1 - 2 / math.sqrt(2 * true_lam * 0.03))

    def cost(b):
        c = compute_time(b)
        k = max(b, lam * c)
        rho = lam * compute_time(k) / k
        if rho >= 1:
            return math.inf
        return (b - n) / lam + compute_time(k) * max(0.0, 1 - 0.01 / rho) + c
    best = min(range(n, max_batch + 1), key=cost)
    return (best - n) / lam


def poisson(rng: random.Random, start: float, seconds: float, lam: float) -> list[float]:
    out, t = [], start
    while True:
        t += rng.expovariate(lam)
        if t >= start + seconds:
            return out
        out.append(t)


def planned(out, start: float, end: float) -> list[float]:
    return [w for t, _, _, w in out if start < t < end]


def test_auto_window_converges_for_constant_arrivals():
    clock = Clock()
    p = auto_policy(clock)
    lam = 900.0                                   # batches of one would load the instance to 185%
    t0 = clock.t
    out = simulate(p, clock, poisson(random.Random(1), t0, 3.0, lam))
    settled = planned(out, t0 + 1.0, t0 + 3.0)
    assert optimal_window(lam) > 0 and len(settled) > 100
    assert statistics.median(settled) == pytest.approx(optimal_window(lam), rel=0.25)
    assert max(w for _, w, _, _ in out) <= compute_time(16)                # the cap
    late = [s for t, _, s, _ in out if t > t0 + 1.0]
    assert sum(late) / len(late) > 1.5                                # it waits for company


def test_auto_window_follows_bursts_and_is_zero_between_them():
    clock = Clock()
    p = auto_policy(clock)
    t0, arrivals, rng = clock.t, [], random.Random(2)
    for burst in range(5):                       # 150 ms at 1000/s (205% of batch-1 capacity), then 350 ms silent
        arrivals += poisson(rng, t0 + burst * 0.5, 0.15, 1000.0)
    out = simulate(p, clock, arrivals)
    in_bursts = []
    for burst in range(5):
        start = t0 + burst * 0.5
        inside = [s for t, _, s, _ in out if start + 0.05 < t < start + 0.15]
        assert sum(inside) / len(inside) > 1.3, (burst, inside)       # batches form within the burst
        in_bursts += planned(out, start + 0.05, start + 0.15)
    # The optimum jumps from 0 to ~2 ms where batches of one stop keeping up
    # (~480/s), and a 30 ms EMA of a Poisson burst is +-15%: pooled over the
    # bursts' second halves.
    assert statistics.median(in_bursts) == pytest.approx(optimal_window(1000.0), rel=0.35)
    # The first request after a silence runs at once (no waiting on a stale rate).
    firsts = [next(w for t, w, _, _ in out if t >= t0 + b * 0.5) for b in range(1, 5)]
    assert firsts == [0.0] * 4, firsts


def test_auto_window_tracks_alternating_rates():
    clock = Clock()
    p = auto_policy(clock)
    t, arrivals, phases, rng = clock.t, [], [], random.Random(3)
    for phase in range(6):                       # 0.6 s at 60/s, 0.6 s at 900/s, ...
        lam = 60.0 if phase % 2 == 0 else 900.0
        phases.append((t, t + 0.6, lam))
        arrivals += poisson(rng, t, 0.6, lam)
        t += 0.6
    out = simulate(p, clock, arrivals)
    for start, end, lam in phases[1:]:
        settled = planned(out, start + 0.1, end)   # after 3 time constants
        if lam == 60.0:
            assert max(w for tt, w, _, _ in out if start + 0.1 < tt < end) == 0.0, start
        else:
            assert statistics.median(settled) == pytest.approx(optimal_window(lam), rel=0.25), start


def test_fifo_queue_order_keeps_arrival_order_within_a_level():
    clock = Clock()
    p = BatchPolicy(levels=1, max_batch=1, batchable=False, delay_us=0, clock=clock, edf=False)
    for tag, timeout in [("late", 5.0), ("none", None), ("soon", 0.5)]:
        p.add(Req(clock, tag, timeout_s=timeout))
    assert [run(p, clock)[0] for _ in range(3)] == ["late", "none", "soon"]


# ---- configuration -----------------------------------------------------------
def test_max_queue_delay_auto_and_queue_order_parse_and_bad_values_say_what_is_expected(tmp_path):
    from engine.server.config import ConfigError, parse_config

    def model(**keys):
        return parse_config({"models": [{"name": "m", "path": "m.aie", **keys}]}, base=tmp_path).models[0]

    assert model(max_queue_delay_us="auto").max_queue_delay_us is None
    assert model(max_queue_delay_us=0).max_queue_delay_us == 0
    assert model().max_queue_delay_us == 500 and model().queue_order == "edf"
    assert model(queue_order="fifo").queue_order == "fifo"
    for keys, message in [({"max_queue_delay_us": "soon"}, "expected 'auto' or an integer 0-10000000, got string 'soon'"),
                          ({"max_queue_delay_us": None}, "expected 'auto' or an integer 0-10000000, got null"),
                          ({"max_queue_delay_us": -1}, "expected 'auto' or an integer 0-10000000, got number -1"),
                          ({"queue_order": "lifo"}, "must be one of edf, fifo; got lifo")]:
        with pytest.raises(ConfigError) as err:
            model(**keys)
        assert message in str(err.value) and "engine.models[0]" in str(err.value), str(err.value)


def test_the_rendered_engine_yaml_keeps_auto_for_the_batch_window(tmp_path):
    from hostspec.loader import load_spec
    from hostspec.render import engine_config

    spec_file = tmp_path / "spec.yaml"
    (tmp_path / "m.onnx").write_bytes(b"")
    spec_file.write_text("version: 1\nengine:\n  models:\n    - {name: m, source: m.onnx, max_queue_delay_us: auto,"
                         " queue_order: fifo, instances: auto}\n")
    model = engine_config(load_spec([spec_file]))["models"][0]
    assert model["max_queue_delay_us"] == "auto" and model["queue_order"] == "fifo" and model["instances"] == 0
