"""prepack_weights, called directly: constant float32 GEMM B matrices and
Conv weights get a packed blob as input 3 (tagged with the host ISA in
_packed_isa), one blob per distinct weight and packing; runtime weights and
non-float weights stay unpacked; the packed graph computes the same. A
group-1 Conv marked `_precision: bf16` gets its bf16 blob instead."""

from __future__ import annotations

import numpy as np
from onnx import helper

from engine.kernels.conv_lowp import is_bf16_conv_blob
from engine.packing import host_isa
from engine.passes.prepack import prepack_weights
from tests.passes.graph_check import assert_computes_same, graph_of, model

RNG = np.random.default_rng(8)
K, N = 24, 40
W = RNG.standard_normal((K, N)).astype(np.float32)


def _packed(g):
    return {n.name or n.outputs[0]: n.inputs[3] for n in g.nodes if len(n.inputs) > 3 and n.inputs[3]}


def test_constant_matmul_weights_are_packed_once(tmp_path):
    m = model([helper.make_node("MatMul", ["x", "W"], ["a"]), helper.make_node("MatMul", ["x", "W"], ["b"]),
               helper.make_node("Add", ["a", "b"], ["y"])], {"x": ["batch", K]}, {"y": ["batch", N]}, {"W": W})
    g = prepack_weights(graph_of(m))
    mms = [n for n in g.nodes if n.op == "MatMul"]
    assert all(n.attrs["_packed_isa"] == host_isa() for n in mms)
    assert mms[0].inputs[3] == mms[1].inputs[3] == "W/packed"
    assert g.initializers["W/packed"].dtype == np.uint8 and "W" in g.initializers  # raw weights kept for repacking
    assert_computes_same(m, g, tmp_path)


def test_conv_weights_are_packed(tmp_path):
    w = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32)
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], {"x": [1, 3, 7, 7]}, {"y": [1, 8, 7, 7]},
              {"w": w})
    g = prepack_weights(graph_of(m))
    assert g.nodes[0].inputs[3] == "w/packed" and "_packed_isa" in g.nodes[0].attrs
    assert_computes_same(m, g, tmp_path)


def test_runtime_weights_stay_unpacked(tmp_path):
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": ["batch", K], "w": [K, N]}, {"y": ["batch", N]})
    g = prepack_weights(graph_of(m))
    assert g.nodes[0].inputs == ["x", "w"] and "_packed_isa" not in g.nodes[0].attrs
    assert_computes_same(m, g, tmp_path)


def test_three_dimensional_matmul_weights_stay_unpacked():
    m = model([helper.make_node("MatMul", ["x", "W3"], ["y"])], {"x": [2, 3, K]}, {"y": [2, 3, N]},
              {"W3": np.stack([W, W])})
    g = prepack_weights(graph_of(m))
    assert g.nodes[0].inputs == ["x", "W3"]


def test_bf16_conv_weights_get_the_bf16_blob():
    """A group-1 Conv marked `_precision: bf16` gets its bf16 blob (one layout on every ISA: no _packed_isa),
    shared by the Convs that use the same weights; a grouped one marked bf16 keeps the fp32 packing. Weights
    read only through bf16 blobs lose their fp32 copy (the node keeps their shape); weights an fp32 Conv
    reads too keep it."""
    w = RNG.standard_normal((8, 4, 3, 3)).astype(np.float32)
    w2 = RNG.standard_normal((8, 4, 3, 3)).astype(np.float32)
    m = model([helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
               helper.make_node("Conv", ["x", "w"], ["b"], pads=[1, 1, 1, 1]),
               helper.make_node("Conv", ["x", "wg"], ["c"], pads=[1, 1, 1, 1], group=2),
               helper.make_node("Conv", ["x", "w2"], ["d"], pads=[1, 1, 1, 1]),
               helper.make_node("Conv", ["x", "w2"], ["e"], pads=[1, 1, 1, 1]),
               helper.make_node("Sum", ["a", "b", "c", "d", "e"], ["y"])],
              {"x": [1, 4, 7, 7]}, {"y": [1, 8, 7, 7]}, {"w": w, "wg": w[:, :2].copy(), "w2": w2})
    g = graph_of(m)
    for n in g.nodes[:4]:
        n.attrs["_precision"] = "bf16"
    g = prepack_weights(g)
    a, b, c, d, e = g.nodes[:5]
    assert a.inputs[3] == b.inputs[3] == "w/packed" and is_bf16_conv_blob(g.initializers["w/packed"])
    assert "_packed_isa" not in a.attrs and "_packed_isa" not in b.attrs
    assert not is_bf16_conv_blob(g.initializers[c.inputs[3]]) and c.attrs["_packed_isa"] == host_isa()
    assert "w" not in g.initializers and a.inputs[1] == b.inputs[1] == "" and a.attrs["_w_shape"] == [8, 4, 3, 3]
    assert "w2" in g.initializers and d.inputs[1] == e.inputs[1] == "w2" and "_w_shape" not in d.attrs
