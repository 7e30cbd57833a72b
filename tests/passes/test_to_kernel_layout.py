"""to_kernel_layout, called directly: a Conv -> activation -> pool chain runs
in NHWC with one Transpose in and one out; a chain tensor read outside the
chain (an NCHW op, a graph output, an If branch) gets its NCHW Transpose
there, and the graph still computes the same. (tests/runtime/
test_kernel_layout.py checks the zoo's CNNs end to end.)"""

from __future__ import annotations

import numpy as np
from onnx import helper

from engine.passes.layout import to_kernel_layout
from tests.passes.graph_check import assert_computes_same, graph_of, if_reading, model, ops

W = np.random.default_rng(11).standard_normal((4, 3, 3, 3)).astype(np.float32)
X, Y = {"x": [1, 3, 8, 8]}, {"y": [1, 4, 4, 4]}


def _chain(extra=()):
    return [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2]), *extra]


def test_chain_runs_in_nhwc_between_two_transposes(tmp_path):
    m = model(_chain(), X, Y, {"w": W})
    g = to_kernel_layout(graph_of(m))
    assert ops(g) == {"Transpose": 2, "Conv": 1, "Relu": 1, "MaxPool": 1}
    assert all(n.attrs.get("_nhwc") == 1 for n in g.nodes if n.op != "Transpose")
    assert g.nodes[0].op == "Transpose" and g.nodes[-1].op == "Transpose" and g.nodes[-1].outputs == ["y"]
    assert_computes_same(m, g, tmp_path)


def test_chain_tensor_read_by_an_nchw_op_gets_a_transpose(tmp_path):
    # Flatten depends on the layout: it must read the NCHW tensor.
    m = model(_chain([helper.make_node("Flatten", ["r"], ["z"])]), X, {**Y, "z": [1, 256]}, {"w": W})
    g = to_kernel_layout(graph_of(m))
    flatten = next(n for n in g.nodes if n.op == "Flatten")
    assert flatten.inputs == ["r"] and "_nhwc" not in flatten.attrs
    assert ops(g)["Transpose"] == 3
    assert_computes_same(m, g, tmp_path)


def test_chain_tensor_that_is_a_graph_output_is_nchw(tmp_path):
    m = model(_chain(), X, {**Y, "r": [1, 4, 8, 8]}, {"w": W})
    g = to_kernel_layout(graph_of(m))
    assert "r" in g.producers() and g.producers()["r"].op == "Transpose"
    assert_computes_same(m, g, tmp_path)


def test_chain_tensor_read_by_an_if_branch_is_nchw(tmp_path):
    m = model(_chain([if_reading("r", "z")]), X, {**Y, "z": [1, 4, 8, 8]}, {"w": W}, cond=True)
    g = to_kernel_layout(graph_of(m))
    assert g.producers()["r"].op == "Transpose"
    assert_computes_same(m, g, tmp_path)
