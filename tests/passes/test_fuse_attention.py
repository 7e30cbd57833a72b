"""fuse_attention, called directly: MatMul(Q, Kt) [scale] [Add(mask)] ->
Softmax(last axis) -> MatMul(., V) over 4-D operands becomes one
FusedAttention node; scores read elsewhere (node, If branch), a softmax
over another axis, or a Q that is not 4-D stay. (tests/runtime/test_fusion_attention.py
covers the variants end to end and BERT-mini.)"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from engine.passes.fuse_attention import fuse_attention
from tests.passes.graph_check import assert_computes_same, graph_of, if_reading, model, ops

B, H, M, L, DK, DV = 1, 2, 5, 6, 4, 3
QKV = {"q": [B, H, M, DK], "kt": [B, H, DK, L], "v": [B, H, L, DV]}
Y = {"y": [B, H, M, DV]}
SCORES = [B, H, M, L]


def _nodes(*, mask=False, axis=-1, extra=()):
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["ss"])]
    last = "ss"
    if mask:
        nodes.append(helper.make_node("Add", ["ss", "mask"], ["sm"]))
        last = "sm"
    return nodes + [helper.make_node("Softmax", [last], ["p"], axis=axis),
                    helper.make_node("MatMul", ["p", "v"], ["y"])] + list(extra)


INITS = {"scale": np.array(0.5, np.float32)}


@pytest.mark.parametrize("mask", [False, True])
def test_attention_chain_becomes_one_node(tmp_path, mask):
    inputs = {**QKV, **({"mask": [1, 1, M, L]} if mask else {})}
    m = model(_nodes(mask=mask), inputs, Y, INITS)
    g = fuse_attention(graph_of(m))
    assert ops(g) == {"FusedAttention": 1}
    (node,) = g.nodes
    assert node.inputs == ["q", "kt", "v"] + (["mask"] if mask else []) and node.outputs == ["y"]
    assert node.attrs == {"alpha": 0.5}
    assert_computes_same(m, g, tmp_path)


def test_softmax_over_another_axis_stays(tmp_path):
    m = model(_nodes(axis=2), QKV, Y, INITS)
    g = fuse_attention(graph_of(m))
    assert ops(g)["FusedAttention"] == 0
    assert_computes_same(m, g, tmp_path)


def test_scores_read_by_another_node_stay(tmp_path):
    m = model(_nodes(extra=[helper.make_node("Neg", ["ss"], ["z"])]), QKV, {**Y, "z": SCORES}, INITS)
    g = fuse_attention(graph_of(m))
    assert ops(g)["FusedAttention"] == 0
    assert_computes_same(m, g, tmp_path)


def test_probabilities_read_by_an_if_branch_stay(tmp_path):
    m = model(_nodes(extra=[if_reading("p", "z")]), QKV, {**Y, "z": SCORES}, INITS, cond=True)
    g = fuse_attention(graph_of(m))
    assert ops(g)["FusedAttention"] == 0 and ops(g)["If"] == 1
    assert_computes_same(m, g, tmp_path)


def test_three_dimensional_q_stays(tmp_path):
    m = model(_nodes(), {**QKV, "q": [H, M, DK]}, Y, INITS)  # broadcasts in MatMul, but the fused step is 4-D only
    g = fuse_attention(graph_of(m))
    assert ops(g)["FusedAttention"] == 0
    assert_computes_same(m, g, tmp_path)
