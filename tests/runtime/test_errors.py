"""Every user-facing failure is a specific error with a specific message."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from engine import aie_format
from engine.convert import convert_file
from engine.errors import InvalidArgument, ModelFormatError, UnsupportedOperatorError
from engine.session import InferenceSession


@pytest.fixture()
def relu_onnx(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture()
def relu_aie(relu_onnx, tmp_path):
    dst = tmp_path / "relu.aie"
    convert_file(relu_onnx, dst)
    return dst


def test_truncated_file(relu_aie):
    data = relu_aie.read_bytes()
    relu_aie.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFormatError, match="truncated"):
        InferenceSession(relu_aie)


def test_empty_file(relu_aie):
    relu_aie.write_bytes(b"")
    with pytest.raises(ModelFormatError, match="truncated: the file is empty"):
        InferenceSession(relu_aie)


def test_corrupted_file(relu_aie):
    data = bytearray(relu_aie.read_bytes())
    data[100] ^= 0xFF
    relu_aie.write_bytes(bytes(data))
    with pytest.raises(ModelFormatError, match="checksum mismatch"):
        InferenceSession(relu_aie)


def test_wrong_magic(relu_aie):
    data = bytearray(relu_aie.read_bytes())
    data[:8] = b"NOTAMODL"
    relu_aie.write_bytes(bytes(data))
    with pytest.raises(ModelFormatError, match="wrong magic"):
        InferenceSession(relu_aie)


def test_newer_version(relu_aie):
    data = bytearray(relu_aie.read_bytes())
    data[8:12] = (aie_format.FORMAT_VERSION + 1).to_bytes(4, "little")
    relu_aie.write_bytes(bytes(data))
    with pytest.raises(ModelFormatError, match=f"format version {aie_format.FORMAT_VERSION + 1} is newer"):
        InferenceSession(relu_aie)


def test_wrong_input_name(relu_onnx):
    sess = InferenceSession(relu_onnx)
    with pytest.raises(InvalidArgument, match=r"unknown input name\(s\) \['z'\]; expected inputs: x \['N', 4\] tensor\(float\)"):
        sess.run(None, {"z": np.ones((1, 4), np.float32)})


def test_missing_input(relu_onnx):
    with pytest.raises(InvalidArgument, match=r"missing input 'x' \(shape \['N', 4\], tensor\(float\)\)"):
        InferenceSession(relu_onnx).run(None, {})


def test_wrong_dtype(relu_onnx):
    with pytest.raises(InvalidArgument, match=r"input 'x' has dtype tensor\(double\), expected tensor\(float\)"):
        InferenceSession(relu_onnx).run(None, {"x": np.ones((2, 4))})


def test_wrong_shape(relu_onnx):
    with pytest.raises(InvalidArgument, match=r"input 'x' has shape \[2, 5\], expected \['N', 4\]"):
        InferenceSession(relu_onnx).run(None, {"x": np.ones((2, 5), np.float32)})


def test_unsupported_op(tmp_path):
    """Names the op, node and opset, and nothing else (no list of every op)."""
    g = helper.make_graph([helper.make_node("Det", ["x"], ["y"], name="det")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    path = tmp_path / "det.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    sess = InferenceSession(path)
    with pytest.raises(UnsupportedOperatorError) as e:
        sess.run(None, {"x": np.ones((3, 3), np.float32)})
    assert str(e.value) == "operator Det (node 'det', opset 13) is not supported"


def test_unsupported_op_names_its_domain(tmp_path):
    g = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["y"], name="fb", domain="com.example")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    path = tmp_path / "fb.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]),
              path)
    with pytest.raises(Exception) as e:
        InferenceSession(path).run(None, {"x": np.ones(3, np.float32)})
    text = str(e.value)
    assert "Frobnicate" in text and "com.example" in text and "'fb'" in text, text
    assert "supported ops" not in text and "\n" not in text and len(text) < 200, text


def test_shape_error_names_node_shapes_and_model_input(tmp_path):
    """A MaxPool window larger than the (padded) input that a small model
    input led to: the node, its input shape and the model input shape."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                           helper.make_node("MaxPool", ["r"], ["y"], name="pool", kernel_shape=[3, 3])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, "h", "w"])])
    path = tmp_path / "pool.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    sess = InferenceSession(path, threads=1)
    assert sess.run(None, {"x": np.ones((1, 1, 4, 4), np.float32)})[0].shape == (1, 1, 2, 2)
    with pytest.raises(UnsupportedOperatorError) as e:
        sess.run(None, {"x": np.ones((2, 1, 2, 2), np.float32)})
    text = str(e.value)
    assert text.startswith("MaxPool (node 'pool', opset 17): ") and "3x3" in text and "2x2" in text, text
    assert text.endswith("; model inputs x [2, 1, 2, 2]"), text
    assert "; node inputs r" in text and "supported ops" not in text and "\n" not in text, text


def test_get_inputs_outputs(relu_onnx):
    sess = InferenceSession(relu_onnx)
    [i], [o] = sess.get_inputs(), sess.get_outputs()
    assert (i.name, i.shape, i.type) == ("x", ["N", 4], "tensor(float)")
    assert (o.name, o.shape, o.type) == ("y", ["N", 4], "tensor(float)")
