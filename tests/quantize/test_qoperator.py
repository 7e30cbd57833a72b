"""The QOperator integer ops (engine/ops/qoperator.py) against onnx.reference,
bit for bit, on random data: odd sizes, K past the 258-product float32
partial sums (the int32 chunking), per-row / per-column / per-channel zero
points, int8 and uint8 activations, grouped and depthwise convolutions with
pads, strides and dilations; QLinearAdd / QLinearMul (com.microsoft) against
onnxruntime, their only oracle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from engine.session import InferenceSession
from tests.int8_reference import ORT_INT8_EXACT_AT_FULL_RANGE, int_matmul, ort_exact_weights, requantize_u8
from tests.runtime.op_oracle import check_op

RNG = np.random.default_rng(12)


def _q(dtype, shape):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.op_test("MatMulInteger")
@pytest.mark.parametrize("a_dtype,b_dtype", [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)])
def test_matmul_integer_is_exact_past_one_partial_sum(tmp_path, a_dtype, b_dtype):
    m, k, n = 5, 601, 7
    a, b = _q(a_dtype, (2, m, k)), _q(b_dtype, (k, n))
    # Extreme operands: every product at its largest, where a float32 sum would round.
    feeds = {"A": a, "B": b, "a_zero_point": _q(a_dtype, (m,)), "b_zero_point": _q(b_dtype, (n,))}
    a[:, 0], feeds["a_zero_point"][0] = np.iinfo(a_dtype).min, np.iinfo(a_dtype).max
    b[:, 0], feeds["b_zero_point"][0] = np.iinfo(b_dtype).max, np.iinfo(b_dtype).min
    # onnx.reference does not broadcast a per-row a_zero_point (the spec allows one): an int64 oracle.
    want = (a.astype(np.int64) - feeds["a_zero_point"].astype(np.int64)[:, None]) \
        @ (b.astype(np.int64) - feeds["b_zero_point"].astype(np.int64))
    (y,) = check_op(tmp_path, "MatMulInteger", feeds, opset=21, oracle=lambda f: [want.astype(np.int32)])
    assert y.dtype == np.int32 and np.abs(y).max() > 2 ** 24


@pytest.mark.op_test("QLinearMatMul")
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_matmul_run_time_weights(tmp_path, dtype):
    a, b = _q(dtype, (3, 4, 300)), _q(dtype, (300, 9))
    feeds = {"a": a, "a_scale": np.float32(0.02), "a_zero_point": _q(dtype, ()),
             "b": b, "b_scale": np.float32(0.013), "b_zero_point": _q(dtype, ()),
             "y_scale": np.float32(0.1), "y_zero_point": _q(dtype, ())}
    (y,) = check_op(tmp_path, "QLinearMatMul", feeds, opset=21)
    assert y.min() == np.iinfo(dtype).min or y.max() == np.iinfo(dtype).max  # saturation reached


@pytest.mark.op_test("ConvInteger")
def test_conv_integer_grouped_strided_dilated_padded(tmp_path):
    x, w = _q(np.uint8, (2, 6, 11, 9)), _q(np.uint8, (4, 3, 3, 2))
    feeds = {"x": x, "w": w, "x_zero_point": np.uint8(131), "w_zero_point": _q(np.uint8, (4,))}
    attrs = {"group": 2, "strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 2, 1]}
    check_op(tmp_path, "ConvInteger", feeds, attrs, opset=21)


@pytest.mark.op_test("QLinearConv")
@pytest.mark.parametrize("dtype,c,group", [(np.uint8, 300, 1), (np.int8, 5, 1), (np.uint8, 7, 7)])
def test_qlinear_conv_per_channel_with_bias(tmp_path, dtype, c, group):
    """Dense with C past one partial sum, int8 activations, and depthwise."""
    k = 4 if group == 1 else c
    x, w = _q(dtype, (1, c, 6, 7)), _q(np.int8, (k, c // group, 3, 3))
    consts = {"w": w, "w_scale": (RNG.random(k) * 0.02 + 1e-3).astype(np.float32),
              "w_zero_point": np.zeros(k, np.int8), "B": RNG.integers(-5000, 5000, k).astype(np.int32)}
    feeds = {"x": x, "x_scale": np.float32(0.05), "x_zero_point": _q(dtype, ()), "w": w,
             "w_scale": consts["w_scale"], "w_zero_point": consts["w_zero_point"],
             "y_scale": np.float32(0.9 if c > 100 else 0.2), "y_zero_point": _q(dtype, ()), "B": consts["B"]}
    attrs = {"group": group, "pads": [1, 1, 1, 1], "strides": [1, 2]}
    check_op(tmp_path, "QLinearConv", feeds, attrs, constants=consts, opset=21)


def _plan_ops(model_path) -> list[str]:
    from engine.onnx_import import import_file
    from engine.passes import run_passes

    graph, _ = run_passes(import_file(model_path))
    return [n.op for n in graph.nodes]


def _plan_steps(model_path, feeds) -> list[str]:
    """The names of the plan's steps for these feeds, in order."""
    from engine.kernels.abi import Op

    sess = InferenceSession(model_path, threads=1)
    sess.run(None, feeds)
    return [Op(int(op)).name for op in sess.plans()[0].steps[:, 0]]


