"""fuse_depthwise_pointwise: MobileNetV2's depthwise -> 1x1 project pair
becomes one ConvDwPw node (CONV_DW_PW step), bitwise the two convs it
replaces at 1 and 2 threads, and matches onnxruntime; a depthwise output
something else reads stays unfused."""

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


def _block(path, *, stride=1, residual=True, leak=False):
    """Expand 1x1 + Relu6, depthwise 3x3 + Relu6, project 1x1 [+ skip]."""
    rng = np.random.default_rng(stride)
    w = lambda *s: numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3)  # noqa: E731
    inits = []
    for name, arr in (("we", w(E, C, 1, 1)), ("be", w(E)), ("wd", w(E, 1, 3, 3)), ("bd", w(E)),
                      ("wp", w(C, E, 1, 1)), ("bp", w(C))):
        arr.name = name
        inits.append(arr)
    inits += [numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
              numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    nodes = [helper.make_node("Conv", ["x", "we", "be"], ["e"]), helper.make_node("Clip", ["e", "lo", "hi"], ["e6"]),
             helper.make_node("Conv", ["e6", "wd", "bd"], ["d"], group=E, pads=[1, 1, 1, 1],
                              strides=[stride, stride]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["d6"]),
             helper.make_node("Conv", ["d6", "wp", "bp"], ["p" if residual else "Y"])]
    if residual:
        nodes.append(helper.make_node("Add", ["p", "x"], ["Y"]))
    outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", C, "p", "q"])]
    if leak:  # the depthwise output is also a graph output: the pair must stay apart
        outs.append(helper.make_tensor_value_info("d6", TensorProto.FLOAT, ["n", E, "p", "q"]))
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                             ["n", C, "h", "w"])], outs,
                              initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _unfused(path, threads):
    passes = tuple(p for p in DEFAULT_PASSES if p is not fuse_depthwise_pointwise)
    graph, applied = run_passes(import_file(path), passes)
    loaded = aie_format.parse(aie_format.serialize(graph, {"passes": applied}), str(path))
    return InferenceSession(path, threads=threads, loaded=loaded)


def _feeds(n, h, w):
    return {"x": np.random.default_rng(n * h + w).standard_normal((n, C, h, w), dtype=np.float32)}


@pytest.mark.parametrize("stride,residual,shape", [(1, True, (2, 9, 11)), (2, False, (3, 13, 10)),
                                                  (1, False, (1, 2, 5))])
@pytest.mark.op_test("ConvDwPw")
def test_pair_fuses_bitwise(tmp_path, stride, residual, shape):
    path = _block(tmp_path / "m.onnx", stride=stride, residual=residual)
    feeds = _feeds(*shape)
    for threads in (1, 2):
        sess = InferenceSession(path, threads=threads)
        ops = Counter(n.op for n in sess.graph.nodes)
        assert ops["ConvDwPw"] == 1 and ops["Conv"] == 1, ops  # the expand conv stays a Conv
        assert "conv_dw_pw" in [st["op_name"] for st in sess.profile(feeds, 1)]
        got = sess.run(None, feeds)[0]
        want = _unfused(path, threads).run(None, feeds)[0]
        assert np.array_equal(got, want)
        assert_matches_ort(path, feeds, sess)


def test_shared_depthwise_output_stays(tmp_path):
    path = _block(tmp_path / "m.onnx", leak=True)
    sess = InferenceSession(path, threads=1)
    ops = Counter(n.op for n in sess.graph.nodes)
    assert ops["ConvDwPw"] == 0 and ops["Conv"] == 3, ops
    assert_matches_ort(path, _feeds(2, 9, 11), sess)
