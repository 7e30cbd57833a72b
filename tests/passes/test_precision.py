"""mark_bf16 (engine/passes/precision.py), called directly: what it marks
bf16 (MatMul/Gemm with a constant B that GEMM_BF16_PACKED takes, Conv with
group 1), what it leaves fp32 (products of two activations, transA, a scaled
product, softmax, normalisations, depthwise Conv), and the bf16 model's
outputs at every level against float64 within the bound of
kernels/include/aie_gemm_lowp.h:

    |y - ref| <= (2^-8 + (K + 2) * 2^-24) * (sum_k |a_ik| |b_kj| + |bias_j|)

(2^-9 relative rounding of each input to bf16; a K-step fp32 sum; the fp32
bias addition). The weights are packed in bf16 at conversion on this host's
level and the fp32 copies dropped; the same graph then runs on every level
(AMX, AVX-512 BF16, and the portable path on avx512/avx2/scalar)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from engine import kernels
from engine.passes import DEFAULT_PASSES, passes_for, run_passes
from engine.passes.precision import mark_bf16, precision_of
from engine import aie_format
from engine.session import InferenceSession
from tests.passes.graph_check import graph_of, model

RNG = np.random.default_rng(12)
K1, N1 = 37, 19   # K not a multiple of the AMX tile depth (32), N not of its width
K2, N2 = 70, 33
W1 = RNG.standard_normal((K1, N1)).astype(np.float32)
B1 = RNG.standard_normal(N1).astype(np.float32)
W2 = RNG.standard_normal((N2, K2)).astype(np.float32)   # Gemm transB=1: stored N x K
C2 = RNG.standard_normal(N2).astype(np.float32)


def _bound_check(got, a, w, bias, what):
    a64, w64 = a.astype(np.float64).reshape(-1, a.shape[-1]), w.astype(np.float64)
    ref = a64 @ w64 + bias
    mag = np.abs(a64) @ np.abs(w64) + np.abs(bias)
    k = a.shape[-1]
    ratio = np.abs(got.reshape(ref.shape).astype(np.float64) - ref) / ((2.0**-8 + (k + 2) * 2.0**-24) * mag + 1e-30)
    assert ratio.max() <= 1.0, f"{what}: {ratio.max():.3g} of the bf16 bound (K={k})"


def _gemms_model():
    # y1 = relu(x @ W1 + B1) with a 3-D x (batch dims folded into M); y2 = Gemm(x2, W2, C2, transB=1)
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["m"]), helper.make_node("Add", ["m", "B1"], ["s"]),
             helper.make_node("Relu", ["s"], ["y1"]),
             helper.make_node("Gemm", ["x2", "W2", "C2"], ["y2"], transB=1)]
    return model(nodes, {"x": [2, 5, K1], "x2": ["batch", K2]}, {"y1": [2, 5, N1], "y2": ["batch", N2]},
                 {"W1": W1, "B1": B1, "W2": W2, "C2": C2})


def test_marks_the_products_with_constant_weights_and_leaves_the_rest():
    nodes = [helper.make_node("MatMul", ["x", "W"], ["a"]),                       # marked
             helper.make_node("Transpose", ["a"], ["at"]),
             helper.make_node("MatMul", ["a", "at"], ["s"]),                      # two activations: fp32
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("Gemm", ["p", "G"], ["g"], transA=1),               # transA: fp32
             helper.make_node("Gemm", ["p", "G"], ["h"], alpha=0.5),              # scaled: fp32
             helper.make_node("Gemm", ["p", "G", "c"], ["k"]),                    # bias row: marked
             helper.make_node("LayerNormalization", ["k", "ln_s"], ["y"], axis=-1)]
    m = model(nodes, {"x": [4, 6]}, {"y": [4, 4], "g": [4, 4], "h": [4, 4]},
              {"W": RNG.standard_normal((6, 4)).astype(np.float32), "G": np.eye(4, dtype=np.float32),
               "c": np.ones(4, np.float32), "ln_s": np.ones(4, np.float32)})
    g = mark_bf16(graph_of(m))
    marked = {n.outputs[0] for n in g.nodes if n.attrs.get("_precision") == "bf16"}
    assert marked == {"a", "k"}
    assert precision_of(g) == "bf16"


def test_marks_convolutions_but_not_depthwise_ones_nor_those_the_cost_rule_leaves_fp32():
    def conv(shape, name, group=1, pad=1):
        w = RNG.standard_normal(shape).astype(np.float32)
        return w, helper.make_node("Conv", ["x", name], [name + "_y"], pads=[pad] * 4, group=group)

    cases = {"big": ((24, 4, 3, 3), 1, 1),      # depth 36, K 24: bf16
             "dw": ((4, 1, 3, 3), 4, 1),        # depthwise: fp32
             "narrow": ((16, 4, 3, 3), 1, 1),   # K 16 < 24: fp32
             "shallow": ((64, 3, 3, 3), 1, 1),  # depth 27 < 32: fp32 (a stem conv on RGB)
             "deep1x1": ((32, 32, 1, 1), 1, 0),  # depth 32, K 32: bf16
             "thin1x1": ((96, 16, 1, 1), 1, 0)}  # depth 16: fp32
    inits, nodes, outs = {}, [], {}
    for name, (shape, group, pad) in cases.items():
        w, n = conv(shape, name, group, pad)
        inits[name], outs[name + "_y"] = w, [1, shape[0], 5, 5]
        nodes.append(n)
    for n, (shape, group, _) in zip(nodes, cases.values()):  # each conv reads an input of its width
        n.input[0] = f"x{shape[1] * group}"
    m = model(nodes, {f"x{c}": [1, c, 5, 5] for c in (3, 4, 16, 32)}, outs, inits)
    g = mark_bf16(graph_of(m))
    assert {n.inputs[1]: n.attrs.get("_precision") for n in g.nodes} == {
        "big": "bf16", "dw": None, "narrow": None, "shallow": None, "deep1x1": "bf16", "thin1x1": None}


def test_fp32_stays_the_default_and_unmarked():
    assert passes_for("fp32") == DEFAULT_PASSES and mark_bf16 not in DEFAULT_PASSES
    g, applied = run_passes(graph_of(_gemms_model()))
    assert "mark_bf16" not in applied and precision_of(g) == "fp32"
    assert all("_precision" not in n.attrs for n in g.nodes)
    with pytest.raises(ValueError, match="not one of fp32, bf16"):
        passes_for("int8")


@pytest.fixture(scope="module")
def bf16_aie(tmp_path_factory):
    """The bf16 graph, packed on this host's level, written as an .aie."""
    g, applied = run_passes(graph_of(_gemms_model()), passes_for("bf16"))
    assert "mark_bf16" in applied
    gemms = [n for n in g.nodes if n.op in ("MatMul", "Gemm")]
    assert gemms and all(n.attrs.get("_packed_bf16") and n.inputs[1] == "" for n in gemms)
    assert "W1" not in g.initializers and "W2" not in g.initializers  # only the bf16 blobs are stored
    path = tmp_path_factory.mktemp("bf16") / "gemms.aie"
    aie_format.write(path, g)
    return path


