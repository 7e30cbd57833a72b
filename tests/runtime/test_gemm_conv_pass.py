"""gemm_as_pointwise_conv: Gemm with constant weights runs as a 1x1 Conv, exactly.

Eligible Gemms (transA = 0, alpha = 1, a vector C with beta = 1, constant B in
either orientation, a fused activation) become Reshape -> Conv -> Reshape and
must match onnxruntime at batch 1 (fewer rows than a tile: the GEMM fallback),
7 and 64; ineligible ones stay Gemm nodes and must match too."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.session import InferenceSession
from tests.runtime.op_oracle import assert_matches_ort

K, N = 37, 45


def _model(path, *, trans_b=0, alpha=1.0, beta=1.0, trans_a=0, c_shape=(N,), relu=True):
    rng = np.random.default_rng(7)
    b = rng.standard_normal((N, K) if trans_b else (K, N), dtype=np.float32)
    inits = [numpy_helper.from_array(b, "B")]
    ins = ["A", "B"]
    if c_shape is not None:
        inits.append(numpy_helper.from_array(rng.standard_normal(c_shape, dtype=np.float32), "C"))
        ins.append("C")
    nodes = [helper.make_node("Gemm", ins, ["g"], name="gemm0", transA=trans_a, transB=trans_b, alpha=alpha,
                              beta=beta)]
    nodes.append(helper.make_node("Relu" if relu else "Identity", ["g"], ["Y"]))
    a_shape = [K, "batch"] if trans_a else ["batch", K]
    graph = helper.make_graph(nodes, "gemm", [helper.make_tensor_value_info("A", TensorProto.FLOAT, a_shape)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", N])], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _feeds(batch, trans_a=0):
    shape = (K, batch) if trans_a else (batch, K)
    return {"A": np.random.default_rng(batch).standard_normal(shape, dtype=np.float32)}


@pytest.mark.parametrize("variant", [dict(), dict(trans_b=1), dict(c_shape=(1, N)), dict(c_shape=None, relu=False)])
def test_eligible_gemm_runs_as_pointwise_conv(tmp_path, variant):
    path = _model(tmp_path / "m.onnx", **variant)
    for threads in (1, 2):
        sess = InferenceSession(path, threads=threads)
        ops = Counter(n.op for n in sess.graph.nodes)
        assert ops["Gemm"] == 0 and ops["Conv"] == 1 and ops["Relu"] == 0, ops
        for batch in (1, 7, 64):
            assert_matches_ort(path, _feeds(batch), sess)


@pytest.mark.parametrize("variant", [dict(alpha=2.0), dict(beta=0.5), dict(trans_a=1), dict(c_shape=(7, N))])
def test_other_gemms_stay_gemm(tmp_path, variant):
    path = _model(tmp_path / "m.onnx", **variant)
    sess = InferenceSession(path, threads=1)
    assert Counter(n.op for n in sess.graph.nodes)["Gemm"] == 1
    assert_matches_ort(path, _feeds(7, variant.get("trans_a", 0)), sess)
