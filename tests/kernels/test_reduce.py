"""Reductions over any set of axes against numpy float64, every ISA."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine import kernels as K


def ref(x, op, axes, keepdims):
    d = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if op == "sum": return d.sum(axes, keepdims=keepdims)
        if op == "mean": return d.mean(axes, keepdims=keepdims) if d.size else d.sum(axes, keepdims=keepdims) / 0
        if op == "max": return d.max(axes, keepdims=keepdims, initial=-np.inf)
        if op == "min": return d.min(axes, keepdims=keepdims, initial=np.inf)
        if op == "prod": return d.prod(axes, keepdims=keepdims)
        if op == "sum_square": return (d * d).sum(axes, keepdims=keepdims)
        if op == "l1": return np.abs(d).sum(axes, keepdims=keepdims)
        if op == "l2": return np.sqrt((d * d).sum(axes, keepdims=keepdims))
        if op == "log_sum": return np.log(d.sum(axes, keepdims=keepdims))
        m = d.max(axes, keepdims=True, initial=-np.inf)
        m = np.where(np.isfinite(m), m, 0)
        r = np.log(np.exp(d - m).sum(axes, keepdims=True)) + m
        return r if keepdims else np.squeeze(r, axes)


def check(x, op, axes, keepdims=False):
    got = K.reduce(x, op, axes, keepdims)
    want = ref(x, op, axes, keepdims)
    assert got.shape == np.shape(want)
    n = x.size // max(got.size, 1)
    d = x.astype(np.float64)
    mag = ref(np.abs(x), "sum" if op not in ("prod",) else "prod", axes, keepdims)
    if op in ("sum_square", "l2"):
        mag = ref(x, "sum_square", axes, keepdims)
    # the header's bound: n * 2^-24 * sum|x| (a naive float sum), + relative 2^-22
    tol = (n + 4) * 2.0**-24 * np.abs(mag) + 2.0**-22 * np.abs(want)
    if op == "mean":
        tol = tol / max(n, 1)
    if op in ("log_sum", "l2", "log_sum_exp"):
        tol = np.abs(want) * (n + 4) * 2.0**-23 + (n + 4) * 2.0**-23
    del d
    with np.errstate(invalid="ignore"):
        ok = (np.abs(got - want) <= tol) | (np.isnan(got) & np.isnan(want)) | (got == want)
    assert ok.all(), f"{op} axes={axes}: max err {np.nanmax(np.abs(got - want))}"


OPS = ("sum", "mean", "max", "min", "prod", "sum_square", "l1", "l2", "log_sum", "log_sum_exp")
SHAPE = (3, 7, 1, 17)


@pytest.mark.parametrize("op", OPS)
def test_every_axis_subset(isa, op):
    rng = np.random.default_rng(OPS.index(op))
    x = rng.uniform(0.5, 1.5, SHAPE).astype(np.float32) if op in ("prod", "log_sum") else \
        rng.standard_normal(SHAPE).astype(np.float32)
    for r in range(len(SHAPE) + 1):
        for axes in itertools.combinations(range(len(SHAPE)), r):
            check(x, op, axes, keepdims=r % 2 == 0)


@pytest.mark.parametrize("shape,axes", [((1023,), (0,)), ((31, 1023), (1,)), ((1023, 31), (0,)),
                                        ((17, 31, 3), (0, 2)), ((5, 0, 3), (1,)), ((5, 0, 3), (0,)),
                                        ((2, 3, 4, 5, 6), (-1, -3)), ((), ())])
@pytest.mark.parametrize("op", ("sum", "mean", "max", "l2", "log_sum_exp"))
def test_odd_and_empty_shapes(isa, op, shape, axes):
    x = np.asarray(np.random.default_rng(1).standard_normal(shape) * 3, dtype=np.float32)
    check(x, op, axes, keepdims=True)
    check(x, op, axes, keepdims=False)


def test_large_magnitudes_and_nan(isa):
    x = np.random.default_rng(2).uniform(-1e4, 1e4, (7, 1023)).astype(np.float32)
    y = K.reduce(x, "log_sum_exp", (1,))
    assert np.isfinite(y).all()
    check(x, "log_sum_exp", (1,))
    x[3, 5] = np.nan
    for op in ("sum", "max", "min", "l2", "log_sum_exp"):
        y = K.reduce(x, op, (1,))
        assert np.isnan(y[3]) and not np.isnan(y[[0, 1, 2, 4, 5, 6]]).any(), op
    assert np.isnan(K.reduce(x, "max", (0,))[5])


def test_deterministic_across_threads():
    x = np.random.default_rng(3).standard_normal((300, 999)).astype(np.float32)
    for axes in ((0,), (1,), (0, 1)):  # (0, 1): the whole tensor, split into fixed blocks
        assert np.array_equal(K.reduce(x, "sum", axes, threads=1), K.reduce(x, "sum", axes, threads=2))


@pytest.mark.parametrize("op", ("sum", "mean", "max", "l1", "l2"))
def test_whole_tensor_reduction(isa, op):
    x = np.random.default_rng(5).standard_normal(1_000_003).astype(np.float32)
    check(x, op, None)
    check(x[:1009 * 991].reshape(1009, 991), op, (0, 1), keepdims=True)


def test_argmax_argmin(isa):
    rng = np.random.default_rng(4)
    x = rng.integers(0, 5, (7, 17, 31)).astype(np.float32)  # many ties
    for axis in (0, 1, 2, -1):
        assert np.array_equal(K.argmax(x, axis), np.argmax(x, axis))
        assert np.array_equal(K.argmin(x, axis, keepdims=True), np.argmin(x, axis, keepdims=True))
        last = x.shape[axis] - 1 - np.argmax(np.flip(x, axis), axis)
        assert np.array_equal(K.argmax(x, axis, select_last_index=True), last)
    y = np.array([[1, np.nan, 5, np.nan]], np.float32)
    assert K.argmax(y, 1)[0] == 1 and K.argmin(y, 1)[0] == 1  # first NaN, as numpy
    with pytest.raises(ValueError, match="axis 1 is empty"):
        K.argmax(np.ones((3, 0), np.float32), 1)


def test_errors():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="unknown reduction 'median'"):
        K.reduce(x, "median")
    with pytest.raises(ValueError, match="axes 2 is out of range"):
        K.reduce(x, "sum", (2,))
    with pytest.raises(ValueError, match="name the same dim twice"):
        K.reduce(x, "sum", (1, -1))