@pytest.mark.op_test("QLinearConv", "ConvInteger", "QLinearMatMul", "MatMulInteger")
@pytest.mark.parametrize("level", ["scalar", "avx2", "avx_vnni", "avx512_vnni", "amx"])
def test_constant_int8_weights_run_on_the_int8_kernels(tmp_path, level):
    """What onnxruntime's QOperator quantiser writes (int8 constant weights, zero point 0,
    uint8 activations): fused onto CONV_U8S8 / CONV_U8S8_DW (depthwise) / GEMM_U8S8_PACKED,
    bit-exact at every level."""
    from engine import kernels

    why = kernels.level_unsupported(level)
    if why is not None:
        pytest.skip(f"level {level} unavailable on this host: {why}")
    x, w = _q(np.uint8, (2, 13, 7, 6)), _q(np.int8, (5, 13, 3, 3))
    a, b = _q(np.uint8, (3, 4, 301)), _q(np.int8, (301, 17))
    cases = [
        ("ConvInteger", {"x": x, "w": w, "x_zero_point": np.uint8(77)}, {"pads": [1, 0, 1, 2], "strides": [2, 1]},
         ["w", "x_zero_point"], "QConvU8S8"),
        ("QLinearConv", {"x": x, "x_scale": np.float32(0.04), "x_zero_point": np.uint8(9), "w": w,
                         "w_scale": (RNG.random(5) * 0.01 + 1e-3).astype(np.float32), "w_zero_point": np.zeros(5, np.int8),
                         "y_scale": np.float32(0.3), "y_zero_point": np.uint8(128),
                         "B": RNG.integers(-3000, 3000, 5).astype(np.int32)},
         {"dilations": [2, 1], "pads": [2, 1, 2, 1]}, ["x_scale", "x_zero_point", "w", "w_scale", "w_zero_point",
                                                       "y_scale", "y_zero_point", "B"], "QConvU8S8"),
        ("ConvInteger", {"x": x, "w": _q(np.int8, (13, 1, 3, 5)), "x_zero_point": np.uint8(3)},
         {"group": 13, "pads": [1, 2, 1, 2], "strides": [1, 2]}, ["w", "x_zero_point"], "QConvU8S8"),
        ("QLinearConv", {"x": x, "x_scale": np.float32(0.04), "x_zero_point": np.uint8(200),
                         "w": _q(np.int8, (13, 1, 3, 3)), "w_scale": (RNG.random(13) * 0.01 + 1e-3).astype(np.float32),
                         "w_zero_point": np.zeros(13, np.int8), "y_scale": np.float32(0.05),
                         "y_zero_point": np.uint8(7), "B": RNG.integers(-3000, 3000, 13).astype(np.int32)},
         {"group": 13, "dilations": [2, 2], "pads": [2, 2, 2, 2]},
         ["x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point", "B"], "QConvU8S8"),
        ("MatMulInteger", {"A": a, "B": b, "a_zero_point": np.uint8(200), "b_zero_point": np.int8(0)}, {},
         ["B", "a_zero_point", "b_zero_point"], "QGemmU8S8"),
        ("QLinearMatMul", {"a": a, "a_scale": np.float32(0.02), "a_zero_point": np.uint8(3), "b": b,
                           "b_scale": np.float32(0.01), "b_zero_point": np.int8(0), "y_scale": np.float32(0.2),
                           "y_zero_point": np.uint8(90)}, {},
         ["a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"], "QGemmU8S8"),
    ]
    with kernels.use_level(level):
        for op, feeds, attrs, const_names, fused in cases:
            sub = tmp_path / op
            sub.mkdir(exist_ok=True)
            (y,) = check_op(sub, op, feeds, attrs, constants={n: feeds[n] for n in const_names}, opset=21)
            ops = _plan_ops(sub / f"{op}.onnx")
            assert fused in ops and op not in ops, ops
            assert y.dtype == (np.int32 if op.endswith("Integer") else np.uint8)


