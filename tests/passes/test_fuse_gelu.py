"""fuse_gelu, called directly: the erf spelling of exact GELU after a
GEMM/Conv, in both of torch's product orders and with Div(sqrt 2) or
Mul(1/sqrt 2), becomes that node's GELU epilogue; a wrong constant, a
producer that is not a GEMM, or x read by anything else (If branch too)
stays."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from engine.kernels.abi import Unary
from engine.passes.fusion import fuse_gelu
from tests.passes.graph_check import assert_computes_same, graph_of, if_reading, model, ops

K, N = 9, 11
W = np.random.default_rng(4).standard_normal((K, N)).astype(np.float32)
IO = ({"x": ["batch", K]}, {"y": ["batch", N]})
CHAIN = {"Div", "Mul", "Erf", "Add"}


def _gelu_model(*, scale="div", order="half_first", root2=np.sqrt(2.0), producer="MatMul", extra=(), outputs=None,
                cond=False):
    inits = {"W": W, "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)}
    if scale == "div":
        inits["r"] = np.array(root2, np.float32)
        nodes = [helper.make_node("Div", ["h", "r"], ["u"])]
    else:
        inits["r"] = np.array(1.0 / root2, np.float32)
        nodes = [helper.make_node("Mul", ["r", "h"], ["u"])]
    nodes += [helper.make_node("Erf", ["u"], ["e"]), helper.make_node("Add", ["e", "one"], ["p"])]
    if order == "half_first":  # (x * 0.5) * (1 + erf)
        nodes += [helper.make_node("Mul", ["h", "half"], ["hh"]), helper.make_node("Mul", ["hh", "p"], ["y"])]
    else:  # (x * (1 + erf)) * 0.5
        nodes += [helper.make_node("Mul", ["p", "h"], ["hp"]), helper.make_node("Mul", ["hp", "half"], ["y"])]
    head = helper.make_node("MatMul", ["x", "W"], ["h"]) if producer == "MatMul" else helper.make_node("Abs", ["x"], ["h"])
    ins = IO[0] if producer == "MatMul" else {"x": ["batch", N]}
    return model([head, *nodes, *extra], ins, outputs or IO[1], inits, cond=cond)


@pytest.mark.parametrize("scale", ["div", "mul"])
@pytest.mark.parametrize("order", ["half_first", "half_last"])
def test_erf_gelu_after_matmul_fuses(tmp_path, scale, order):
    m = _gelu_model(scale=scale, order=order)
    g = fuse_gelu(graph_of(m))
    assert ops(g) == {"MatMul": 1} and g.nodes[0].attrs["_act"] == Unary.GELU and g.nodes[0].outputs == ["y"]
    assert_computes_same(m, g, tmp_path)


def test_wrong_constant_stays(tmp_path):
    m = _gelu_model(root2=2.0)
    g = fuse_gelu(graph_of(m))
    assert ops(g)["Erf"] == 1 and "_act" not in g.nodes[0].attrs
    assert_computes_same(m, g, tmp_path)


def test_after_a_non_gemm_stays(tmp_path):
    m = _gelu_model(producer="Abs")
    g = fuse_gelu(graph_of(m))
    assert ops(g)["Erf"] == 1
    assert_computes_same(m, g, tmp_path)


def test_x_read_by_another_node_stays(tmp_path):
    m = _gelu_model(extra=[helper.make_node("Neg", ["h"], ["z"])], outputs={**IO[1], "z": ["batch", N]})
    g = fuse_gelu(graph_of(m))
    assert ops(g)["Erf"] == 1 and ops(g)["Neg"] == 1
    assert_computes_same(m, g, tmp_path)


def test_x_read_by_an_if_branch_stays(tmp_path):
    m = _gelu_model(extra=[if_reading("h", "z")], outputs={**IO[1], "z": ["batch", N]}, cond=True)
    g = fuse_gelu(graph_of(m))
    assert ops(g)["Erf"] == 1 and ops(g)["If"] == 1
    assert_computes_same(m, g, tmp_path)
