"""fold_constants, called directly: a node whose inputs are all constants
becomes an initializer holding the executor's own result (bit-identical to
running it); nodes reading a runtime value, nodes with subgraphs, and folds
that would store more than FOLD_LIMIT bytes stay."""

from __future__ import annotations

import numpy as np
from onnx import helper

from engine.passes.folding import FOLD_LIMIT, fold_constants
from tests.passes.graph_check import assert_computes_same, graph_of, if_reading, model, ops

A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.full((2, 3), 0.5, np.float32)


def test_constant_chain_folds_to_one_initializer(tmp_path):
    m = model([helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Mul", ["s", "s"], ["s2"]),
               helper.make_node("Mul", ["x", "s2"], ["y"])], {"x": [2, 3]}, {"y": [2, 3]}, {"a": A, "b": B})
    g = fold_constants(graph_of(m))
    assert ops(g) == {"Mul": 1} and g.nodes[0].inputs == ["x", "s2"]
    assert set(g.initializers) >= {"s2"}
    np.testing.assert_array_equal(g.initializers["s2"], (A + B) * (A + B))
    assert_computes_same(m, g, tmp_path)


def test_intermediate_constants_no_longer_read_are_dropped():
    m = model([helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Neg", ["s"], ["n"]),
               helper.make_node("Mul", ["x", "n"], ["y"])], {"x": [2, 3]}, {"y": [2, 3]}, {"a": A, "b": B})
    g = fold_constants(graph_of(m))
    assert "s" not in g.initializers and "n" in g.initializers
    # The model's own initializers are kept even when no longer read: dropping
    # them is eliminate_dead_nodes' job.
    assert {"a", "b"} <= set(g.initializers)


def test_node_reading_a_runtime_value_stays(tmp_path):
    m = model([helper.make_node("Add", ["x", "a"], ["y"])], {"x": [2, 3]}, {"y": [2, 3]}, {"a": A})
    g = fold_constants(graph_of(m))
    assert ops(g) == {"Add": 1}
    assert_computes_same(m, g, tmp_path)


def test_if_with_constant_operands_stays(tmp_path):
    # A node with a subgraph is never folded, even when everything it reads is constant.
    m = model([helper.make_node("Add", ["a", "b"], ["h"]), if_reading("h", "z"), helper.make_node("Add", ["z", "x"], ["y"])],
              {"x": [2, 3]}, {"y": [2, 3]}, {"a": A, "b": B}, cond=True)
    g = fold_constants(graph_of(m))
    assert ops(g) == {"If": 1, "Add": 1}
    assert_computes_same(m, g, tmp_path)


def test_fold_larger_than_the_limit_stays():
    rows = FOLD_LIMIT // (4 * 1024) + 1  # one float32 row of 1024 over the limit
    shape = np.array([rows, 1024], np.int64)
    m = model([helper.make_node("Expand", ["one", "shape"], ["big"]), helper.make_node("Add", ["big", "x"], ["y"])],
              {"x": [1, 1024]}, {"y": [rows, 1024]}, {"one": np.array([1.0], np.float32), "shape": shape})
    g = fold_constants(graph_of(m))
    assert ops(g) == {"Expand": 1, "Add": 1}
