"""fuse_conv_residual, called directly after to_kernel_layout (it works on
NHWC Convs): Conv + Add(skip) [+ activation] becomes one Conv whose input 4
is the skip tensor and whose epilogue holds the activation; an NCHW Conv (no
layout pass), a Conv output read elsewhere, or a Conv that already has an
activation stays."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from engine.kernels.abi import Unary
from engine.passes.fusion import fuse_bias_activation, fuse_conv_residual
from engine.passes.layout import to_kernel_layout
from tests.passes.graph_check import assert_computes_same, graph_of, model, ops

C = 4
W = np.random.default_rng(7).standard_normal((C, C, 3, 3)).astype(np.float32) * 0.3
X, Y = {"x": [1, C, 6, 6]}, {"y": [1, C, 6, 6]}


def _nodes(relu=True, skip_first=False, extra=()):
    add_ins = ["x", "h"] if skip_first else ["h", "x"]
    nodes = [helper.make_node("Conv", ["x", "w"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", add_ins, ["s" if relu else "y"])]
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["y"]))
    return nodes + list(extra)


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("skip_first", [True, False])
def test_conv_add_activation_becomes_one_conv(tmp_path, relu, skip_first):
    m = model(_nodes(relu, skip_first), X, Y, {"w": W})
    g = fuse_conv_residual(to_kernel_layout(graph_of(m)))
    assert ops(g)["Add"] == 0 and ops(g)["Relu"] == 0 and ops(g)["Conv"] == 1
    conv = next(n for n in g.nodes if n.op == "Conv")
    assert len(conv.inputs) == 5 and conv.inputs[4] and conv.attrs.get("_act") == (Unary.RELU if relu else None)
    assert_computes_same(m, g, tmp_path)


def test_nchw_conv_stays(tmp_path):
    m = model(_nodes(), X, Y, {"w": W})
    g = fuse_conv_residual(graph_of(m))
    assert ops(g) == {"Conv": 1, "Add": 1, "Relu": 1}
    assert_computes_same(m, g, tmp_path)


def test_conv_output_read_elsewhere_stays(tmp_path):
    m = model(_nodes(extra=[helper.make_node("Neg", ["h"], ["z"])]), X, {**Y, "z": Y["y"]}, {"w": W})
    g = fuse_conv_residual(to_kernel_layout(graph_of(m)))
    assert ops(g)["Add"] == 1 and all(len(n.inputs) < 5 for n in g.nodes if n.op == "Conv")
    assert_computes_same(m, g, tmp_path)


def test_conv_with_its_own_activation_stays(tmp_path):
    m = model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["h"]),
               helper.make_node("Add", ["h", "x"], ["y"])], X, Y, {"w": W})
    g = fuse_conv_residual(to_kernel_layout(fuse_bias_activation(graph_of(m))))
    assert ops(g)["Add"] == 1
    assert_computes_same(m, g, tmp_path)
