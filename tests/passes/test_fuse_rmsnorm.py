"""fuse_rmsnorm, called directly: x / sqrt(mean(x^2, last axis) + eps) *
scale becomes one FusedRMSNorm node; another axis, a runtime scale, or an
intermediate read elsewhere (node, If branch) stays. (tests/runtime/
test_fusion_rmsnorm.py covers every spelling end to end.)"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from engine.passes.fuse_rmsnorm import fuse_rmsnorm
from tests.passes.graph_check import assert_computes_same, graph_of, model, ops, reader_of

D = 16
INITS = {"two": np.array(2.0, np.float32), "eps": np.array(1e-6, np.float32),
         "scale": np.random.default_rng(9).uniform(0.5, 1.5, D).astype(np.float32)}
X, Y = {"x": ["batch", 3, D]}, {"y": ["batch", 3, D]}


def _nodes(axis=-1, extra=()):
    return [helper.make_node("Pow", ["x", "two"], ["sq"]),
            helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[axis], keepdims=1),
            helper.make_node("Add", ["ms", "eps"], ["var"]), helper.make_node("Sqrt", ["var"], ["rms"]),
            helper.make_node("Div", ["x", "rms"], ["n"]), helper.make_node("Mul", ["n", "scale"], ["y"]),
            *extra]


def test_rmsnorm_chain_becomes_one_node(tmp_path):
    m = model(_nodes(), X, Y, INITS)
    g = fuse_rmsnorm(graph_of(m))
    assert ops(g) == {"FusedRMSNorm": 1} and g.nodes[0].outputs == ["y"]
    assert_computes_same(m, g, tmp_path)


def _inexact(variant: str):
    """(nodes, inputs, outputs, initializers) of a chain that must stay."""
    if variant == "other axis":
        return _nodes(axis=1), X, Y, {**INITS, "scale": np.ones((3, 1), np.float32)}
    if variant == "runtime scale":
        return _nodes(), {**X, "scale": [D]}, Y, {k: v for k, v in INITS.items() if k != "scale"}
    # "node" / "if": the variance is read elsewhere too
    return _nodes(extra=[reader_of("var", variant)]), X, {**Y, "z": ["batch", 3, 1]}, INITS


@pytest.mark.parametrize("variant", ["other axis", "runtime scale", "node", "if"])
def test_inexact_chains_stay(tmp_path, variant):
    m = model(*_inexact(variant), cond=variant == "if")
    g = fuse_rmsnorm(graph_of(m))
    assert ops(g)["FusedRMSNorm"] == 0
    assert_computes_same(m, g, tmp_path)
