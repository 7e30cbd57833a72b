"""qdq_fuse, called directly: the QDQ groups onnxruntime.quantization writes
(DequantizeLinear(uint8 x), DequantizeLinear(int8 constant w) -> Conv /
MatMul / Gemm [+ int32 bias] [-> Relu] [-> QuantizeLinear(uint8)]) become
one QConvU8S8 / QGemmU8S8 node; what it cannot run exactly on the int8
kernels stays as it was. Outputs against onnxruntime, which fuses the same
groups into its own int8 kernels: byte-identical where the group ends in a
QuantizeLinear (the uint8 output), within float32 rounding otherwise. The
weights are drawn where onnxruntime's kernels are exact on this CPU
(tests/int8_reference.py says why); full-range weights are checked against an
exact integer reference."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from engine import aie_format
from engine.passes.qdq_fuse import qdq_fuse
from engine.session import InferenceSession
from tests.int8_reference import (ORT_INT8_EXACT_AT_FULL_RANGE, int_conv, int_matmul, ort_exact_weights, quantize_u8,
                                  requantize_u8)
from tests.passes.graph_check import graph_of, model, ops

RNG = np.random.default_rng(12)
C, K = 5, 7


def _inits(w_shape, channel_axis, w_zero=0, per_channel=True, full_range=False):
    n = w_shape[channel_axis]
    return {"xs": np.float32(0.03), "xz": np.uint8(118),
            "wq": ort_exact_weights(RNG, w_shape, full_range),
            "ws": (RNG.uniform(0.002, 0.02, n) if per_channel else RNG.uniform(0.002, 0.02, ())).astype(np.float32),
            "wz": np.full(n if per_channel else (), w_zero, np.int8),
            "bq": RNG.integers(-3000, 3000, n).astype(np.int32),
            "ys": np.float32(0.05), "yz": np.uint8(0), "ys2": np.float32(0.04), "yz2": np.uint8(131)}


def _group(op, attrs, w_axis, relu=False, quantize_out=True, bias=True, y_zero="yz2", extra=()):
    """x -> Q -> DQ -> op(DQ(w) [, DQ(bias)]) [-> Relu] [-> Q -> DQ] -> y."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=w_axis)]
    ins = ["xd", "wd"]
    if bias:
        nodes.append(helper.make_node("Mul", ["xs", "ws"], ["bs"]))
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs"], ["bd"], axis=0))
        ins.append("bd")
    nodes.append(helper.make_node(op, ins, ["h"], **attrs))
    last = "h"
    if relu:
        nodes.append(helper.make_node("Relu", ["h"], ["hr"]))
        last = "hr"
    if quantize_out:
        ys = "ys" if y_zero == "yz" else "ys2"
        nodes += [helper.make_node("QuantizeLinear", [last, ys, y_zero], ["yq"]),
                  helper.make_node("DequantizeLinear", ["yq", ys, y_zero], ["y"])]
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    return nodes + list(extra)


def _run_both(m, g, tmp_path, feeds):
    path = tmp_path / "fused.aie"
    aie_format.write(path, g, {})
    ours = InferenceSession(path, threads=2).run(None, feeds)
    theirs = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return ours, theirs


CONV = dict(pads=[1, 0, 2, 1], strides=[2, 1])
X4 = {"x": [2, C, 9, 8]}
Y4 = [2, K, 5, 8]


def _conv_model(**kw):
    inits = _inits((K, C, 3, 2), 0, **{k: kw.pop(k) for k in ("w_zero", "per_channel", "full_range") if k in kw})
    # the bias scale is computed from xs * ws by a Mul that fold_constants would fold; give it as a constant here
    nodes = _group("Conv", dict(CONV, **kw.pop("attrs", {})), 0, **kw)
    return nodes, inits


def _constant_bias_scale(nodes, inits):
    """Replace the Mul computing the bias scale by its value (what quantize_static writes)."""
    out = [n for n in nodes if n.op_type != "Mul"]
    if len(out) != len(nodes):
        inits["bs"] = (inits["xs"] * inits["ws"]).astype(np.float32)
    return out


def _feeds(shape):
    return {"x": RNG.uniform(-3, 3, shape).astype(np.float32)}


