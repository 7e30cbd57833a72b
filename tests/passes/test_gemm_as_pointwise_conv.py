"""gemm_as_pointwise_conv, called directly: a Gemm with constant weights,
transA 0, alpha 1 and a vector bias with beta 1 becomes Reshape -> NHWC 1x1
Conv -> Reshape (the fused activation moving to the Conv); every other Gemm
stays. (tests/runtime/test_gemm_conv_pass.py checks batches 1/7/64 and both
thread counts end to end.)"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from engine.kernels.abi import Unary
from engine.passes.fusion import fuse_bias_activation
from engine.passes.gemm_conv import gemm_as_pointwise_conv
from tests.passes.graph_check import assert_computes_same, graph_of, model, ops

K, N = 13, 21
RNG = np.random.default_rng(10)
B = RNG.standard_normal((K, N)).astype(np.float32)
C = RNG.standard_normal(N).astype(np.float32)


def _gemm(b=B, inputs=("a", "B", "C"), relu=False, **attrs):
    nodes = [helper.make_node("Gemm", list(inputs), ["g" if relu else "y"], name="gemm0", **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["g"], ["y"]))
    inits = {"B": b, "C": C}
    a_shape = ["batch", K] if not attrs.get("transA") else [K, "batch"]
    return model(nodes, {"a": a_shape}, {"y": ["batch", N]}, {k: v for k, v in inits.items() if k in inputs})


@pytest.mark.parametrize("variant", [dict(), dict(b=np.ascontiguousarray(B.T), transB=1), dict(inputs=("a", "B"))])
def test_eligible_gemm_becomes_pointwise_conv(tmp_path, variant):
    m = _gemm(**variant)
    g = gemm_as_pointwise_conv(graph_of(m))
    assert [n.op for n in g.nodes] == ["Reshape", "Conv", "Reshape"]
    conv = g.nodes[1]
    assert conv.attrs["_nhwc"] == 1 and g.initializers[conv.inputs[1]].shape == (N, K, 1, 1)
    assert g.nodes[-1].outputs == ["y"]
    assert_computes_same(m, g, tmp_path)


def test_fused_activation_moves_to_the_conv(tmp_path):
    m = _gemm(relu=True)
    g = gemm_as_pointwise_conv(fuse_bias_activation(graph_of(m)))
    assert ops(g) == {"Reshape": 2, "Conv": 1} and g.nodes[1].attrs["_act"] == Unary.RELU
    assert_computes_same(m, g, tmp_path)


@pytest.mark.parametrize("attrs", [dict(alpha=2.0), dict(beta=0.5), dict(transA=1)])
def test_other_gemms_stay(tmp_path, attrs):
    m = _gemm(**attrs)
    g = gemm_as_pointwise_conv(graph_of(m))
    assert ops(g) == {"Gemm": 1}
    assert_computes_same(m, g, tmp_path)


def test_runtime_weights_stay(tmp_path):
    m = model([helper.make_node("Gemm", ["a", "b"], ["y"])], {"a": ["batch", K], "b": [K, N]}, {"y": ["batch", N]})
    g = gemm_as_pointwise_conv(graph_of(m))
    assert ops(g) == {"Gemm": 1}
    assert_computes_same(m, g, tmp_path)
