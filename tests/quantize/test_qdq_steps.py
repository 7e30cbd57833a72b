"""The one-pass QUANTIZE / DEQUANTIZE steps (per-tensor 8-bit with
constant scale and zero point: the form quantised models use between every
layer) against onnx.reference, bit for bit: ties to even, saturation at both
ends, int32 dequantisation (biases). A quotient past int32 (1e10, inf) gives
the type's low end, as onnx.reference's int32 conversion does (and the
composed path did): kept, not "fixed" to saturate high."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.op_oracle import check_op

RNG = np.random.default_rng(33)


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")  # onnx.reference on 1e10 and inf
@pytest.mark.op_test("QuantizeLinear", "DequantizeLinear")
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_per_tensor_constant_parameters_take_the_one_pass_steps(tmp_path, dtype):
    x = (RNG.standard_normal((2, 3, 37)) * 60).astype(np.float32)
    x[0, 0, :8] = [0.5 * 0.37, 1.5 * 0.37, -2.5 * 0.37, 1e10, -1e10, np.inf, -np.inf, 0.0]
    scale = np.array(0.37, np.float32)
    zp = np.array(7 if dtype == np.int8 else 131, dtype)
    consts = {"y_scale": scale, "y_zero_point": zp}
    (q,) = check_op(tmp_path, "QuantizeLinear", {"x": x, **consts}, constants=consts, opset=21)
    assert q.min() == np.iinfo(dtype).min and q.max() == np.iinfo(dtype).max  # both ends saturate
    consts = {"x_scale": scale, "x_zero_point": zp}
    check_op(tmp_path, "DequantizeLinear", {"x": q, **consts}, constants=consts, opset=21)


def test_int32_dequantisation_and_no_zero_point(tmp_path):
    x = RNG.integers(-2**20, 2**20, (5, 9)).astype(np.int32)
    consts = {"x_scale": np.array(1.7e-4, np.float32)}
    check_op(tmp_path, "DequantizeLinear", {"x": x, **consts}, constants=consts, opset=21)
    consts = {"y_scale": np.array(0.02, np.float32)}
    check_op(tmp_path, "QuantizeLinear", {"x": RNG.standard_normal((4, 5)).astype(np.float32), **consts},
             constants=consts, opset=21)
