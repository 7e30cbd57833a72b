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
    g = helper.make_graph([helper.make_node("MatMulInteger", ["x", "x"], ["y"], name="mmi")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.UINT8, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [])])
    path = tmp_path / "mmi.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    sess = InferenceSession(path)
    with pytest.raises(UnsupportedOperatorError,
                       match=r"operator MatMulInteger \(node 'mmi', opset 13\) is not supported \(supported ops: Abs, .*Relu"):
        sess.run(None, {"x": np.ones(3, np.uint8)})


def test_get_inputs_outputs(relu_onnx):
    sess = InferenceSession(relu_onnx)
    [i], [o] = sess.get_inputs(), sess.get_outputs()
    assert (i.name, i.shape, i.type) == ("x", ["N", 4], "tensor(float)")
    assert (o.name, o.shape, o.type) == ("y", ["N", 4], "tensor(float)")
