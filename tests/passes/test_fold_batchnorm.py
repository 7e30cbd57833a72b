"""fold_batchnorm, called directly: Conv -> BatchNormalization (inference,
constant parameters) becomes one Conv with scaled weights and bias; a Conv
output that anything else reads (node, graph output, If branch), or runtime
BN parameters, leave both nodes as they are."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from engine.passes.folding import fold_batchnorm
from tests.passes.graph_check import assert_computes_same, graph_of, if_reading, model, ops

RNG = np.random.default_rng(5)
C_IN, C_OUT = 3, 4
INITS = {"w": RNG.standard_normal((C_OUT, C_IN, 3, 3)).astype(np.float32),
         "cb": RNG.standard_normal(C_OUT).astype(np.float32),
         "scale": RNG.uniform(0.5, 1.5, C_OUT).astype(np.float32),
         "shift": RNG.standard_normal(C_OUT).astype(np.float32),
         "mean": RNG.standard_normal(C_OUT).astype(np.float32),
         "var": RNG.uniform(0.5, 2.0, C_OUT).astype(np.float32)}
X, Y = {"x": [1, C_IN, 5, 5]}, {"y": [1, C_OUT, 5, 5]}


def _nodes(bias=True, bn_inputs=("scale", "shift", "mean", "var")):
    return [helper.make_node("Conv", ["x", "w", "cb"] if bias else ["x", "w"], ["h"], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["h", *bn_inputs], ["y"], epsilon=1e-3)]


@pytest.mark.parametrize("bias", [True, False])
def test_conv_batchnorm_becomes_one_conv(tmp_path, bias):
    m = model(_nodes(bias), X, Y, INITS)
    g = fold_batchnorm(graph_of(m))
    assert ops(g) == {"Conv": 1}
    (conv,) = g.nodes
    assert conv.outputs == ["y"] and len(conv.inputs) == 3 and all(i in g.initializers for i in conv.inputs[1:])
    assert_computes_same(m, g, tmp_path)


def test_conv_output_read_elsewhere_stays(tmp_path):
    m = model(_nodes() + [helper.make_node("Relu", ["h"], ["z"])], X, {**Y, "z": Y["y"]}, INITS)
    g = fold_batchnorm(graph_of(m))
    assert ops(g) == {"Conv": 1, "BatchNormalization": 1, "Relu": 1}
    assert_computes_same(m, g, tmp_path)


def test_conv_output_that_is_a_graph_output_stays(tmp_path):
    m = model(_nodes(), X, {**Y, "h": Y["y"]}, INITS)
    g = fold_batchnorm(graph_of(m))
    assert ops(g) == {"Conv": 1, "BatchNormalization": 1}
    assert_computes_same(m, g, tmp_path)


def test_conv_output_read_by_an_if_branch_stays(tmp_path):
    m = model(_nodes() + [if_reading("h", "z")], X, {**Y, "z": Y["y"]}, INITS, cond=True)
    g = fold_batchnorm(graph_of(m))
    assert ops(g) == {"Conv": 1, "BatchNormalization": 1, "If": 1}
    assert_computes_same(m, g, tmp_path)


def test_runtime_batchnorm_parameters_stay(tmp_path):
    inits = {k: v for k, v in INITS.items() if k != "mean"}
    m = model(_nodes(), {**X, "mean": [C_OUT]}, Y, inits)
    g = fold_batchnorm(graph_of(m))
    assert ops(g) == {"Conv": 1, "BatchNormalization": 1}
    assert_computes_same(m, g, tmp_path)