def test_a_non_integer_operand_is_one_clear_line(tmp_path):
    from engine.errors import ConversionError

    feeds = {"A": RNG.standard_normal((2, 3)).astype(np.float32), "B": _q(np.int8, (3, 2))}
    with pytest.raises(ConversionError, match=r"MatMulInteger .*A dtype float32 not supported"):
        check_op(tmp_path, "MatMulInteger", feeds, opset=21, oracle=lambda f: [np.zeros((2, 2), np.int32)])


ort = pytest.importorskip("onnxruntime", reason="onnxruntime (the oracle of the com.microsoft ops) is not installed")


def _one_node(path: Path, node, inputs: list, outputs: list, inits: dict, opsets=(("", 17), ("com.microsoft", 1))) -> Path:
    """Save a model of one node: `inputs`/`outputs` are value infos, `inits` {name: array} its initializers."""
    graph = helper.make_graph([node], node.op_type, inputs, outputs,
                              [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets]), str(path))
    return path


def _ort(path: Path, feeds: dict) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.op_test("QLinearAdd", "QLinearMul")
@pytest.mark.parametrize("op,a_shape,b_shape", [("QLinearAdd", (2, 3, 17, 19), (1, 3, 1, 19)),
                                                ("QLinearAdd", (2, 3, 17, 19), (19,)),
                                                ("QLinearAdd", (2, 3, 17, 19), (2, 3, 17, 19)),
                                                ("QLinearAdd", (2, 3, 17, 19), ()),
                                                ("QLinearAdd", (), (5, 7)),
                                                ("QLinearMul", (2, 3, 17, 19), (1, 3, 1, 19)),
                                                ("QLinearMul", (2, 3, 17, 19), (2, 3, 17, 19)),
                                                ("QLinearMul", (2, 3, 17, 19), (19,))])
def test_microsoft_qlinear_binary_matches_onnxruntime(tmp_path, op, a_shape, b_shape):
    """A uint8 QLinearAdd / QLinearMul whose broadcast QADD_U8 reads (same shapes, a trailing block,
    one element) is one pass, onnxruntime's bytes (saturating at both ends); other broadcasts are
    composed in float32: one step from onnxruntime where MLAS's fused multiply-adds round a tie
    differently."""
    names = ["A", "A_scale", "A_zero_point", "B", "B_scale", "B_zero_point", "C_scale", "C_zero_point"]
    a, b = _q(np.uint8, a_shape), _q(np.uint8, b_shape)
    one_pass = b_shape != (1, 3, 1, 19)
    params = {"A_scale": np.float32(0.031), "A_zero_point": np.uint8(120), "B_scale": np.float32(0.017),
              "B_zero_point": np.uint8(3), "C_scale": np.float32(0.02 if one_pass or op == "QLinearMul" else 0.05),
              "C_zero_point": np.uint8(100)}
    out_shape = np.broadcast_shapes(a_shape, b_shape)
    path = _one_node(tmp_path / f"{op}.onnx", helper.make_node(op, names, ["C"], domain="com.microsoft"),
                     [helper.make_tensor_value_info("A", onnx.TensorProto.UINT8, a.shape),
                      helper.make_tensor_value_info("B", onnx.TensorProto.UINT8, b.shape)],
                     [helper.make_tensor_value_info("C", onnx.TensorProto.UINT8, out_shape)], params)
    want = _ort(path, {"A": a, "B": b})
    got = InferenceSession(path, threads=1).run(None, {"A": a, "B": b})[0]
    assert got.dtype == np.uint8 and got.shape == want.shape
    assert ("QADD_U8" in _plan_steps(path, {"A": a, "B": b})) == one_pass
    if one_pass:
        assert {0, 255} <= set(np.unique(want)) or a.size != b.size  # both saturations reached
        np.testing.assert_array_equal(got, want)
        return
    diff = np.abs(got.astype(np.int32) - want)
    assert diff.max() <= 1 and np.count_nonzero(diff) <= diff.size // 100, (diff.max(), np.count_nonzero(diff))


