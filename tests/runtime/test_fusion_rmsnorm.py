"""fuse_rmsnorm: every exact spelling of the RMSNorm chain becomes one
FusedRMSNorm node and matches onnxruntime; inexact ones stay unfused and
still match."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.session import InferenceSession
from tests.runtime.op_oracle import assert_matches_ort

D = 48
CHAIN_OPS = {"Pow", "ReduceMean", "Add", "Sqrt", "Div", "Reciprocal", "Mul"}


def _model(path, *, square="pow", opset=17, axes_input=False, axis=-1, recip=False, leak=False, scale_first=False):
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, D).astype(np.float32), "scale"),
             numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]) if square == "pow"
             else helper.make_node("Mul", ["x", "x"], ["sq"])]
    if axes_input:
        inits.append(numpy_helper.from_array(np.array([axis], np.int64), "axes"))
        nodes.append(helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1))
    else:
        nodes.append(helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[axis], keepdims=1))
    nodes += [helper.make_node("Add", ["ms", "eps"], ["var"]), helper.make_node("Sqrt", ["var"], ["rms"])]
    if recip:
        nodes += [helper.make_node("Reciprocal", ["rms"], ["inv"]), helper.make_node("Mul", ["inv", "x"], ["n"])]
    else:
        nodes.append(helper.make_node("Div", ["x", "rms"], ["n"]))
    nodes.append(helper.make_node("Mul", ["scale", "n"] if scale_first else ["n", "scale"], ["Y"]))
    outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 5, D])]
    if leak == "output":  # the mean square is also a graph output: the chain must stay
        outs.append(helper.make_tensor_value_info("ms", TensorProto.FLOAT, ["batch", 5, 1]))
    elif leak == "node":  # the root mean square feeds another node too
        nodes.append(helper.make_node("Neg", ["rms"], ["R2"]))
        outs.append(helper.make_tensor_value_info("R2", TensorProto.FLOAT, ["batch", 5, 1]))
    graph = helper.make_graph(nodes, "rms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 5, D])],
                              outs, initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def _feeds(batch):
    return {"x": np.random.default_rng(batch).standard_normal((batch, 5, D), dtype=np.float32) * 3}


@pytest.mark.parametrize("variant", [
    dict(), dict(square="mul"), dict(recip=True), dict(scale_first=True),
    dict(opset=18, axes_input=True), dict(opset=18, axes_input=True, axis=2, square="mul", recip=True)])
@pytest.mark.op_test("FusedRMSNorm")
def test_exact_chains_fuse_to_one_node(tmp_path, variant):
    path = _model(tmp_path / "m.onnx", **variant)
    for threads in (1, 2):
        sess = InferenceSession(path, threads=threads)
        ops = Counter(n.op for n in sess.graph.nodes)
        assert ops == Counter({"FusedRMSNorm": 1}), ops
        steps = [st["op_name"] for st in sess.profile(_feeds(2), 1)]
        assert steps == ["rms_norm"], steps  # the aie_rms_norm step, not the composed fallback
        for batch in (1, 7):
            assert_matches_ort(path, _feeds(batch), sess)


@pytest.mark.parametrize("variant", [dict(axis=1), dict(opset=18, axes_input=True, axis=1), dict(leak="output"),
                                     dict(leak="node", recip=True)])
def test_inexact_chains_stay(tmp_path, variant):
    path = _model(tmp_path / "m.onnx", **variant)
    sess = InferenceSession(path, threads=1)
    ops = Counter(n.op for n in sess.graph.nodes)
    assert ops["FusedRMSNorm"] == 0 and ops["ReduceMean"] == 1, ops
    assert_matches_ort(path, _feeds(7), sess)
