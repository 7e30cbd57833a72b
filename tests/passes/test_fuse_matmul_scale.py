"""fuse_matmul_scale, called directly: MatMul then Div/Mul by a scalar
constant becomes the GEMM's alpha; c / MatMul, a non-scalar operand, or an
intermediate something else reads (node, graph output, If branch) stays."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from engine.passes.fusion import fuse_matmul_scale
from tests.passes.graph_check import assert_computes_same, graph_of, if_reading, model, ops

K, N = 16, 6
W = np.random.default_rng(2).standard_normal((K, N)).astype(np.float32)
IO = ({"x": ["batch", K]}, {"y": ["batch", N]})


@pytest.mark.parametrize("op, operands, alpha", [
    ("Div", ["h", "c"], np.float32(1) / np.float32(4.0)), ("Mul", ["h", "c"], 4.0), ("Mul", ["c", "h"], 4.0)])
def test_scalar_scale_becomes_alpha(tmp_path, op, operands, alpha):
    m = model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node(op, operands, ["y"])], *IO,
              {"W": W, "c": np.array(4.0, np.float32)})
    g = fuse_matmul_scale(graph_of(m))
    assert ops(g) == {"MatMul": 1}
    assert g.nodes[0].attrs["_alpha"] == pytest.approx(float(alpha)) and g.nodes[0].outputs == ["y"]
    assert_computes_same(m, g, tmp_path)


def test_constant_divided_by_the_product_stays(tmp_path):
    m = model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Div", ["c", "h"], ["y"])], *IO,
              {"W": W, "c": np.array(4.0, np.float32)})
    g = fuse_matmul_scale(graph_of(m))
    assert ops(g) == {"MatMul": 1, "Div": 1} and "_alpha" not in g.nodes[0].attrs
    assert_computes_same(m, g, tmp_path, atol=1e-4)


def test_vector_scale_stays(tmp_path):
    m = model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Mul", ["h", "c"], ["y"])], *IO,
              {"W": W, "c": np.arange(1, N + 1, dtype=np.float32)})
    g = fuse_matmul_scale(graph_of(m))
    assert ops(g) == {"MatMul": 1, "Mul": 1}
    assert_computes_same(m, g, tmp_path)


def test_product_read_elsewhere_stays(tmp_path):
    m = model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Mul", ["h", "c"], ["y"]),
               helper.make_node("Relu", ["h"], ["z"])],
              IO[0], {**IO[1], "z": ["batch", N]}, {"W": W, "c": np.array(4.0, np.float32)})
    g = fuse_matmul_scale(graph_of(m))
    assert ops(g) == {"MatMul": 1, "Mul": 1, "Relu": 1}
    assert_computes_same(m, g, tmp_path)


def test_product_read_by_an_if_branch_stays(tmp_path):
    m = model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Mul", ["h", "c"], ["y"]),
               if_reading("h", "z")],
              IO[0], {**IO[1], "z": ["batch", N]}, {"W": W, "c": np.array(4.0, np.float32)}, cond=True)
    g = fuse_matmul_scale(graph_of(m))
    assert ops(g) == {"MatMul": 1, "Mul": 1, "If": 1}
    assert_computes_same(m, g, tmp_path)