@pytest.mark.parametrize("level", kernels.LEVELS)
def test_bf16_model_within_the_bound_at_every_level(bf16_aie, level):
    why = kernels.level_unsupported(level)
    if why is not None:
        pytest.skip(f"level {level} unavailable on this host: {why}")
    x = RNG.standard_normal((2, 5, K1)).astype(np.float32)
    x2 = RNG.standard_normal((3, K2)).astype(np.float32)
    with kernels.use_level(level):
        session = InferenceSession(bf16_aie, threads=2)
        y1, y2 = session.run(None, {"x": x, "x2": x2})
        assert session.precision == "bf16" and set(session.kernel_paths) == {"gemm_bf16"}
    assert np.all(y1 >= 0)
    # relu is monotone and 1-Lipschitz: the pre-activation bound holds after it
    x64 = x.reshape(-1, K1).astype(np.float64)
    ref1 = np.maximum(x64 @ W1 + B1, 0)
    mag1 = np.abs(x64) @ np.abs(W1.astype(np.float64)) + np.abs(B1)
    ratio = np.abs(y1.reshape(ref1.shape) - ref1) / ((2.0**-8 + (K1 + 2) * 2.0**-24) * mag1)
    assert ratio.max() <= 1.0, f"MatMul+bias+relu: {ratio.max():.3g} of the bf16 bound"
    _bound_check(y2, x2, W2.T, C2, "Gemm transB")