@pytest.mark.op_test("QConvU8S8")
@pytest.mark.parametrize("relu,y_zero", [(False, "yz2"), (True, "yz")])
def test_conv_group_to_uint8_is_byte_identical_to_onnxruntime(tmp_path, relu, y_zero):
    nodes, inits = _conv_model(relu=relu, y_zero=y_zero)
    nodes = _constant_bias_scale(nodes, inits)
    m = model(nodes, X4, {"y": Y4}, inits)
    g = qdq_fuse(graph_of(m))
    (fused,) = [n for n in g.nodes if n.op == "QConvU8S8"]
    assert fused.attrs["_out"] == "uint8" and "_act" not in fused.attrs
    assert fused.outputs == ["yq"] and "Conv" not in ops(g) and "Relu" not in ops(g)
    feeds = _feeds(X4["x"])
    ours, theirs = _run_both(m, g, tmp_path, feeds)
    assert np.array_equal(ours[0], theirs[0])


@pytest.mark.op_test("QConvU8S8", "QGemmU8S8")
@pytest.mark.parametrize("op", ["Conv", "Gemm"])
def test_full_range_weights_are_the_exact_integer_sums(tmp_path, op):
    """Weights over all of -127..127 with activations up to 255, where onnxruntime saturates without
    VNNI: ours against int64 sums and the same float32 requantisation, byte for byte."""
    if op == "Conv":
        nodes, inits = _conv_model(y_zero="yz2", full_range=True)
        shape, out = X4["x"], Y4
    else:
        inits = _inits((K, C * 9), 0, full_range=True)
        nodes, shape, out = _group("Gemm", {"transB": 1}, 0), [3, C * 9], [3, K]
    nodes = _constant_bias_scale(nodes, inits)
    m = model(nodes, {"x": shape}, {"y": out}, inits)
    g = qdq_fuse(graph_of(m))
    assert ops(g)[f"Q{op}U8S8"] == 1
    feeds = _feeds(shape)
    feeds["x"].flat[:40] = 3.0  # a run of 255s: with the top weights, pairs past int16
    ours, theirs = _run_both(m, g, tmp_path, feeds)
    xq = quantize_u8(feeds["x"], inits["xs"], inits["xz"])
    if op == "Conv":
        acc = int_conv(xq, inits["xz"], inits["wq"], CONV["strides"], CONV["pads"]) + inits["bq"][:, None, None]
        ws = inits["ws"][:, None, None]
    else:
        acc, ws = int_matmul(xq, inits["xz"], inits["wq"].T) + inits["bq"], inits["ws"]
    yq = requantize_u8(acc, inits["xs"], ws, inits["ys2"], inits["yz2"])
    want = ((yq.astype(np.float32) - np.float32(inits["yz2"])) * inits["ys2"]).astype(np.float32)
    np.testing.assert_array_equal(ours[0], want)
    if ORT_INT8_EXACT_AT_FULL_RANGE:
        np.testing.assert_array_equal(theirs[0], want)


def test_relu_with_a_nonzero_output_zero_point_stays_exact(tmp_path):
    """Relu then Q with zero point 131: the node writes float32 with the Relu; the QuantizeLinear stays."""
    nodes, inits = _conv_model(relu=True, y_zero="yz2")
    nodes = _constant_bias_scale(nodes, inits)
    m = model(nodes, X4, {"y": Y4}, inits)
    g = qdq_fuse(graph_of(m))
    (fused,) = [n for n in g.nodes if n.op == "QConvU8S8"]
    assert fused.attrs["_out"] == "float32" and fused.attrs["_act"] == 1 and ops(g)["QuantizeLinear"] == 2
    ours, theirs = _run_both(m, g, tmp_path, _feeds(X4["x"]))
    assert np.abs(ours[0] - theirs[0]).max() <= 0.04 * 1.001  # one step of y


def test_conv_without_quantized_output_is_float32(tmp_path):
    nodes, inits = _conv_model(quantize_out=False)
    nodes = _constant_bias_scale(nodes, inits)
    m = model(nodes, X4, {"y": Y4}, inits)
    g = qdq_fuse(graph_of(m))
    (fused,) = [n for n in g.nodes if n.op == "QConvU8S8"]
    assert fused.attrs["_out"] == "float32"
    ours, theirs = _run_both(m, g, tmp_path, _feeds(X4["x"]))
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-4)


