"""Static post-training quantisation (`ai-engine quantize`, engine.quantize):
the QDQ model it writes runs the same in ai-engine, onnx.reference and
onnxruntime; digits keeps its held-out accuracy; bad input is one specific
error and writes nothing."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.errors import ConversionError
from engine.quantize import QuantizeOptions, quantize_file
from engine.quantize.qdq import activation_params, quantise_weight
from engine.session import InferenceSession
from tests.int8_reference import ORT_INT8_EXACT_AT_FULL_RANGE

F = TensorProto.FLOAT


def small_cnn(path, opset=17, seed=0):
    """Conv -> Relu -> Conv (stride 2) -> GlobalAveragePool -> Flatten -> Gemm
    -> MatMul with an activation on both sides: every quantisable kind."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3, "w1"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "b1"),
             numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2, "w2"),
             numpy_helper.from_array(rng.standard_normal((16, 5)).astype(np.float32) * 0.5, "fc"),
             numpy_helper.from_array(rng.standard_normal(5).astype(np.float32) * 0.1, "fcb")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"]),
             helper.make_node("Transpose", ["f"], ["ft"]),
             helper.make_node("MatMul", ["ft", "f"], ["gram"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", F, ["N", 3, 9, 9])],
                          [helper.make_tensor_value_info("logits", F, ["N", 5]),
                           helper.make_tensor_value_info("gram", F, [16, 16])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(model, str(path))
    return path


@pytest.fixture
def cnn(tmp_path):
    src = small_cnn(tmp_path / "cnn.onnx")
    cal = tmp_path / "cal.npy"
    np.save(cal, np.random.default_rng(1).standard_normal((16, 3, 9, 9)).astype(np.float32))
    return src, cal


def test_weights_are_int8_symmetric_per_channel_within_half_a_step():
    w = np.random.default_rng(2).standard_normal((7, 5, 3)).astype(np.float32) * np.arange(1, 8)[:, None, None]
    w[3] = 0.0                                       # an all-zero channel must not divide by zero
    q, scale = quantise_weight(w, axis=0)
    assert q.dtype == np.int8 and q.min() >= -127 and q.max() <= 127 and scale.shape == (7,)
    assert scale[3] == 1.0 and not q[3].any()
    assert np.all(np.abs(q.astype(np.float64) * scale[:, None, None] - w) <= scale[:, None, None] / 2 + 1e-7)
    assert all(np.abs(q[c]).max() == 127 for c in range(7) if c != 3)   # the range is used in full


def test_activation_range_holds_zero_exactly():
    for lo, hi in ((-1.5, 3.0), (0.2, 4.0), (-3.0, -0.5), (0.0, 0.0)):
        scale, zp = activation_params(lo, hi)
        assert 0 <= int(zp) <= 255
        # 0.0 quantises to the zero point and back to exactly 0.0 (padding, ReLU zeros).
        assert float(scale) * (int(np.clip(np.rint(0.0 / float(scale)) + int(zp), 0, 255)) - int(zp)) == 0.0


def test_cnn_quantised_runs_the_same_in_aie_reference_and_onnxruntime(cnn, tmp_path):
    from onnx.reference import ReferenceEvaluator
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the test oracle")

    src, cal = cnn
    dst = tmp_path / "cnn.int8.onnx"
    result = quantize_file(src, cal, dst, QuantizeOptions(method="percentile", percentile=99.9))
    q = onnx.load(str(dst))
    onnx.checker.check_model(q)
    ops = [n.op_type for n in q.graph.node]
    assert result.nodes == {"Conv": 2, "Gemm": 1, "MatMul": 1}
    assert ops.count("QuantizeLinear") == 4          # x, r1, f, ft: each activation once (f feeds two ops)
    assert {i.data_type for i in q.graph.initializer if i.name.endswith("_quantized")} == {TensorProto.INT8}
    assert not {"w1", "w2", "fc"} & {i.name for i in q.graph.initializer}   # fp32 weights are gone
    x = np.random.default_rng(3).standard_normal((4, 3, 9, 9)).astype(np.float32)
    ours = InferenceSession(dst, threads=1).run(None, {"x": x})
    # onnx.reference implements DequantizeLinear from opset 19 on; none of
    # this graph's ops changed meaning between 17 and 19.
    q19 = onnx.ModelProto()
    q19.CopyFrom(q)
    next(o for o in q19.opset_import if o.domain == "").version = 19
    ref = ReferenceEvaluator(q19).run(None, {"x": x})
    # Our weights use all of -127..127: where onnxruntime's int8 kernels saturate (no VNNI,
    # tests/int8_reference.py) it runs the QDQ steps unfused, in float32.
    options = ort.SessionOptions()
    if not ORT_INT8_EXACT_AT_FULL_RANGE:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    theirs = ort.InferenceSession(str(dst), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for o, r, t in zip(ours, ref, theirs):
        scale = float(np.abs(r).max())
        np.testing.assert_allclose(o, r, rtol=0, atol=1e-5 * scale)
        # onnxruntime may run its int8 kernels: a requantised result, within a step of the output's range.
        np.testing.assert_allclose(t, r, rtol=0, atol=0.02 * scale)
    assert result.accuracy.samples == 16 and 0 < result.accuracy.max_rel_err < 0.1
    assert result.accuracy.cosine > 0.99


def test_digits_keeps_its_heldout_accuracy_within_half_a_point(zoo, tmp_path):
    from models import digits, digits_data

    src = zoo("digits")
    cal = tmp_path / "cal.npy"
    np.save(cal, digits_data.render(300, 2024)[0].astype(np.float32))   # not the held-out set
    dst = tmp_path / "digits.int8.onnx"
    result = quantize_file(src, cal, dst, QuantizeOptions(min_top1_agreement=0.99))
    x, y = digits.heldout_set()
    fp32 = InferenceSession(src, threads=1).run(None, {"image": x.astype(np.float32)})[0].argmax(1)
    int8 = InferenceSession(dst, threads=1).run(None, {"image": x.astype(np.float32)})[0].argmax(1)
    acc32, acc8 = float((fp32 == y).mean()), float((int8 == y).mean())
    print(f"\ndigits held-out accuracy: fp32 {acc32:.4f}, int8 {acc8:.4f} ({len(y)} samples); "
          f"calibration top-1 agreement {result.accuracy.top1_agreement:.4f}")
    assert acc8 >= acc32 - 0.005, (acc32, acc8)


def test_a_limit_exceeded_writes_nothing_and_names_the_numbers(cnn, tmp_path):
    src, cal = cnn
    dst = tmp_path / "out.onnx"
    with pytest.raises(ConversionError) as e:
        quantize_file(src, cal, dst, QuantizeOptions(max_rel_err=1e-9))
    assert "refused, nothing written" in str(e.value) and "max rel error" in str(e.value) and "> limit" in str(e.value)
    assert not dst.exists() and list(tmp_path.glob(".out.onnx*")) == []


@pytest.mark.parametrize("case, expected", [
    ("garbage", "not a readable .npy/.npz calibration file"),
    ("empty_dir", "holds no .npy/.npz files"),
    ("missing", "no such calibration file or directory"),
    ("wrong_name", "the model's inputs are ['x']"),
    ("wrong_shape", "has shape [4, 3, 8, 9], the model expects ['N', 3, 9, 9]"),
    ("no_samples", "holds no samples"),
    ("suffix", "is a .npy or .npz"),
])
def test_bad_calibration_is_a_specific_error(cnn, tmp_path, case, expected):
    src, _ = cnn
    cal = tmp_path / "c.npy"
    if case == "garbage":
        cal.write_bytes(b"\x93NUMPY this is not an array")
    elif case == "empty_dir":
        cal = tmp_path / "calib"
        cal.mkdir()
        (cal / "README.txt").write_text("no arrays here")
    elif case == "missing":
        cal = tmp_path / "nope"
    elif case == "wrong_name":
        cal = tmp_path / "c.npz"
        np.savez(cal, image=np.zeros((2, 3, 9, 9), np.float32) + 0.5)
    elif case == "wrong_shape":
        np.save(cal, np.ones((4, 3, 8, 9), np.float32))
    elif case == "no_samples":
        np.save(cal, np.ones((0, 3, 9, 9), np.float32))
    elif case == "suffix":
        cal = tmp_path / "c.txt"
        cal.write_text("1 2 3")
    with pytest.raises(ConversionError) as e:
        quantize_file(src, cal, tmp_path / "out.onnx")
    assert expected in str(e.value) and str(cal) in str(e.value)
    assert not (tmp_path / "out.onnx").exists()


def test_a_model_with_nothing_to_quantise_is_refused(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                          [helper.make_tensor_value_info("x", F, [2, 3])], [helper.make_tensor_value_info("y", F, [2, 3])])
    src = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    np.save(tmp_path / "c.npy", np.ones((2, 3), np.float32))
    with pytest.raises(ConversionError, match="no quantisable op \\(Conv, MatMul, Gemm\\)"):
        quantize_file(src, tmp_path / "c.npy", tmp_path / "out.onnx")


def test_an_old_opset_is_upgraded_and_said(tmp_path):
    src = small_cnn(tmp_path / "old.onnx", opset=11)
    np.save(tmp_path / "c.npy", np.random.default_rng(4).standard_normal((3, 3, 9, 9)).astype(np.float32))
    result = quantize_file(src, tmp_path / "c.npy", tmp_path / "out.onnx")
    assert any("upgraded from opset 11 to 13" in n for n in result.notes)
    assert max(o.version for o in onnx.load(str(tmp_path / "out.onnx")).opset_import if o.domain == "") >= 13


def test_a_weight_an_if_branch_also_reads_is_kept(tmp_path):
    w = numpy_helper.from_array(np.random.default_rng(5).standard_normal((4, 4)).astype(np.float32), "w")
    then_g = helper.make_graph([helper.make_node("Identity", ["w"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, [4, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["w"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", F, [4, 4])])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]),
             helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["flag"]),
             helper.make_node("If", ["flag"], ["z"], then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", F, [2, 4])],
                          [helper.make_tensor_value_info("y", F, [2, 4]), helper.make_tensor_value_info("z", F, [4, 4])],
                          [w, numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    src = tmp_path / "if.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    x = np.random.default_rng(6).standard_normal((2, 4)).astype(np.float32)
    np.save(tmp_path / "c.npy", x)
    quantize_file(src, tmp_path / "c.npy", tmp_path / "out.onnx")
    q = onnx.load(str(tmp_path / "out.onnx"))
    assert "w" in {i.name for i in q.graph.initializer} and "w_quantized" in {i.name for i in q.graph.initializer}
    y, z = InferenceSession(tmp_path / "out.onnx", threads=1).run(None, {"x": x})
    np.testing.assert_array_equal(z, numpy_helper.to_array(w) * (1 if x.sum() > 0 else -1))   # the branch is exact


def test_cli_prints_one_line_errors_and_a_summary(cnn, tmp_path):
    src, cal = cnn
    bad = subprocess.run([sys.executable, "-m", "engine.cli", "quantize", str(src), "--calibration",
                          str(tmp_path / "nope")], capture_output=True, text=True)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1].startswith("ai-engine quantize: error:")
    ok = subprocess.run([sys.executable, "-m", "engine.cli", "quantize", str(src), "--calibration", str(cal),
                         "-o", str(tmp_path / "q.onnx")], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "quantized ops: 2 Conv, 1 Gemm, 1 MatMul" in ok.stdout and "top-1 agreement" in ok.stdout
    assert (tmp_path / "q.onnx").is_file()
