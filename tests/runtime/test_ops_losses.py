"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (engine.ops.losses)
against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.op_oracle import check_op

RNG = np.random.default_rng(13)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_with_ignore_index(tmp_path, reduction, weighted):
    x = RNG.standard_normal((3, 5, 2, 4)).astype(np.float32)
    target = RNG.integers(0, 5, (3, 2, 4)).astype(np.int64)
    target[0, 0, :2] = 2
    inputs = {"input": x, "target": target, "weight": RNG.random(5).astype(np.float32) if weighted else None}
    check_op(tmp_path, "NegativeLogLikelihoodLoss", inputs, {"reduction": reduction, "ignore_index": 2}, opset=22)


def test_nll_loss_ignores_an_out_of_range_ignore_index(tmp_path):
    # (Unweighted with ignore_index=-1 the reference averages over ignored
    # entries too, against the spec; weighted, it agrees with the spec.)
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    target = np.array([0, -1, 2, -1], np.int64)
    check_op(tmp_path, "NegativeLogLikelihoodLoss",
             {"input": x, "target": target, "weight": RNG.random(3).astype(np.float32)}, {"ignore_index": -1},
             opset=22)


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_softmax_cross_entropy_with_log_prob(tmp_path, reduction):
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    target = RNG.integers(0, 6, (4,)).astype(np.int32)
    weights = RNG.random(6).astype(np.float32)
    check_op(tmp_path, "SoftmaxCrossEntropyLoss", {"scores": x, "labels": target, "weights": weights},
             {"reduction": reduction}, n_outputs=2, opset=13)