@pytest.mark.op_test("QGemmU8S8")
@pytest.mark.parametrize("op,attrs,w_shape,axis", [("Gemm", {"transB": 1}, (K, C * 9), 0),
                                                   ("Gemm", {}, (C * 9, K), 1),
                                                   ("MatMul", {}, (C * 9, K), 1)])
def test_gemm_and_matmul_groups_are_byte_identical_to_onnxruntime(tmp_path, op, attrs, w_shape, axis):
    inits = _inits(w_shape, axis)
    nodes = _constant_bias_scale(_group(op, attrs, axis, bias=op == "Gemm"), inits)
    m = model(nodes, {"x": [3, C * 9]}, {"y": [3, K]}, inits)
    g = qdq_fuse(graph_of(m))
    assert ops(g)["QGemmU8S8"] == 1 and op not in ops(g)
    ours, theirs = _run_both(m, g, tmp_path, _feeds([3, C * 9]))
    assert np.array_equal(ours[0], theirs[0])


@pytest.mark.parametrize("case", ["weight_zero_point", "grouped", "x_read_elsewhere_is_kept", "output_read_elsewhere",
                                  "gemm_alpha"])
def test_what_stays_as_it_was(tmp_path, case):
    inputs, out, extra_out = X4, Y4, {}
    if case == "weight_zero_point":
        nodes, inits = _conv_model(w_zero=3)
    elif case == "grouped":
        inits = _inits((K - 1, 1, 3, 3), 0)
        inits["bq"] = inits["bq"][:K - 1]
        nodes = _group("Conv", {"group": 2, "pads": [1, 1, 1, 1]}, 0)
        inputs, out = {"x": [1, 2, 6, 6]}, [1, K - 1, 6, 6]
    elif case == "x_read_elsewhere_is_kept":
        nodes, inits = _conv_model(extra=[helper.make_node("Relu", ["xd"], ["z"])])
        extra_out = {"z": X4["x"]}
    elif case == "output_read_elsewhere":
        nodes, inits = _conv_model(extra=[helper.make_node("Relu", ["h"], ["z"])])
        extra_out = {"z": Y4}
    else:
        inits = _inits((K, C * 9), 0)
        nodes = _group("Gemm", {"transB": 1, "alpha": 0.5}, 0)
        inputs, out = {"x": [3, C * 9]}, [3, K]
    nodes = _constant_bias_scale(nodes, inits)
    m = model(nodes, inputs, {"y": out, **extra_out}, inits)
    g = qdq_fuse(graph_of(m))
    fused = ops(g)["QConvU8S8"] + ops(g)["QGemmU8S8"]
    if case == "x_read_elsewhere_is_kept":
        assert fused == 1 and ops(g)["DequantizeLinear"] >= 2  # the DQ of x stays for its other reader
    elif case == "output_read_elsewhere":
        assert fused == 1 and ops(g)["QuantizeLinear"] == 2  # the conv writes float32; Q and Relu read it
    else:
        assert fused == 0
    ours, theirs = _run_both(m, g, tmp_path, _feeds(inputs["x"]))
    for a, b in zip(ours, theirs):
        assert np.abs(a - b).max() <= 0.04 * 1.001 + 1e-4


