"""fuse_silu, called directly: x * Sigmoid(x) after a GEMM/Conv becomes its
SiLU epilogue (either operand order); after another op, or when x has a
third reader (node, graph output, If branch), it stays."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from engine.kernels.abi import Unary
from engine.passes.fusion import fuse_silu
from tests.passes.graph_check import assert_computes_same, graph_of, if_reading, model, ops

K, N = 10, 7
W = np.random.default_rng(3).standard_normal((K, N)).astype(np.float32)
IO = ({"x": ["batch", K]}, {"y": ["batch", N]})


def _silu(h="h", mul_order=("h", "s")):
    return [helper.make_node("Sigmoid", [h], ["s"]), helper.make_node("Mul", list(mul_order), ["y"])]


@pytest.mark.parametrize("order", [("h", "s"), ("s", "h")])
def test_silu_after_matmul_fuses(tmp_path, order):
    m = model([helper.make_node("MatMul", ["x", "W"], ["h"]), *_silu(mul_order=order)], *IO, {"W": W})
    g = fuse_silu(graph_of(m))
    assert ops(g) == {"MatMul": 1} and g.nodes[0].attrs["_act"] == Unary.SILU and g.nodes[0].outputs == ["y"]
    assert_computes_same(m, g, tmp_path)


def test_silu_after_a_non_gemm_stays(tmp_path):
    m = model([helper.make_node("Abs", ["x"], ["h"]), *_silu()], {"x": ["batch", N]}, IO[1])
    g = fuse_silu(graph_of(m))
    assert ops(g) == {"Abs": 1, "Sigmoid": 1, "Mul": 1}
    assert_computes_same(m, g, tmp_path)


def test_x_read_by_a_third_node_stays(tmp_path):
    m = model([helper.make_node("MatMul", ["x", "W"], ["h"]), *_silu(), helper.make_node("Neg", ["h"], ["z"])],
              IO[0], {**IO[1], "z": ["batch", N]}, {"W": W})
    g = fuse_silu(graph_of(m))
    assert ops(g) == {"MatMul": 1, "Sigmoid": 1, "Mul": 1, "Neg": 1}
    assert_computes_same(m, g, tmp_path)


def test_x_as_graph_output_stays(tmp_path):
    m = model([helper.make_node("MatMul", ["x", "W"], ["h"]), *_silu()], IO[0], {**IO[1], "h": ["batch", N]},
              {"W": W})
    g = fuse_silu(graph_of(m))
    assert ops(g) == {"MatMul": 1, "Sigmoid": 1, "Mul": 1}
    assert_computes_same(m, g, tmp_path)


def test_x_read_by_an_if_branch_stays(tmp_path):
    m = model([helper.make_node("MatMul", ["x", "W"], ["h"]), *_silu(), if_reading("h", "z")],
              IO[0], {**IO[1], "z": ["batch", N]}, {"W": W}, cond=True)
    g = fuse_silu(graph_of(m))
    assert ops(g) == {"MatMul": 1, "Sigmoid": 1, "Mul": 1, "If": 1}
    assert_computes_same(m, g, tmp_path)
