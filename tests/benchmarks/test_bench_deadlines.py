"""benchmarks/bench_deadlines.py: the estimators of auto's p99 over the best
fixed window's -- paired per repeat with a repeat bootstrap (the verdict's),
and pooled over matched slices with a slice (block) bootstrap (printed
beside it) -- and the placebo, on seeded synthetic latencies."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_deadlines as bd  # noqa: E402


def drifting_slices(rng, units: int, n: int, scale: float = 1.0, drift: np.ndarray | None = None) -> list:
    """`units` slices of n lognormal latencies (s), slice j slowed by drift[j]."""
    drift = np.ones(units) if drift is None else drift
    return [rng.lognormal(np.log(0.01 * scale), 0.5, n) * drift[j] for j in range(units)]


def test_pooled_p99_is_the_inverted_cdf_of_the_slices_counted_as_drawn():
    rng = np.random.default_rng(1)
    slices = [rng.exponential(1.0, n) for n in (37, 101, 64)]
    everything = np.concatenate(slices)
    assert bd.pooled_p99(slices, np.ones(3, int))[0] == np.percentile(everything, 99, method="inverted_cdf")
    counts = np.array([[2, 0, 1], [0, 1, 0], [1, 1, 1]])
    got = bd.pooled_p99(slices, counts, chunk=2)  # rows split over chunks alike
    for row, value in zip(counts, got):
        drawn = np.concatenate([s for s, c in zip(slices, row) for _ in range(c)])
        assert value == np.percentile(drawn, 99, method="inverted_cdf")


def test_block_counts_draw_whole_blocks_as_many_as_there_are():
    counts = bd.block_counts(10, 300, block=4, seed=5)  # blocks [0..3], [4..7], [8, 9]
    assert counts.shape == (300, 10)
    for lo, hi in ((0, 4), (4, 8), (8, 10)):
        assert (counts[:, lo:hi] == counts[:, lo:lo + 1]).all()
    assert (counts[:, [0, 4, 8]].sum(axis=1) == 3).all()
    assert (bd.block_counts(10, 300, block=4, seed=5) == counts).all()  # seeded
    assert (bd.block_counts(7, 50).sum(axis=1) == 7).all()


def test_the_best_fixed_window_is_re_picked_in_every_round():
    rng = np.random.default_rng(2)
    a, b = drifting_slices(rng, 4, 200), drifting_slices(rng, 4, 200)
    # window "b" is slower in slices 0-1, "a" in slices 2-3: which is best depends on the draw
    b = [s * (0.5 if j < 2 else 2.0) for j, s in enumerate(b)]
    lat = {"auto": a, "a": a, "b": b}
    counts = np.array([[1, 1, 0, 0], [0, 0, 1, 1]])
    assert bd.pooled_ratio(lat, "auto", ["a", "b"], counts)[0] > 1.5  # b best: auto = a, b halved
    assert bd.pooled_ratio(lat, "auto", ["a", "b"], counts)[1] == 1.0  # a best: auto is a


def test_a_uniform_slowdown_is_the_ratio_and_identical_cells_have_no_width():
    rng = np.random.default_rng(3)
    base = drifting_slices(rng, 12, 150)
    same = bd.slice_interval({"x": base, "y": [s.copy() for s in base]}, "y", ["x"], rounds=300)
    assert same == (1.0, 1.0, 1.0)
    slower = bd.slice_interval({"x": base, "y": [s * 1.2 for s in base]}, "y", ["x"], rounds=300)
    assert slower == pytest.approx((1.2, 1.2, 1.2))


def test_cell_slices_come_from_a_repeats_slices_or_the_repeat_whole():
    live = {"raw": [(200, 1.0), (504, 2.0), (200, 3.0)], "slices": [[(200, 1.0)], [(504, 2.0), (200, 3.0)]]}
    simulated = {"raw": [(200, 4.0)]}
    got = bd.cell_slices([live, simulated])
    assert [list(s) for s in got] == [[1.0], [2.0, 3.0], [4.0]]


def test_paired_repeats_cancel_a_drift_common_to_the_cells():
    """Every repeat slowed alike for all cells (up to ~5x): the paired ratio
    is auto's constant 1.05 over the best window, with no width; the
    placebo of identical cells is 1 and needs no more repeats."""
    rng = np.random.default_rng(6)
    base = [rng.lognormal(np.log(0.01), 0.5, 300) * rng.lognormal(0, 0.8) for _ in range(10)]
    lat = {"0": [b * 1.3 for b in base], "500us": base, "2ms": [b * 1.1 for b in base],
           "auto": [b * 1.05 for b in base], bd.PLACEBO: [b * 1.3 for b in base]}
    p99s = {k: np.array([np.percentile(b, 99) for b in v]) for k, v in lat.items()}
    assert float(bd.repeat_ratio(p99s, ["0", "500us", "2ms"])) == pytest.approx(1.05)
    assert bd.bootstrap_ratio(lat, ["0", "500us", "2ms"], rounds=300) == pytest.approx((1.05, 1.05))
    assert bd.placebo_interval(lat, rounds=300) == pytest.approx((1.0, 1.0, 1.0, 10))


def test_a_stall_in_one_cells_slice_moves_a_pooled_p99_more_than_the_paired_repeats():
    """The loaded host's tail: stalls of 10-50x the typical latency, each
    hitting one cell in one slice. Two cells with the same law (a placebo):
    a handful of stalls set the pooled p99, so its ratio strays further from
    1 than the geometric mean of per-repeat ratios -- why the verdict reads
    the latter."""
    def cell(rng):
        out = []
        for _ in range(48):
            lat = rng.lognormal(np.log(0.01), 0.4, 50)
            if rng.random() < 0.1:
                lat[rng.integers(0, 45):][:5] += rng.uniform(0.1, 0.5)
            out.append(lat)
        return out
    pooled, paired = [], []
    for seed in range(6):
        rng = np.random.default_rng(seed)
        sl = {"0": cell(rng), bd.PLACEBO: cell(rng)}
        pooled.append(abs(math.log(bd.slice_interval(sl, bd.PLACEBO, ["0"], rounds=10)[0])))
        reps = {k: [np.concatenate(v[i:i + 4]) for i in range(0, 48, 4)] for k, v in sl.items()}
        paired.append(abs(math.log(bd.placebo_interval(reps, rounds=10)[0])))
    assert np.mean(pooled) > 1.5 * np.mean(paired)
