"""benchmarks/bench_deadlines.py: the estimator the Must's verdict is read
from -- p99 pooled over matched slices, its slice (block) bootstrap, the
best fixed window re-picked per round -- on seeded synthetic latencies."""

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


def test_host_scale_is_one_median_per_slice_for_every_cell():
    lat = {"a": [np.array([1.0, 2.0, 9.0]), np.array([10.0])], "b": [np.array([3.0]), np.array([30.0, 50.0])]}
    scaled = bd.host_scaled(lat)  # slice 0: median of 1, 2, 9, 3 = 2.5; slice 1: of 10, 30, 50 = 30
    assert [list(v) for v in scaled["a"]] == [[0.4, 0.8, 3.6], [pytest.approx(1 / 3)]]
    assert [list(v) for v in scaled["b"]] == [[1.2], [1.0, pytest.approx(5 / 3)]]


def test_a_uniform_slowdown_is_the_ratio_and_identical_cells_have_no_width():
    rng = np.random.default_rng(3)
    base = drifting_slices(rng, 12, 150)
    same = bd.slice_interval({"x": base, "y": [s.copy() for s in base]}, "y", ["x"], rounds=300)
    assert same == (1.0, 1.0, 1.0)
    slower = bd.slice_interval({"x": base, "y": [s * 1.2 for s in base]}, "y", ["x"], rounds=300)
    assert slower == pytest.approx((1.2, 1.2, 1.2))


def test_host_scaling_cancels_drift_so_more_slices_narrow_the_placebo():
    """Two cells with the same latency law, each slice slowed alike for both
    (the host's drift, up to ~3x): scaled per slice, the placebo's interval
    is the one without drift, holds 1, and four times the slices narrow it
    to about half; pooled unscaled, the slowest stretches hold the tail and
    the interval stays wider."""
    def placebo(rng, units, drift_sigma):
        drift = rng.lognormal(0, drift_sigma, units)
        return {"0": drifting_slices(rng, units, 150, drift=drift), bd.PLACEBO: drifting_slices(rng, units, 150, drift=drift)}

    def width(lat):
        _, lo, hi = bd.slice_interval(lat, bd.PLACEBO, ["0"], rounds=500)
        assert lo <= 1.0 <= hi
        return math.log(hi / lo)
    few, many = placebo(np.random.default_rng(4), 20, 0.5), placebo(np.random.default_rng(5), 80, 0.5)
    steady = placebo(np.random.default_rng(4), 20, 0.0)
    assert width(bd.host_scaled(few)) == pytest.approx(width(bd.host_scaled(steady)))
    assert width(bd.host_scaled(many)) < 0.6 * width(bd.host_scaled(few))
    assert width(bd.host_scaled(many)) < 0.8 * width(many)


def test_slices_needed_scale_as_the_square_of_the_width():
    assert bd.needed_for(20, 0.9, 1.1, 1.10) == math.ceil(20 * (math.log(1.1 / 0.9) / 2 / math.log(1.1)) ** 2)
    assert bd.needed_for(20, 0.99, 1.01, 1.10) == 20  # already narrow enough: never fewer than measured


def test_cell_slices_come_from_a_repeats_slices_or_the_repeat_whole():
    live = {"raw": [(200, 1.0), (504, 2.0), (200, 3.0)], "slices": [[(200, 1.0)], [(504, 2.0), (200, 3.0)]]}
    simulated = {"raw": [(200, 4.0)]}
    got = bd.cell_slices([live, simulated])
    assert [list(s) for s in got] == [[1.0], [2.0, 3.0], [4.0]]
