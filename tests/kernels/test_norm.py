"""Layer and RMS normalisation against numpy float64, every ISA."""

from __future__ import annotations

import numpy as np
import pytest

from engine import kernels as K


def rng_array(shape, seed, scale=3.0, offset=0.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale + offset).astype(np.float32)


@pytest.mark.parametrize("shape,axis", [((1, 1), -1), ((7, 3), -1), ((17, 31), 1), ((3, 5, 1023), -1),
                                        ((2, 3, 7, 5), 2), ((4, 17), 0), ((0, 8), -1)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm(isa, shape, axis, with_bias):
    x = rng_array(shape, 1, offset=100.0)  # a large mean: the two-pass variance must not cancel
    ax = axis % len(shape)
    nshape = shape[ax:]
    scale, bias = rng_array(nshape, 2), rng_array(nshape, 3) if with_bias else None
    y, mean, inv = K.layer_norm(x, scale, bias, axis=axis, eps=1e-5, return_stats=True)
    d = x.astype(np.float64)
    red = tuple(range(ax, len(shape)))
    m = d.mean(axis=red, keepdims=True)
    v = ((d - m) ** 2).mean(axis=red, keepdims=True)
    want = (d - m) / np.sqrt(v + 1e-5) * scale + (0 if bias is None else bias)
    cols = int(np.prod(nshape))
    tol = 2e-6 * (1 + np.sqrt(cols)) * 100  # |x| ~ 100 sigma: the mean's rounding scales with it
    np.testing.assert_allclose(y, want, rtol=0, atol=tol * (np.abs(scale).max() + 1))
    np.testing.assert_allclose(mean, m, rtol=1e-6)
    np.testing.assert_allclose(inv, 1 / np.sqrt(v + 1e-5), rtol=1e-4)


@pytest.mark.parametrize("shape", [(1, 3), (31, 17), (3, 1023)])
def test_rms_norm(isa, shape):
    x, scale = rng_array(shape, 4), rng_array(shape[-1:], 5)
    d = x.astype(np.float64)
    want = d / np.sqrt((d**2).mean(-1, keepdims=True) + 1e-6) * scale
    np.testing.assert_allclose(K.rms_norm(x, scale, eps=1e-6), want, rtol=2e-5, atol=1e-6)


def test_nan_propagates_per_row(isa):
    x = rng_array((3, 17), 6)
    x[1, 4] = np.nan
    y = K.layer_norm(x, np.ones(17, np.float32))
    assert np.isnan(y[1]).all() and np.isfinite(y[[0, 2]]).all()


def test_threads_identical():
    x = rng_array((999, 257), 7)
    s = rng_array((257,), 8)
    assert np.array_equal(K.layer_norm(x, s, s, threads=1), K.layer_norm(x, s, s, threads=2))


def test_errors():
    x = rng_array((4, 5), 9)
    with pytest.raises(ValueError, match=r"scale of shape \(4,\) does not broadcast to the normalised shape \(5,\)"):
        K.layer_norm(x, np.ones(4, np.float32))
    with pytest.raises(ValueError, match="epsilon -1 must be >= 0"):
        K.rms_norm(x, np.ones(5, np.float32), eps=-1.0)
