"""fuse_depthwise_pointwise, called directly on a graph the earlier passes
prepared: MobileNetV2's expand -> depthwise -> project block becomes one
ConvDwPw node with the three convs' operands in place and their
activations and blob tags under the block's names; a bf16 project conv
stays unfused. (Numerics: tests/runtime/test_conv_dw_pw.py.)"""

from __future__ import annotations

import onnx

from engine.kernels.abi import Unary
from engine.onnx_import import import_file
from engine.packing import host_isa
from engine.passes import DEFAULT_PASSES, run_passes
from engine.passes.fuse_dw_pw import fuse_depthwise_pointwise
from tests.passes.graph_check import assert_computes_same, ops
from tests.runtime.test_conv_dw_pw import _block, _feeds


def _prepared(path):
    upto = DEFAULT_PASSES[:DEFAULT_PASSES.index(fuse_depthwise_pointwise)]
    return run_passes(import_file(path), upto)[0]


def test_block_becomes_one_node(tmp_path):
    path = _block(tmp_path / "m.onnx")
    g = fuse_depthwise_pointwise(_prepared(path))
    assert ops(g)["ConvDwPw"] == 1 and ops(g)["Conv"] == 0, ops(g)
    node = next(n for n in g.nodes if n.op == "ConvDwPw")
    assert [node.inputs[i] for i in (1, 2, 4, 5, 8, 9)] == ["wd", "bd", "wp", "bp", "we", "be"]
    assert node.inputs[0].startswith("x") and node.inputs[7].startswith("x")  # the block input, also the skip
    assert all(node.inputs[i] in g.initializers for i in (3, 6, 10))  # the three packed blobs
    a = node.attrs
    assert (a["_dw_act"], a["_dw_p0"], a["_dw_p1"]) == (Unary.CLIP, 0.0, 6.0)
    assert (a["_ex_act"], a["_ex_p0"], a["_ex_p1"]) == (Unary.CLIP, 0.0, 6.0)
    assert a["_packed_isa"] == a["_pw_packed_isa"] == a["_ex_packed_isa"] == host_isa()
    assert a["group"] == 48 and a["pads"] == [1, 1, 1, 1] and a["_nhwc"] == 1
    assert_computes_same(onnx.load(path), g, tmp_path, feeds=_feeds(2, 9, 11))


def test_bf16_project_conv_stays(tmp_path):
    g = _prepared(_block(tmp_path / "m.onnx"))
    project = [n for n in g.nodes if n.op == "Conv"][-1]
    project.attrs["_precision"] = "bf16"
    g = fuse_depthwise_pointwise(g)
    assert ops(g)["ConvDwPw"] == 0 and ops(g)["Conv"] == 3, ops(g)