@pytest.mark.op_test("QLutU8")
@pytest.mark.parametrize("relu", [False, True])
def test_dequantize_batchnorm_quantize_is_a_table_with_the_unfused_bytes(tmp_path, relu):
    """DQ -> BatchNormalization [-> Relu] -> Q becomes QLutU8: byte-identical to the unfused engine steps
    (the table holds what they compute), within one step of onnxruntime's own fp32 BatchNormalization."""
    c = 6
    inits = {"xs": np.float32(0.03), "xz": np.uint8(118), "ys": np.float32(0.05), "yz": np.uint8(0),
             "ys2": np.float32(0.04), "yz2": np.uint8(131), "g": RNG.uniform(0.5, 2, c).astype(np.float32),
             "b": RNG.standard_normal(c).astype(np.float32), "mu": RNG.standard_normal(c).astype(np.float32),
             "var": RNG.uniform(0.5, 2, c).astype(np.float32)}
    ys, yz = ("ys", "yz") if relu else ("ys2", "yz2")
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("BatchNormalization", ["xd", "g", "b", "mu", "var"], ["h"], epsilon=1e-3)]
    last = "h"
    if relu:
        nodes.append(helper.make_node("Relu", ["h"], ["hr"]))
        last = "hr"
    nodes += [helper.make_node("QuantizeLinear", [last, ys, yz], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", ys, yz], ["y"])]
    shape = [2, c, 7, 5]
    m = model(nodes, {"x": shape}, {"y": shape}, inits)
    g = qdq_fuse(graph_of(m))
    assert ops(g)["QLutU8"] == 1 and "BatchNormalization" not in ops(g) and "Relu" not in ops(g)
    feeds = _feeds(shape)
    ours, theirs = _run_both(m, g, tmp_path, feeds)
    path = tmp_path / "unfused.aie"
    aie_format.write(path, graph_of(m), {})
    assert np.array_equal(ours[0], InferenceSession(path, threads=1).run(None, feeds)[0])
    assert np.abs(ours[0] - theirs[0]).max() <= float(inits[ys]) * 1.001


def _unfused(m, tmp_path, feeds):
    """The model's own DequantizeLinear / fp32 / QuantizeLinear steps, no qdq_fuse."""
    path = tmp_path / "unfused.aie"
    aie_format.write(path, graph_of(m), {})
    return InferenceSession(path, threads=1).run(None, feeds)


@pytest.mark.op_test("QAddU8")
@pytest.mark.parametrize("relu,b_shape,y_zero", [(True, [2, 6, 61, 53], 0), (False, [2, 6, 61, 53], 131),
                                                 (False, [53], 131), (True, [1, 6, 1, 1], 0), (True, [2, 6, 61, 53], 9)])
def test_quantised_residual_add_is_onnxruntimes_qlinear_add(tmp_path, relu, b_shape, y_zero):
    """DQ(a) + DQ(b) [-> Relu] -> Q, all uint8 per tensor, becomes QAddU8. Where QADD_U8 reads the
    broadcast (same shapes, a trailing block) it is onnxruntime's QLinearAdd byte for byte (what
    onnxruntime runs for the group; the Relu before a zero point of 0 is the saturation), within one
    step of the unfused engine steps; another broadcast runs the unfused steps' bytes, within one step
    of onnxruntime. A Relu before a zero point other than 0 keeps the steps' arithmetic, in one
    QADD_U8 pass (onnxruntime runs those steps unfused)."""
    inits = {"as": np.float32(0.03), "az": np.uint8(118), "bs": np.float32(0.045), "bz": np.uint8(7),
             "ys": np.float32(0.05), "yz": np.uint8(y_zero)}
    nodes = [helper.make_node("QuantizeLinear", ["a", "as", "az"], ["aq"]),
             helper.make_node("DequantizeLinear", ["aq", "as", "az"], ["ad"]),
             helper.make_node("QuantizeLinear", ["b", "bs", "bz"], ["bq"]),
             helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"]),
             helper.make_node("Add", ["ad", "bd"], ["h"])]
    last = "h"
    if relu:
        nodes.append(helper.make_node("Relu", ["h"], ["hr"]))
        last = "hr"
    nodes += [helper.make_node("QuantizeLinear", [last, "ys", "yz"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    shape = [2, 6, 61, 53]  # three of QADD_U8's chunks, over 2 threads
    m = model(nodes, {"a": shape, "b": b_shape}, {"y": shape}, inits)
    g = qdq_fuse(graph_of(m))
    assert ops(g)["QAddU8"] == 1 and "Add" not in ops(g) and "Relu" not in ops(g)
    # inputs on the quantisation grids: the input QuantizeLinears have no tie to round differently
    feeds = {"a": ((RNG.integers(0, 256, shape) - 118) * inits["as"]).astype(np.float32),
             "b": ((RNG.integers(0, 256, b_shape) - 7) * inits["bs"]).astype(np.float32)}
    feeds["b"].flat[0] = (255 - 7) * inits["bs"]  # with a's top values: past 255, saturated
    ours, theirs = _run_both(m, g, tmp_path, feeds)
    unfused = _unfused(m, tmp_path, feeds)[0]
    step = float(inits["ys"]) * 1.001
    steps = b_shape[0] == 1 or (relu and y_zero)
    same, other = (unfused, theirs[0]) if steps else (theirs[0], unfused)
    assert np.array_equal(ours[0], same)
    assert np.abs(ours[0] - other).max() <= step
    q = np.rint(ours[0] / inits["ys"]) + float(inits["yz"])
    assert q.max() == 255  # saturated


@pytest.mark.op_test("QConvU8S8")
def test_a_table_after_a_uint8_conv_joins_the_conv_with_the_unfused_bytes(tmp_path):
    """Conv -> Q -> DQ -> BatchNormalization -> Relu -> Q: the QLutU8 is applied in the conv's output stage
    (one node, no pass over the tensor), byte-identical to the unfused steps."""
    nodes, inits = _conv_model(relu=False, y_zero="yz2")
    nodes = _constant_bias_scale(nodes, inits)
    nodes = [n for n in nodes if n.output[0] != "y"]  # the group's last DequantizeLinear, re-made below
    inits.update({"g": RNG.uniform(0.5, 2, K).astype(np.float32), "b": RNG.standard_normal(K).astype(np.float32),
                  "mu": RNG.standard_normal(K).astype(np.float32), "var": RNG.uniform(0.5, 2, K).astype(np.float32)})
    nodes += [helper.make_node("DequantizeLinear", ["yq", "ys2", "yz2"], ["yd"]),
              helper.make_node("BatchNormalization", ["yd", "g", "b", "mu", "var"], ["bn"]),
              helper.make_node("Relu", ["bn"], ["bnr"]),
              helper.make_node("QuantizeLinear", ["bnr", "ys", "yz"], ["zq"]),
              helper.make_node("DequantizeLinear", ["zq", "ys", "yz"], ["y"])]
    m = model(nodes, X4, {"y": Y4}, inits)
    g = qdq_fuse(graph_of(m))
    (conv,) = [n for n in g.nodes if n.op == "QConvU8S8"]
    assert "QLutU8" not in ops(g) and len(conv.inputs) == 9 and conv.outputs == ["zq"]
    feeds = _feeds(X4["x"])
    ours, _ = _run_both(m, g, tmp_path, feeds)
    assert np.array_equal(ours[0], _unfused(m, tmp_path, feeds)[0])


@pytest.mark.op_test("QSoftmaxU8")
@pytest.mark.parametrize("y_scale", [1 / 255, 1 / 256])
def test_quantised_softmax_is_onnxruntimes_qlinear_softmax(tmp_path, y_scale):
    """DQ(uint8) -> Softmax -> Q(uint8) becomes QSoftmaxU8, one pass, byte for byte what onnxruntime
    runs for the group (QLinearSoftmax). With y_scale float32(1/255) onnxruntime multiplies by 254,
    not 255: the unfused steps (the ONNX definition) are then up to one step higher."""
    inits = {"xs": np.float32(0.06), "xz": np.uint8(131), "ys": np.float32(y_scale), "yz": np.uint8(0)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("Softmax", ["xd"], ["p"], axis=-1),
             helper.make_node("QuantizeLinear", ["p", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    shape = [2, 3, 37, 41]
    m = model(nodes, {"x": shape}, {"y": shape}, inits)
    g = qdq_fuse(graph_of(m))
    assert ops(g)["QSoftmaxU8"] == 1 and "Softmax" not in ops(g)
    # inputs on the quantisation grid: the input QuantizeLinear has no tie to round differently
    feeds = {"x": ((RNG.integers(0, 256, shape) - 131) * inits["xs"]).astype(np.float32)}
    ours, theirs = _run_both(m, g, tmp_path, feeds)
    np.testing.assert_array_equal(ours[0], theirs[0])
    unfused = _unfused(m, tmp_path, feeds)[0]
    assert np.abs(ours[0] - unfused).max() <= y_scale * 1.001
    if y_scale == 1 / 255:
        assert not np.array_equal(ours[0], unfused)  # the floor shows
