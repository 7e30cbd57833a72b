"""fuse_layernorm, called directly: the ReduceMean-Sub-Pow-ReduceMean-Add-
Sqrt-Div decomposition over the last axis, followed by Mul(gamma) [and
Add(beta)], becomes LayerNormalization; without a scale, over another axis,
or with an intermediate read elsewhere (node, graph output, If branch) the
chain stays."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from engine.passes.fusion import fuse_layernorm
from tests.passes.graph_check import assert_computes_same, graph_of, model, ops, reader_of

D = 16
RNG = np.random.default_rng(6)
INITS = {"two": np.array(2.0, np.float32), "eps": np.array(1e-5, np.float32),
         "gamma": RNG.uniform(0.5, 1.5, D).astype(np.float32), "beta": RNG.standard_normal(D).astype(np.float32)}
X, Y = {"x": ["batch", 3, D]}, {"y": ["batch", 3, D]}
CHAIN = {"ReduceMean": 2, "Sub": 1, "Pow": 1, "Add": 1, "Sqrt": 1, "Div": 1}


def _nodes(*, scale=True, bias=True, axis=-1, extra=()):
    last = "y" if not scale else "n"
    nodes = [helper.make_node("ReduceMean", ["x"], ["mu"], axes=[axis]),
             helper.make_node("Sub", ["x", "mu"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["d2"]),
             helper.make_node("ReduceMean", ["d2"], ["var"], axes=[axis]),
             helper.make_node("Add", ["var", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], [last])]
    if scale:
        nodes.append(helper.make_node("Mul", ["n", "gamma"], ["y" if not bias else "ng"]))
        if bias:
            nodes.append(helper.make_node("Add", ["ng", "beta"], ["y"]))
    return nodes + list(extra)


@pytest.mark.parametrize("bias", [True, False])
def test_decomposition_becomes_layernorm(tmp_path, bias):
    m = model(_nodes(bias=bias), X, Y, INITS)
    g = fuse_layernorm(graph_of(m))
    assert ops(g) == {"LayerNormalization": 1}
    (ln,) = g.nodes
    assert ln.inputs == ["x", "gamma"] + (["beta"] if bias else []) and ln.outputs == ["y"]
    assert ln.attrs == {"axis": -1, "epsilon": pytest.approx(1e-5)}
    assert_computes_same(m, g, tmp_path)


def test_chain_without_scale_stays(tmp_path):
    m = model(_nodes(scale=False), X, Y, INITS)
    g = fuse_layernorm(graph_of(m))
    assert ops(g) == CHAIN
    assert_computes_same(m, g, tmp_path)


def test_other_axis_stays(tmp_path):
    m = model(_nodes(axis=1), X, Y, INITS)
    g = fuse_layernorm(graph_of(m))
    assert ops(g)["LayerNormalization"] == 0 and ops(g)["ReduceMean"] == 2
    assert_computes_same(m, g, tmp_path)


def test_intermediate_as_graph_output_stays(tmp_path):
    m = model(_nodes(), X, {**Y, "sd": ["batch", 3, 1]}, INITS)
    g = fuse_layernorm(graph_of(m))
    assert ops(g)["LayerNormalization"] == 0
    assert_computes_same(m, g, tmp_path)


@pytest.mark.parametrize("kind", ["node", "if"])
def test_intermediate_read_elsewhere_stays(tmp_path, kind):
    m = model(_nodes(extra=[reader_of("ve", kind)]), X, {**Y, "z": ["batch", 3, 1]}, INITS, cond=kind == "if")
    g = fuse_layernorm(graph_of(m))
    assert ops(g)["LayerNormalization"] == 0
    assert_computes_same(m, g, tmp_path)
