"""The oracle helper itself: both references agree on a plain op, the
comparison's tolerance follows the dtype, and a mismatch names the output."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.op_oracle import assert_outputs_match, check_op, reference_outputs, single_node_model

X = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)


def test_onnxruntime_and_onnx_reference_agree_on_a_plain_op():
    m = single_node_model("Tanh", {"x": X}, {}, 1, 17)
    ort_out, ref_out = (reference_outputs(m, {"x": X}, o) for o in ("onnxruntime", "onnx.reference"))
    assert_outputs_match(ort_out, ref_out, "Tanh")


def test_tolerance_follows_the_dtype():
    a = np.ones(4, np.float16)
    assert_outputs_match([a + np.float16(2e-3)], [a], "fp16")  # within float16's tolerance
    with pytest.raises(AssertionError, match="fp32 output 0"):
        assert_outputs_match([a.astype(np.float32) + 2e-3], [a.astype(np.float32)], "fp32")
    with pytest.raises(AssertionError, match="int output 0"):
        assert_outputs_match([np.array([1, 2])], [np.array([1, 3])], "int")  # integers exactly


@pytest.mark.parametrize("got, message", [
    ([np.zeros(3, np.float32)], "output 0: shape"), ([np.zeros(4, np.float64)], "output 0: dtype"),
    ([np.zeros(4, np.float32)] * 2, "2 outputs, expected 1")])
def test_shape_dtype_and_count_are_checked(got, message):
    with pytest.raises(AssertionError, match=message):
        assert_outputs_match(got, [np.zeros(4, np.float32)], "op")


def test_check_op_runs_the_engine_against_the_oracle(tmp_path):
    (y,) = check_op(tmp_path, "Relu", {"x": X}, opset=17, oracle="onnxruntime")
    np.testing.assert_array_equal(y, np.maximum(X, 0))