@pytest.mark.op_test("QLinearAdd")
@pytest.mark.parametrize("a_value", [0, 141, 255])
def test_microsoft_qlinear_add_of_one_byte_a_is_onnxruntimes(tmp_path, a_value):
    """A one-element A against every B byte: onnxruntime hands a one-element A to MLAS as B, so
    its fixed part forms the zero-point terms in the swapped order; with a = 141 three bytes of B
    sit on ties that show the order."""
    names = ["A", "A_scale", "A_zero_point", "B", "B_scale", "B_zero_point", "C_scale", "C_zero_point"]
    params = {"A_scale": np.float32(0.031), "A_zero_point": np.uint8(120), "B_scale": np.float32(0.017),
              "B_zero_point": np.uint8(3), "C_scale": np.float32(0.02), "C_zero_point": np.uint8(100)}
    feeds = {"A": np.asarray(a_value, np.uint8), "B": np.arange(256, dtype=np.uint8).reshape(16, 16)}
    path = _one_node(tmp_path / "qadd.onnx", helper.make_node("QLinearAdd", names, ["C"], domain="com.microsoft"),
                     [helper.make_tensor_value_info("A", onnx.TensorProto.UINT8, ()),
                      helper.make_tensor_value_info("B", onnx.TensorProto.UINT8, (16, 16))],
                     [helper.make_tensor_value_info("C", onnx.TensorProto.UINT8, (16, 16))], params)
    assert _plan_steps(path, feeds) == ["QADD_U8"]
    np.testing.assert_array_equal(InferenceSession(path, threads=1).run(None, feeds)[0], _ort(path, feeds))


@pytest.mark.op_test("QGemm")
@pytest.mark.parametrize("quantised_out", [True, False])
@pytest.mark.parametrize("constant_b", [True, False])
def test_microsoft_qgemm_matches_onnxruntime(tmp_path, quantised_out, constant_b):
    """QGemm (what the QOperator quantiser writes for a Gemm): transB, int32 C, a uint8 output or,
    without y_scale, float32. Constant int8 B runs on GEMM_U8S8_PACKED, run-time B composed. B in
    the range onnxruntime sums exactly on this CPU; at full range, against exact integer sums."""
    m, k, n = 3, 300, 11
    a, b_full = _q(np.uint8, (m, k)), _q(np.int8, (n, k))
    b = b_full if ORT_INT8_EXACT_AT_FULL_RANGE else ort_exact_weights(RNG, (n, k))
    params = {"a_scale": np.float32(0.02), "a_zero_point": np.uint8(131), "B": b,
              "b_scale": (RNG.random(n) * 0.01 + 1e-3).astype(np.float32), "b_zero_point": np.zeros(n, np.int8),
              "C": RNG.integers(-20000, 20000, n).astype(np.int32)}
    if quantised_out:
        params |= {"y_scale": np.float32(0.5), "y_zero_point": np.uint8(100)}
    names = ["A", "a_scale", "a_zero_point", "B", "b_scale", "b_zero_point", "C"] + \
        (["y_scale", "y_zero_point"] if quantised_out else [])
    inits = {k_: v for k_, v in params.items() if constant_b or k_ != "B"}
    inputs = [helper.make_tensor_value_info("A", onnx.TensorProto.UINT8, a.shape)]
    if not constant_b:
        inputs.append(helper.make_tensor_value_info("B", onnx.TensorProto.INT8, b.shape))
    out_type = onnx.TensorProto.UINT8 if quantised_out else onnx.TensorProto.FLOAT
    path = _one_node(tmp_path / "qgemm.onnx", helper.make_node("QGemm", names, ["Y"], domain="com.microsoft", transB=1),
                     inputs, [helper.make_tensor_value_info("Y", out_type, (m, n))], inits)
    feeds = {"A": a} if constant_b else {"A": a, "B": b}
    want = _ort(path, feeds)
    got = InferenceSession(path, threads=1).run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    assert ("QGemmU8S8" in _plan_ops(path)) == constant_b
    if quantised_out:
        np.testing.assert_array_equal(got, want)  # the same float32 requantisation as onnxruntime
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    feeds = {"A": a} if constant_b else {"A": a, "B": b_full}
    if constant_b:
        path = _one_node(tmp_path / "qgemm_full.onnx", helper.make_node("QGemm", names, ["Y"], domain="com.microsoft",
                                                                        transB=1),
                         inputs, [helper.make_tensor_value_info("Y", out_type, (m, n))], inits | {"B": b_full})
    got = InferenceSession(path, threads=1).run(None, feeds)[0]
    acc = int_matmul(a, params["a_zero_point"], b_full.T) + params["C"]
    if quantised_out:
        np.testing.assert_array_equal(got, requantize_u8(acc, params["a_scale"], params["b_scale"], params["y_scale"],
                                                         params["y_zero_point"]))
    else:
        exact = acc * (np.float64(params["a_scale"]) * params["b_scale"].astype(np.float64))
        np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-4)


