"""eliminate_dead_nodes, called directly: nodes whose outputs reach no graph
output and initializers nothing reads go; a node read only by an If branch
(an outer-scope use) and that If's own inputs stay."""

from __future__ import annotations

import numpy as np
from onnx import helper

from engine.passes.cleanup import eliminate_dead_nodes
from tests.passes.graph_check import assert_computes_same, graph_of, if_reading, model, ops

C = np.ones((2, 3), np.float32)


def test_unread_nodes_and_initializers_go(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["dead1"]),
               helper.make_node("Add", ["dead1", "c"], ["dead2"])],
              {"x": [2, 3]}, {"y": [2, 3]}, {"c": C, "unused": C})
    g = eliminate_dead_nodes(graph_of(m))
    assert ops(g) == {"Relu": 1} and g.initializers == {}
    assert_computes_same(m, g, tmp_path)


def test_node_read_only_by_an_if_branch_stays(tmp_path):
    m = model([helper.make_node("Add", ["x", "c"], ["h"]), if_reading("h", "y"), helper.make_node("Neg", ["x"], ["dead"])],
              {"x": [2, 3]}, {"y": [2, 3]}, {"c": C}, cond=True)
    g = eliminate_dead_nodes(graph_of(m))
    assert ops(g) == {"Add": 1, "If": 1} and set(g.initializers) == {"c"}
    assert_computes_same(m, g, tmp_path)


def test_graph_that_is_all_live_is_unchanged():
    m = model([helper.make_node("Add", ["x", "c"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
              {"x": [2, 3]}, {"y": [2, 3]}, {"c": C})
    g = graph_of(m)
    before = [(n.op, n.inputs, n.outputs) for n in g.nodes]
    g = eliminate_dead_nodes(g)
    assert [(n.op, n.inputs, n.outputs) for n in g.nodes] == before and set(g.initializers) == {"c"}
