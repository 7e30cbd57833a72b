"""Composed normalisations (engine.ops.normalization) against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.op_oracle import check_op

RNG = np.random.default_rng(17)


def _r(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_normalization(tmp_path, axis):
    x = _r(2, 3, 4, 5)
    check_op(tmp_path, "RMSNormalization", {"X": x, "scale": _r(*x.shape[axis:])}, {"axis": axis, "epsilon": 1e-3})


@pytest.mark.parametrize("axis", [-1, 2])
def test_layer_normalization_with_mean_and_inv_std_dev(tmp_path, axis):
    x = _r(3, 4, 6)
    n = x.shape[axis:]
    check_op(tmp_path, "LayerNormalization", {"X": x, "scale": _r(*n), "B": _r(*n)}, {"axis": axis},
             n_outputs=3, opset=17)


def test_group_and_instance_normalization(tmp_path):
    x = _r(2, 6, 3, 4)
    check_op(tmp_path, "GroupNormalization", {"X": x, "scale": _r(6), "bias": _r(6)}, {"num_groups": 3}, opset=21)
    check_op(tmp_path, "InstanceNormalization", {"X": x, "scale": _r(6), "B": _r(6)}, {"epsilon": 1e-4}, opset=22)


def test_lp_normalization_with_a_zero_row(tmp_path):
    x = _r(4, 5)
    x[2] = 0.0  # a zero norm gives 0, not NaN
    check_op(tmp_path, "LpNormalization", {"x": x}, {"p": 2, "axis": -1}, opset=22)


def test_l1_normalization_against_float64(tmp_path):
    # onnx.reference sums x instead of |x| for p=1; the spec (and the node
    # suite's expected data) use |x|, so the oracle here is numpy in float64.
    def l1(feeds):
        x64 = feeds["x"].astype(np.float64)
        return [(x64 / np.abs(x64).sum(axis=0, keepdims=True)).astype(np.float32)]

    check_op(tmp_path, "LpNormalization", {"x": _r(3, 4)}, {"p": 1, "axis": 0}, opset=22, oracle=l1)


def test_mean_variance_normalization(tmp_path):
    check_op(tmp_path, "MeanVarianceNormalization", {"x": _r(2, 3, 4, 5)}, opset=13, atol=1e-4)


@pytest.mark.parametrize("size", [1, 3, 4])
def test_lrn_over_channels(tmp_path, size):
    # onnx.reference's LRN loops over the batch dim instead of channels, so
    # numpy (the formula of the ONNX spec) is the oracle.
    alpha, beta, bias = 2e-3, 0.6, 1.5

    def lrn(feeds):
        x = feeds["x"].astype(np.float64)
        sq = np.zeros_like(x)
        lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
        for ch in range(x.shape[1]):
            sq[:, ch] = (x[:, max(0, ch - lo):min(x.shape[1], ch + hi + 1)] ** 2).sum(axis=1)
        return [(x / (bias + alpha / size * sq) ** beta).astype(np.float32)]

    check_op(tmp_path, "LRN", {"x": _r(2, 5, 3, 4)}, {"size": size, "alpha": alpha, "beta": beta, "bias": bias},
             opset=13, oracle=lrn)
