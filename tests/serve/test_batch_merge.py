"""Merging must pay (engine.server.batching, ComputeTimes.joins): requests
are joined into one batch only when the measured merged batch computes
faster than its parts one after the other. A fake clock: deterministic."""

from __future__ import annotations

from engine.server.batching import REPROBE_RUNS, ComputeTimes
from test_batching_policy import Clock, Req, policy, run

# A conv net on one core: a batch of 16 computes slower per sample than two of 8
# (MobileNetV2's activations leave the cache); an MLP: a batch of 2 costs little more than 1.
CONV = {8: 0.100, 16: 0.212}
MLP = {1: 100e-6, 2: 120e-6}


def test_requests_whose_merge_does_not_pay_run_one_after_the_other():
    clock = Clock()
    p = policy(clock, max_batch=16, compute=CONV)
    for tag in ("a", "b", "c"):
        p.add(Req(clock, tag, batch=8))
    assert [run(p, clock, 0.1) for _ in range(3)] == [["a"], ["b"], ["c"]]


def test_requests_whose_merge_pays_are_batched():
    clock = Clock()
    p = policy(clock, max_batch=8, compute=MLP)
    for tag in ("a", "b", "c"):
        p.add(Req(clock, tag))
    # 2 pays; 3 was never measured: taken, which is how its time is learnt
    assert run(p, clock, 130e-6) == ["a", "b", "c"]


def test_an_unmeasured_merge_is_tried_and_a_losing_one_again_after_reprobe_runs():
    clock = Clock()
    p = policy(clock, max_batch=16, compute={8: 0.100})
    p.add(Req(clock, "a", batch=8))
    p.add(Req(clock, "b", batch=8))
    assert run(p, clock, 0.212) == ["a", "b"]          # 16 never measured: tried; it did not pay
    alone = 0
    for i in range(REPROBE_RUNS):
        p.add(Req(clock, f"x{i}", batch=8))
        p.add(Req(clock, f"y{i}", batch=8))
        d = p.decide()
        p.finished(d.batch, 0.100 * len(d.batch) * (1.06 if len(d.batch) > 1 else 1))
        if len(d.batch) == 2:
            break
        assert run(p, clock, 0.100) == [f"y{i}"]
        alone += 2
    assert alone == REPROBE_RUNS                         # then merged once more, to be timed again
    assert p.queued == 0


def test_no_wait_for_company_that_would_not_pay():
    clock = Clock()
    p = policy(clock, max_batch=16, delay_us=1000, compute=CONV)
    first = Req(clock, "first", batch=8)
    p.add(first)
    assert p.decide().batch == [first]
    p.add(Req(clock, "second", batch=8))                 # arrives while the first runs
    clock.advance(0.0001)
    p.finished([first], 0.100)
    assert [r.tag for r in p.decide().batch] == ["second"]   # at once, not 1 ms later
    # The same traffic where a merge pays waits the window for company.
    q = policy(clock, max_batch=16, delay_us=1000, compute={8: 0.100, 16: 0.150})
    first = Req(clock, "first", batch=8)
    q.add(first)
    assert q.decide().batch == [first]
    q.add(Req(clock, "second", batch=8))
    clock.advance(0.0001)
    q.finished([first], 0.100)
    assert q.decide().wait_until is not None


def test_joins_compares_the_measured_sizes():
    c = ComputeTimes()
    for items, seconds in CONV.items():
        c.record(items, seconds)
    assert not c.joins(8, 8)                              # 0.212 > 0.100 + 0.100
    assert c.joins(8, 4)                                  # 12 never measured
    c.record(16, 0.150)
    c.record(16, 0.150)                                   # median 0.150: now it pays
    assert c.joins(8, 8)
