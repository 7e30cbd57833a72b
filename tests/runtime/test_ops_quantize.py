"""QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear
(engine.ops.quantize) against onnx.reference: exact, integers compared
bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.op_oracle import check_op

RNG = np.random.default_rng(21)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16])
@pytest.mark.parametrize("mode", ["tensor", "axis", "block"])
def test_quantize_dequantize_round_trip_parts(tmp_path, dtype, mode):
    x = (RNG.standard_normal((3, 4, 6)) * 40).astype(np.float32)
    x[0, 0, :3] = [0.5, 1.5, -2.5]  # ties round to even
    if mode == "tensor":
        scale, attrs = np.array(0.37, np.float32), {}
    elif mode == "axis":
        scale, attrs = RNG.uniform(0.1, 1.0, 4).astype(np.float32), {"axis": 1}
    else:
        scale, attrs = RNG.uniform(0.1, 1.0, (3, 4, 3)).astype(np.float32), {"axis": 2, "block_size": 2}
    info = np.iinfo(dtype)
    zp = RNG.integers(info.min // 4, info.max // 4, scale.shape).astype(dtype)
    (q,) = check_op(tmp_path, "QuantizeLinear", {"x": x, "y_scale": scale, "y_zero_point": zp}, attrs, opset=21)
    check_op(tmp_path, "DequantizeLinear", {"x": q, "x_scale": scale, "x_zero_point": zp}, attrs, opset=21)


def test_dynamic_quantize_linear(tmp_path):
    x = (RNG.standard_normal((5, 7)) * 3 + 1).astype(np.float32)
    check_op(tmp_path, "DynamicQuantizeLinear", {"x": x}, n_outputs=3, opset=11)
