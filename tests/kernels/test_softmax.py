"""Softmax / log-softmax along any axis against numpy float64, every ISA."""

from __future__ import annotations

import numpy as np
import pytest

from engine import kernels as K


def softmax64(x, axis):
    d = x.astype(np.float64)
    e = np.exp(d - d.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax64(x, axis):
    d = x.astype(np.float64)
    s = d - d.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


SHAPES = [((1,), 0), ((7,), -1), ((3, 1023), -1), ((17, 31), 0), ((5, 3, 7), 1), ((2, 300, 3), -2),
          ((31, 17, 3), -3), ((4, 0, 3), 1), ((0, 5), -1), ((2, 3, 517), 1)]


@pytest.mark.parametrize("shape,axis", SHAPES)
def test_softmax_matches_float64(isa, shape, axis):
    x = (np.random.default_rng(len(shape) + shape[0]).standard_normal(shape) * 5).astype(np.float32)
    n = shape[axis]
    if x.size == 0:
        assert K.softmax(x, axis).shape == x.shape and K.log_softmax(x, axis).shape == x.shape
        return
    # the header's bound: rounding of x - max amplified by exp, exp's own
    # error, and the sum's rounding
    spread = np.abs(x - x.max(axis=axis, keepdims=True))
    tol = (spread + 4 + n) * 2.0**-24
    y = K.softmax(x, axis)
    assert y.shape == x.shape
    want = softmax64(x, axis)
    assert (np.abs(y - want) <= tol * want + 1e-38).all()
    ly = K.log_softmax(x, axis)
    np.testing.assert_allclose(ly, log_softmax64(x, axis), rtol=2.0**-22, atol=(n + 4) * 2.0**-24)


def test_large_magnitudes_stay_finite(isa):
    x = np.random.default_rng(1).uniform(-1e4, 1e4, (7, 1023)).astype(np.float32)
    y, ly = K.softmax(x, -1), K.log_softmax(x, -1)
    assert np.isfinite(y).all() and np.isfinite(ly).all()
    np.testing.assert_allclose(y.sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(ly, log_softmax64(x, -1), rtol=1e-6, atol=1e-3)
    np.testing.assert_allclose(K.softmax(x.T.copy(), 0), softmax64(x.T, 0), rtol=1e-5, atol=1e-38)


def test_nan_and_inf(isa):
    x = np.array([[1.0, np.nan, 2.0], [1.0, 2.0, 3.0], [-np.inf, 0.0, 1.0], [np.inf, 0.0, 1.0]], np.float32)
    y = K.softmax(x, -1)
    assert np.isnan(y[0]).all()
    np.testing.assert_allclose(y[1], softmax64(x[1:2], -1)[0], rtol=1e-6)
    assert y[2][0] == 0 and np.isfinite(y[2]).all()
    assert np.isnan(y[3]).any()  # inf - inf, as numpy


def test_threads_identical():
    x = np.random.default_rng(2).standard_normal((512, 333)).astype(np.float32)
    for axis in (0, 1):
        assert np.array_equal(K.softmax(x, axis, threads=1), K.softmax(x, axis, threads=2))


def test_errors():
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        K.softmax(np.ones((2, 2), np.float32), 2)
    with pytest.raises(ValueError, match="expected float32"):
        K.softmax(np.ones(3), 0)