def qsoftmax_reference(x: np.ndarray, x_scale, y_scale, y_zero) -> np.ndarray:
    """onnxruntime's QLinearSoftmax (uint8, last axis) in numpy, operation for operation: the float32
    exp table, float32 row sums in element order, nearbyint(t * floor(1 / y_scale) / sum) + zero."""
    d = x.shape[-1]
    shift = max(0.0, float(np.log(np.float64(np.finfo(np.float32).max) / d)) - 5) / np.float64(np.float32(x_scale))
    table = np.exp((np.arange(256) - 255 + shift) * np.float64(np.float32(x_scale))).astype(np.float32)
    t = table[x.astype(np.int64) + 255 - x.max(-1, keepdims=True)]
    total = np.zeros(x.shape[:-1], np.float32)
    for i in range(d):
        total = (total + t[..., i]).astype(np.float32)
    m = np.float32(np.floor(np.float32(1) / np.float32(y_scale)))
    with np.errstate(over="ignore"):
        p = (t * m).astype(np.float32)
    p = np.where(np.isinf(p), (t / total[..., None]).astype(np.float32) * m, p / total[..., None])
    q = np.rint(p.astype(np.float32)).astype(np.int64) + int(y_zero)
    return np.minimum(q, 255).astype(np.uint8)


@pytest.mark.op_test("QLinearSoftmax")
@pytest.mark.parametrize("shape,x_scale,y_scale,y_zero", [((2, 4, 7, 33), 0.08, 1 / 256, 0),
                                                          ((3, 67, 128), 0.04, 1 / 255, 0),
                                                          ((5, 1), 0.3, 1 / 200, 17),
                                                          ((9, 2), 0.5, 1 / 256, 60)])
def test_microsoft_qlinear_softmax_is_onnxruntimes(tmp_path, shape, x_scale, y_scale, y_zero):
    """uint8 QLinearSoftmax is one QSOFTMAX_U8 pass, byte for byte onnxruntime's (and its numpy
    transcription): float32(1/255) gives the multiplier 254, a zero point saturates at 255, 67 x 3
    rows cross the kernel's tasks of 64, rows of one element overflow t * m."""
    x = _q(np.uint8, shape)
    params = {"X_scale": np.float32(x_scale), "X_zero_point": np.uint8(140), "Y_scale": np.float32(y_scale),
              "Y_zero_point": np.uint8(y_zero)}
    node = helper.make_node("QLinearSoftmax", ["X", *params], ["Y"], domain="com.microsoft", axis=-1, opset=17)
    path = _one_node(tmp_path / "qsoftmax.onnx", node, [helper.make_tensor_value_info("X", onnx.TensorProto.UINT8, x.shape)],
                     [helper.make_tensor_value_info("Y", onnx.TensorProto.UINT8, x.shape)], params)
    want = _ort(path, {"X": x})
    got = InferenceSession(path, threads=2).run(None, {"X": x})[0]
    assert _plan_steps(path, {"X": x}) == ["QSOFTMAX_U8"]
    np.testing.assert_array_equal(qsoftmax_reference(x, x_scale, y_scale, y_zero), want)
    np.testing.assert_array_equal(got, want)


