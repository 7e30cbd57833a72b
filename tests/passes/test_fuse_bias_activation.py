"""fuse_bias_activation, called directly: MatMul + Add(constant row) becomes
MatMul with _bias; Conv/Gemm/MatMul + an epilogue activation becomes one node
with _act/_p0/_p1. Chains whose intermediate something else reads (another
node, a graph output, an If branch) and activations the epilogue lacks stay."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from engine.kernels.abi import Unary
from engine.passes.fusion import fuse_bias_activation
from tests.passes.graph_check import assert_computes_same, graph_of, if_reading, model, ops

K, N = 12, 8
RNG = np.random.default_rng(1)
W = RNG.standard_normal((K, N)).astype(np.float32)
B = RNG.standard_normal(N).astype(np.float32)


def _matmul_then(act_nodes, extra_inits=None, opset=17, **kw):
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm")] + act_nodes
    return model(nodes, {"x": ["batch", K]}, {"y": ["batch", N]}, {"W": W, **(extra_inits or {})}, opset=opset, **kw)


def test_matmul_add_row_becomes_bias(tmp_path):
    m = _matmul_then([helper.make_node("Add", ["B", "h"], ["y"])], {"B": B})
    g = fuse_bias_activation(graph_of(m))
    assert ops(g) == {"MatMul": 1}
    (mm,) = g.nodes
    assert mm.attrs["_bias"] == 1 and mm.inputs == ["x", "W", "B"] and mm.outputs == ["y"]
    assert_computes_same(m, g, tmp_path)


def test_matmul_add_relu_takes_bias_and_activation(tmp_path):
    m = _matmul_then([helper.make_node("Add", ["h", "B"], ["hb"]), helper.make_node("Relu", ["hb"], ["y"])], {"B": B})
    g = fuse_bias_activation(graph_of(m))
    assert ops(g) == {"MatMul": 1}
    assert g.nodes[0].attrs["_act"] == Unary.RELU and g.nodes[0].attrs["_bias"] == 1
    assert_computes_same(m, g, tmp_path)


@pytest.mark.parametrize("act, attrs, code, p0, p1", [
    ("Relu", {}, Unary.RELU, 0.0, 0.0),
    ("LeakyRelu", {"alpha": 0.2}, Unary.LEAKY_RELU, 0.2, 0.0),
    ("Clip", {"bounds": (-0.5, 0.75)}, Unary.CLIP, -0.5, 0.75),
    ("Gelu", {}, Unary.GELU, 0.0, 0.0),
])
def test_activation_moves_into_the_epilogue(tmp_path, act, attrs, code, p0, p1):
    inits = {}
    if act == "Clip":
        lo, hi = attrs.pop("bounds")
        inits = {"lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
        node = helper.make_node("Clip", ["h", "lo", "hi"], ["y"])
    else:
        node = helper.make_node(act, ["h"], ["y"], **attrs)
    m = _matmul_then([node], inits, opset=20)
    g = fuse_bias_activation(graph_of(m))
    assert ops(g) == {"MatMul": 1}
    a = g.nodes[0].attrs
    assert a["_act"] == code and a["_p0"] == pytest.approx(p0) and a["_p1"] == pytest.approx(p1)
    assert_computes_same(m, g, tmp_path)


def test_conv_relu_fuses(tmp_path):
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    m = model([helper.make_node("Conv", ["x", "w"], ["h"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["h"], ["y"])],
              {"x": [1, 3, 6, 6]}, {"y": [1, 4, 6, 6]}, {"w": w})
    g = fuse_bias_activation(graph_of(m))
    assert ops(g) == {"Conv": 1} and g.nodes[0].attrs["_act"] == Unary.RELU
    assert_computes_same(m, g, tmp_path)


def test_clip_with_runtime_bound_stays(tmp_path):
    m = model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Clip", ["h", "lo"], ["y"])],
              {"x": ["batch", K], "lo": []}, {"y": ["batch", N]}, {"W": W})
    g = fuse_bias_activation(graph_of(m))
    assert ops(g) == {"MatMul": 1, "Clip": 1} and "_act" not in g.nodes[0].attrs
    assert_computes_same(m, g, tmp_path)


def test_tanh_approximate_gelu_stays(tmp_path):
    m = _matmul_then([helper.make_node("Gelu", ["h"], ["y"], approximate="tanh")], opset=20)
    g = fuse_bias_activation(graph_of(m))
    assert ops(g) == {"MatMul": 1, "Gelu": 1}
    assert_computes_same(m, g, tmp_path)


def test_intermediate_read_by_another_node_stays(tmp_path):
    m = model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"]),
               helper.make_node("Neg", ["h"], ["z"])],
              {"x": ["batch", K]}, {"y": ["batch", N], "z": ["batch", N]}, {"W": W})
    g = fuse_bias_activation(graph_of(m))
    assert ops(g) == {"MatMul": 1, "Relu": 1, "Neg": 1} and "_act" not in g.nodes[0].attrs
    assert_computes_same(m, g, tmp_path)


def test_intermediate_that_is_a_graph_output_stays(tmp_path):
    m = model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
              {"x": ["batch", K]}, {"y": ["batch", N], "h": ["batch", N]}, {"W": W})
    g = fuse_bias_activation(graph_of(m))
    assert ops(g) == {"MatMul": 1, "Relu": 1}
    assert_computes_same(m, g, tmp_path)


def test_intermediate_read_by_an_if_branch_stays(tmp_path):
    m = model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"]),
               if_reading("h", "z")],
              {"x": ["batch", K]}, {"y": ["batch", N], "z": ["batch", N]}, {"W": W}, cond=True)
    g = fuse_bias_activation(graph_of(m))
    assert ops(g) == {"MatMul": 1, "Relu": 1, "If": 1}
    assert_computes_same(m, g, tmp_path)
