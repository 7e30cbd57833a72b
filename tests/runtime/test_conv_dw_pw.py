"""fuse_depthwise_pointwise: MobileNetV2's expand -> depthwise -> project
block (or the depthwise -> project pair) becomes one ConvDwPw node
(CONV_DW_PW step), bitwise the convs it replaces at 1 and 2 threads, and
matches onnxruntime; an intermediate something else reads stays unfused."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine import aie_format
from engine.onnx_import import import_file
from engine.passes import DEFAULT_PASSES, run_passes
from engine.passes.fuse_dw_pw import fuse_depthwise_pointwise
from engine.session import InferenceSession
from tests.runtime.op_oracle import assert_matches_ort

C, E = 16, 48  # block channels, expanded channels (t = 3)


def _block(path, *, stride=1, residual=True, leak=None, expand=True):
    """[Expand 1x1 + Relu6,] depthwise 3x3 + Relu6, project 1x1 [+ skip];
    leak: an intermediate that is also a graph output."""
    rng = np.random.default_rng(stride)
    w = lambda *s: numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3)  # noqa: E731
    inits = []
    for name, arr in (("we", w(E, C, 1, 1)), ("be", w(E)), ("wd", w(E, 1, 3, 3)), ("bd", w(E)),
                      ("wp", w(C, E, 1, 1)), ("bp", w(C))):
        arr.name = name
        inits.append(arr)
    inits += [numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
              numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    if not expand:  # the block input has the expanded width: x is the depthwise input
        inits = [i for i in inits if i.name not in ("we", "be")]
    nodes = [helper.make_node("Conv", ["x", "we", "be"], ["e"]), helper.make_node("Clip", ["e", "lo", "hi"], ["e6"])]
    if not expand:
        nodes = [helper.make_node("Identity", ["x"], ["e6"])]
    nodes += [helper.make_node("Conv", ["e6", "wd", "bd"], ["d"], group=E, pads=[1, 1, 1, 1],
                               strides=[stride, stride]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["d6"]),
             helper.make_node("Conv", ["d6", "wp", "bp"], ["p" if residual else "Y"])]
    if residual:
        nodes.append(helper.make_node("Add", ["p", "x"], ["Y"]))
    outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", C, "p", "q"])]
    if leak:
        outs.append(helper.make_tensor_value_info(leak, TensorProto.FLOAT, ["n", E, "r", "s"]))
    cin = C if expand else E
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                             ["n", cin, "h", "w"])], outs,
                              initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _unfused(path, threads):
    passes = tuple(p for p in DEFAULT_PASSES if p is not fuse_depthwise_pointwise)
    graph, applied = run_passes(import_file(path), passes)
    loaded = aie_format.parse(aie_format.serialize(graph, {"passes": applied}), str(path))
    return InferenceSession(path, threads=threads, loaded=loaded)


def _feeds(n, h, w, c=C):
    return {"x": np.random.default_rng(n * h + w).standard_normal((n, c, h, w), dtype=np.float32)}


@pytest.mark.parametrize("stride,residual,expand,shape,steps", [
    (1, True, True, (2, 5, 17), ["conv_dw_pw"]), (2, False, True, (2, 5, 29), ["conv_dw_pw"]),
    (1, False, False, (2, 4, 16), ["conv_dw_pw"]), (2, False, False, (1, 6, 30), ["conv_dw_pw"]),
    # rows shorter than a tile (FUSE_MIN_ROW): the expand conv, or all three, as their own steps
    (2, True, True, (1, 7, 20), ["conv", "conv", "conv"]), (1, True, True, (2, 9, 11), ["conv", "conv", "conv"])])
@pytest.mark.op_test("ConvDwPw")
def test_block_fuses_bitwise(tmp_path, stride, residual, expand, shape, steps):
    path = _block(tmp_path / "m.onnx", stride=stride, residual=residual and stride == 1 and expand, expand=expand)
    feeds = _feeds(*shape, c=C if expand else E)
    for threads in (1, 2):
        sess = InferenceSession(path, threads=threads)
        ops = Counter(n.op for n in sess.graph.nodes)
        assert ops["ConvDwPw"] == 1 and ops["Conv"] == 0, ops
        assert [st["op_name"] for st in sess.profile(feeds, 1) if st["op_name"].startswith("conv")] == steps
        got = sess.run(None, feeds)[0]
        want = _unfused(path, threads).run(None, feeds)[0]
        assert np.array_equal(got, want)
        assert_matches_ort(path, feeds, sess)


@pytest.mark.parametrize("leak,convs,fused", [("d6", 3, 0), ("e6", 1, 1)])
def test_shared_intermediates_stay(tmp_path, leak, convs, fused):
    """A depthwise output read elsewhere keeps the three convs; an expanded
    one keeps the expand conv and fuses the pair after it."""
    path = _block(tmp_path / "m.onnx", leak=leak)
    sess = InferenceSession(path, threads=1)
    ops = Counter(n.op for n in sess.graph.nodes)
    assert ops["ConvDwPw"] == fused and ops["Conv"] == convs, ops
    feeds = _feeds(2, 9, 11)
    assert np.array_equal(sess.run(None, feeds)[0], _unfused(path, 1).run(None, feeds)[0])
    assert_matches_ort(path, feeds, sess)