@pytest.mark.op_test("QLinearMatMul")
@pytest.mark.parametrize("a_shape,b_shape,y_scale", [((2, 3, 13, 37), (2, 3, 37, 19), 0.17), ((5, 70, 9), (9, 33), 0.02)])
def test_qlinear_matmul_of_two_uint8_tensors_is_one_step(tmp_path, a_shape, b_shape, y_scale):
    """uint8 x uint8 run-time operands with constant per-tensor parameters (attention's products in
    a quantised transformer): one QMATMUL_U8 step, rows across its tasks of 8, B batched or 2-D,
    both saturations; byte for byte onnx.reference and onnxruntime."""
    from onnx.reference import ReferenceEvaluator

    a, b = _q(np.uint8, a_shape), _q(np.uint8, b_shape)
    params = {"a_scale": np.float32(0.021), "a_zero_point": np.uint8(131), "b_scale": np.float32(0.013),
              "b_zero_point": np.uint8(97), "y_scale": np.float32(y_scale), "y_zero_point": np.uint8(121)}
    names = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"]
    out_shape = a_shape[:-1] + b_shape[-1:]
    path = _one_node(tmp_path / "qmm.onnx", helper.make_node("QLinearMatMul", names, ["y"]),
                     [helper.make_tensor_value_info("a", onnx.TensorProto.UINT8, a_shape),
                      helper.make_tensor_value_info("b", onnx.TensorProto.UINT8, b_shape)],
                     [helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, out_shape)], params, opsets=(("", 21),))
    feeds = {"a": a, "b": b}
    got = InferenceSession(path, threads=2).run(None, feeds)[0]
    assert _plan_steps(path, feeds) == ["QMATMUL_U8"]
    want = ReferenceEvaluator(str(path)).run(None, feeds)[0]
    assert {0, 255} <= set(np.unique(want))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, _ort(path, feeds))


@pytest.mark.op_test("QLinearGlobalAveragePool")
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shape,channels_last", [((2, 5, 7, 9), 0), ((1, 512, 7, 7), 0), ((3, 4, 6, 11), 1),
                                                 ((2, 3, 13), 0)])
def test_microsoft_qlinear_global_average_pool_is_onnxruntimes(tmp_path, dtype, shape, channels_last):
    """What onnxruntime's quantiser writes for ResNet's GlobalAveragePool (QOperator format):
    byte for byte onnxruntime's, NCHW and channels last, 1-D and 2-D windows."""
    x = _q(dtype, shape)
    zero = np.uint8(131) if dtype == np.uint8 else np.int8(-7)
    params = {"x_scale": np.float32(0.043), "x_zero_point": zero, "y_scale": np.float32(0.0171),
              "y_zero_point": np.asarray(zero + 3 if dtype == np.uint8 else zero - 5, dtype)}
    out_shape = (shape[0], 1, 1, shape[-1]) if channels_last else (*shape[:2], *[1] * (len(shape) - 2))
    elem = onnx.TensorProto.UINT8 if dtype == np.uint8 else onnx.TensorProto.INT8
    node = helper.make_node("QLinearGlobalAveragePool", ["X", *params], ["Y"], domain="com.microsoft",
                            channels_last=channels_last)
    path = _one_node(tmp_path / "qgap.onnx", node, [helper.make_tensor_value_info("X", elem, x.shape)],
                     [helper.make_tensor_value_info("Y", elem, out_shape)], params)
    want = _ort(path, {"X": x})
    got = InferenceSession(path, threads=2).run(None, {"X": x})[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
