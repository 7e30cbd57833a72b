"""Chained copies composed in the plan (engine.plan_copies): a Split piece
copied into a Concat slab, a channel-last -> NCHW -> channel-last round trip
(the detector heads' Reshape + Transpose), each read straight from the first
copy's source, the first copy dropped when nothing else reads its output.

Every model must match onnxruntime, at 1 and 2 threads, on odd channel counts;
the COPY step counts are pinned so a chain that stops composing (or one that
composes where it must not) fails here, not only in a benchmark."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.kernels.abi import CopyStep, Op
from engine.lowering import Step, Value
from engine.plan_copies import compose
from engine.session import InferenceSession
from tests.runtime.op_oracle import assert_matches_ort

C, H, W = 13, 9, 7   # odd: no slab is a whole vector of floats


def _conv(name, x, y, c_in, c_out, rng, k=1):
    w = numpy_helper.from_array(rng.standard_normal((c_out, c_in, k, k)).astype(np.float32) * 0.3, name + "_w")
    b = numpy_helper.from_array(rng.standard_normal(c_out).astype(np.float32), name + "_b")
    node = helper.make_node("Conv", [x, name + "_w", name + "_b"], [y], name=name, pads=[k // 2] * 4)
    return node, [w, b]


def _save(path, nodes, inits, outputs, c_in=C):
    graph = helper.make_graph(nodes, "chains", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              [1, c_in, H, W])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [f"{o}{d}" for d in range(4)])
                               for o in outputs],
                              initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _csp(path, *, split_axis=1, concat_axis=1, a_is_output=False, a_feeds_conv=False):
    """conv -> Split(a, b) -> conv(b) -> Concat(a, b, conv(b)) -> conv: the
    detector's C2f block with odd channel counts (7 + 6)."""
    rng = np.random.default_rng(3)
    nodes, inits = [], []
    n, i = _conv("cv1", "x", "y", C, C, rng)
    nodes.append(n), inits.extend(i)
    dim = {1: C, 2: H, 3: W}[split_axis]
    parts = [dim // 2 + 1, dim - dim // 2 - 1]
    inits.append(numpy_helper.from_array(np.array(parts, np.int64), "parts"))
    nodes.append(helper.make_node("Split", ["y", "parts"], ["a", "b"], axis=split_axis))
    # m's output joins the Concat: C channels along H, an odd 5 along channels
    n, i = _conv("m", "b", "mb", parts[1] if split_axis == 1 else C, 5 if concat_axis == 1 else C, rng, k=3)
    nodes.append(n), inits.extend(i)
    nodes.append(helper.make_node("Concat", ["a", "b", "mb"], ["cat"], axis=concat_axis))
    outputs = ["cat"]
    if a_is_output:
        outputs.append("a")
    if a_feeds_conv:
        n, i = _conv("ca", "a", "ya", parts[0], 5, rng)
        nodes.append(n), inits.extend(i)
        outputs.append("ya")
    return _save(path, nodes, inits, outputs)


def _head(path, *, anchors=3, per=5):
    """conv -> Reshape [1, anchors, per, H*W] -> Transpose (0, 1, 3, 2): the
    detector head's round trip out of and back into channel-last."""
    rng = np.random.default_rng(4)
    n, i = _conv("head", "x", "y", C, anchors * per, rng)
    inits = i + [numpy_helper.from_array(np.array([1, anchors, per, H * W], np.int64), "shape")]
    nodes = [n, helper.make_node("Reshape", ["y", "shape"], ["r"]),
             helper.make_node("Transpose", ["r"], ["out"], perm=[0, 1, 3, 2])]
    return _save(path, nodes, inits, ["out"])


def _copies(sess, feeds) -> int:
    return sum(1 for r in sess.profile(feeds, repeats=1) if r["op"] == Op.COPY)


def _feeds(c_in=C):
    return {"x": np.random.default_rng(5).standard_normal((1, c_in, H, W)).astype(np.float32)}


def _check(path, copies: int) -> None:
    for threads in (1, 2):
        sess = InferenceSession(path, threads=threads)
        assert_matches_ort(path, _feeds(), sess)
        assert _copies(sess, _feeds()) == copies


# Every model also has the layout pass's two copies: the NCHW input to
# channel-last, each output back to NCHW.
@pytest.mark.parametrize("variant, copies", [
    # Split a and b (2), Concat a, b, mb (3): a's split copy goes, its slab
    # is filled from y; b feeds the conv and stays
    (dict(), 2 + 5 - 1),
    # a is also a graph output: both its readers are copies (the Concat slab
    # and the output's NCHW transpose), so both read y and a's copy goes
    (dict(a_is_output=True), 3 + 5 - 1),
    # a also feeds a conv: another kind of step reads it, kept
    (dict(a_feeds_conv=True), 3 + 5),
    # split and concat along H (a non-channel axis of the channel-last layout)
    (dict(split_axis=2, concat_axis=2), 2 + 5 - 1),
])
def test_split_into_concat(tmp_path, variant, copies):
    _check(_csp(tmp_path / "csp.onnx", **variant), copies)


def test_head_round_trip_reads_channel_last(tmp_path):
    # the input's layout copy, then one copy reads the conv's NHWC output
    # with (per, anchors * per, 1) strides: its NHWC -> NCHW copy is dropped
    _check(_head(tmp_path / "head.onnx"), 2)


def _copy_step(shape, dst_strides, src_strides, dst: Value, src: Value) -> Step:
    return Step(Op.COPY, [dst, src], CopyStep(esize=4, rank=len(shape)).words(shape, dst_strides, src_strides), [])


def test_compose_refuses_what_is_not_one_stride():
    # first: a [4, 6] -> [6, 4] transpose; second: elements 1..22 of its
    # output in order, which crosses rows of the transpose: no single stride
    x, mid, out = Value((4, 6), np.float32), Value((6, 4), np.float32), Value((22,), np.float32)
    first = _copy_step([6, 4], [4, 1], [1, 6], mid, x)
    second = _copy_step([22], [1], [1], out, Value((6, 4), np.float32, offset=4))
    assert compose(first, second) is None
    # the whole of row 2 of the transposed output is column 2 of x
    second = _copy_step([4], [1], [1], Value((4,), np.float32), Value((6, 4), np.float32, offset=2 * 4 * 4))
    assert compose(first, second) == ([4], [1], 2, [6])
    # a read past what the first copy wrote is refused, not wrapped
    second = _copy_step([4], [1], [1], Value((4,), np.float32), Value((6, 4), np.float32, offset=21 * 4))
    assert compose(first, second) is None


def test_compose_whole_buffer_in_another_shape():
    # first: [3, 4, 5] read transposed from a [5, 3, 4] source; second: the
    # whole output as one row of 60 into a strided slab: split to [3, 4, 5]
    x, mid = Value((5, 3, 4), np.float32), Value((3, 4, 5), np.float32)
    first = _copy_step([3, 4, 5], [20, 5, 1], [4, 1, 12], mid, x)
    second = _copy_step([60], [2], [1], Value((120,), np.float32), mid)
    assert compose(first, second) == ([3, 4, 5], [40, 10, 2], 0, [4, 1, 12])
    # [2, 6, 5] and [3, 4, 5] cross (4 rows of 5 is not whole rows of 30): the
    # element check decides, and here it finds no single stride
    second = _copy_step([2, 30], [30, 1], [30, 1], Value((60,), np.float32), mid)
    assert compose(first, second) is None


@pytest.mark.parametrize("square, transposed, mul_out, copies", [
    (False, False, False, 0),
    (True, False, False, 0),
    # then Transpose (0, 2, 1), as NMS wants its scores: the Mul writes
    # transposed, straight into the output
    (False, True, False, 0),
    # the Mul's output is also a graph output: two readers, the Transpose stays
    (False, True, True, 1),
])
def test_slices_into_binary_read_the_source(tmp_path, square, transposed, mul_out, copies):
    # the detector's tail: Sigmoid -> Slice (one row, the rest) -> Mul with
    # broadcasting; the Mul reads the sigmoid's output through strides and
    # neither slice is copied. square: one slice as both operands
    ins = ["s0", "s1"] if not square else ["s1", "s1"]
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
             [("b0", [4]), ("e0", [5]), ("b1", [5]), ("e1", [13]), ("ax", [1])]]
    nodes = [helper.make_node("Sigmoid", ["x"], ["sig"]),
             helper.make_node("Slice", ["sig", "b0", "e0", "ax"], ["s0"]),
             helper.make_node("Slice", ["sig", "b1", "e1", "ax"], ["s1"]),
             helper.make_node("Mul", ins, ["mul"])]
    outs = [helper.make_tensor_value_info("mul", TensorProto.FLOAT, [1, 8, 37])] if mul_out or not transposed else []
    if transposed:
        nodes.append(helper.make_node("Transpose", ["mul"], ["t"], perm=[0, 2, 1]))
        outs.append(helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 37, 8]))
    graph = helper.make_graph(nodes, "tail", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 13, 37])],
                              outs, initializer=inits)
    path = tmp_path / "tail.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    feeds = {"x": np.random.default_rng(6).standard_normal((1, 13, 37)).astype(np.float32)}
    for threads in (1, 2):
        sess = InferenceSession(path, threads=threads)
        assert_matches_ort(path, feeds, sess)
        assert _copies(sess, feeds) == copies
