"""The hopeless-deadline rule counts the work queued ahead of a request
(engine.server.batching, "Hopeless deadlines"): under a burst EDF then meets
at least as many deadlines as FIFO, where counting the request's own compute
alone let EDF meet fewer. Fake clock, no server, no sleeps."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from engine.server.batching import DONE, QUEUED
from test_batching_policy import Clock, Req, policy

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_deadlines import arrivals, deadlines, simulate  # noqa: E402


def queue(p, clock, *specs):
    """Queue requests (tag, timeout_s[, priority]) in order; returns them."""
    out = []
    for tag, timeout, *prio in specs:
        r = Req(clock, tag, timeout_s=timeout, priority=prio[0] if prio else 1)
        assert not p.hopeless(r, clock()), tag
        p.add(r)
        out.append(r)
    return out


def test_a_request_the_queue_ahead_makes_late_is_refused_at_once():
    clock = Clock()
    p = policy(clock, max_batch=1, compute={1: 0.010})
    queue(p, clock, ("a", 0.030), ("b", 0.030), ("c", 0.030))
    # Alone it would make it (9 ms lower bound, 35 left); behind 30 ms of earlier deadlines it cannot.
    late = Req(clock, "late", timeout_s=0.035)
    assert p.hopeless(late, clock())
    assert late.need_s == pytest.approx(0.9 * 0.040)
    # An earlier deadline goes ahead of them in EDF order, but here it would
    # push c past its deadline (36 ms > 30): an admitted request keeps its place.
    cut_in = Req(clock, "cut-in", timeout_s=0.012)
    assert p.hopeless(cut_in, clock()) and cut_in.need_s == 0.0
    # Where the queue has the slack, it goes ahead needing only its own compute.
    roomy = policy(clock, max_batch=1, compute={1: 0.010})
    queue(roomy, clock, ("x", 0.045), ("y", 0.045), ("z", 0.045))
    assert not roomy.hopeless(Req(clock, "early", timeout_s=0.012), clock())
    # FIFO order counts everything queued before it, whatever the deadlines.
    fifo = policy(clock, max_batch=1, compute={1: 0.010})
    fifo.edf = False
    queue(fifo, clock, ("l1", 1.0), ("l2", 1.0), ("l3", 1.0))
    assert fifo.hopeless(Req(clock, "early", timeout_s=0.035), clock())


def test_priorities_still_come_first():
    clock = Clock()
    p = policy(clock, levels=2, max_batch=1, compute={1: 0.010})
    queue(p, clock, *[(f"low{i}", 0.050, 2) for i in range(4)])
    # Lower-priority work never counts against a higher level ...
    assert not p.hopeless(Req(clock, "high", timeout_s=0.015, priority=1), clock())
    queue(p, clock, ("high", 0.015, 1))
    # ... and higher-priority work always counts against a lower one.
    assert p.hopeless(Req(clock, "low-late", timeout_s=0.045, priority=2), clock())
    assert [r.tag for r in p.decide().batch] == ["high"]


def test_at_dispatch_the_queue_is_walked_again_and_the_more_urgent_of_two_gives_way():
    clock = Clock()
    p = policy(clock, max_batch=1, compute={1: 0.010})
    (blocker,) = queue(p, clock, ("blocker", None))
    assert p.decide().batch == [blocker]
    a, b, c = queue(p, clock, ("a", 0.026), ("b", 0.030), ("c", 1.0))
    clock.advance(0.015)              # the run takes 15 ms, not 10: a and b cannot both make it now
    p.finished([blocker], 0.015)
    d = p.decide()
    # a (11 ms left) and b (15 ms left) both fit alone, not one after the other:
    # a, the more urgent, is refused, so b runs with its slack.
    assert d.hopeless == [a] and d.batch == [b] and a.state == DONE
    assert c.state == QUEUED and p.queued == 1


def test_nothing_is_refused_for_the_queue_before_anything_was_measured():
    clock = Clock()
    p = policy(clock, max_batch=1)
    queue(p, clock, *[(f"r{i}", 0.001) for i in range(5)])
    assert not p.hopeless(Req(clock, "next", timeout_s=0.001), clock())
    assert p.decide().hopeless == []


def burst(queue_guard: bool, edf: bool) -> float:
    """Deadline-met fraction of a simulated bursty load, batching off: four
    200 ms periods, each opening with 50 ms at 3.2x the capacity, 20% of
    the deadlines at 3x the compute time, 80% at 20x (bench_deadlines'
    mix), run times +-10%."""
    def compute(b):
        return 0.0017 + 0.00066 * b
    rng = random.Random("burst-guard")
    times = arrivals("bursty", 0.8 / compute(1), 280, rng)
    limits = deadlines(280, compute(1), rng)
    return simulate(0, times, limits, compute, edf=edf, max_batch=1, queue_guard=queue_guard, seed=3)["met"]


def test_under_a_burst_edf_with_the_guard_meets_at_least_as_many_deadlines_as_fifo():
    fifo, edf_own_compute_only = burst(False, False), burst(False, True)
    assert edf_own_compute_only < fifo     # the EDF domino this rule is for
    # FIFO gains from the same rule (it refuses at once what would expire
    # in the queue): EDF is compared with FIFO either way.
    edf, fifo_guarded = burst(True, True), burst(True, False)
    assert edf >= max(fifo, fifo_guarded), (edf, fifo, fifo_guarded, edf_own_compute_only)


def test_the_guard_walks_a_bounded_prefix_and_only_when_a_deadline_is_queued():
    """The walk runs on every submit with a deadline and every decision: it
    looks at GUARD_WALK requests per level (a newcomer further back is judged
    by the work counted, refused less, never more), and a queue without
    deadlines skips it (queued_deadlines follows add, remove, take, drop)."""
    from engine.server.batching import GUARD_WALK

    clock = Clock()
    p = policy(clock, max_batch=1, compute={1: 0.001})
    p.edf = False   # FIFO: a newcomer goes behind every queued request
    roomy = queue(p, clock, *[(f"r{i}", 10.0) for i in range(GUARD_WALK + 20)])
    assert p.queued_deadlines == len(roomy)
    # Behind the GUARD_WALK ms counted, 50 ms left is not enough...
    assert p.hopeless(Req(clock, "late", timeout_s=0.050), clock())
    # ...and 70 ms is: the whole queue (85 ms) is not counted, only the prefix
    # and its own (0.9 x 65 ms).
    far = Req(clock, "far", timeout_s=0.070)
    assert not p.hopeless(far, clock())
    assert p.remove(roomy[0]) and p.queued_deadlines == len(roomy) - 1
    taken = p.decide().batch
    assert len(taken) == 1 and p.queued_deadlines == len(roomy) - 2
    p.drop_all()
    assert p.queued_deadlines == 0
    free = Req(clock, "free", timeout_s=None)
    p.add(free)
    assert p.queued_deadlines == 0
