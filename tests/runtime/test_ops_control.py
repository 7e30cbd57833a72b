"""If with a condition computed at run time executes only the taken branch:
a branch that would fail (a Gather index out of range, known only at run
time) does not run when the other is taken, and fails with the kernel's
error when it is."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from engine.errors import KernelError
from engine.session import InferenceSession

F = TensorProto.FLOAT


def _model():
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t_out"])], "then", [],
                               [helper.make_tensor_value_info("t_out", F, [4])])
    else_g = helper.make_graph([helper.make_node("Gather", ["x", "idx"], ["e_out"], axis=0)], "else", [],
                               [helper.make_tensor_value_info("e_out", F, [4])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    graph = helper.make_graph(nodes, "if", [helper.make_tensor_value_info("x", F, [4]),
                                            helper.make_tensor_value_info("idx", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", F, [4])],
                              [helper.make_tensor("zero", F, [], [0.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_only_the_taken_branch_runs(tmp_path):
    onnx.save(_model(), str(tmp_path / "if.onnx"))
    sess = InferenceSession(tmp_path / "if.onnx", threads=1)
    x = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    bad = np.array([0, 1, 99, 2], np.int64)   # the else branch's Gather would fail on 99
    np.testing.assert_array_equal(sess.run(None, {"x": x, "idx": bad})[0], -x)
    np.testing.assert_array_equal(sess.run(None, {"x": -x, "idx": np.array([3, 2, 1, 0], np.int64)})[0], -x[::-1])
    with pytest.raises(KernelError, match="99"):
        sess.run(None, {"x": -x, "idx": bad})
