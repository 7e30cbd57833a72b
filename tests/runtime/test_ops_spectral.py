"""Signal ops (engine.ops.spectral): window functions, DFT, CenterCropPad,
against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.op_oracle import check_op


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(tmp_path, op, periodic):
    check_op(tmp_path, op, {"size": np.array(10, np.int64)}, {"periodic": periodic, "output_datatype": 1},
             opset=17, atol=1e-6)


@pytest.mark.parametrize("shape,axes", [([3, 8], None), ([6, 3], [-2, -1]), ([5], [1])])
def test_center_crop_pad(tmp_path, shape, axes):
    x = np.random.default_rng(18).standard_normal((4, 5, 2)).astype(np.float32)
    full = shape if axes else shape + [2]
    attrs = {"axes": axes} if axes else {}
    check_op(tmp_path, "CenterCropPad", {"x": x, "shape": np.array(full, np.int64)}, attrs,
             constants={"shape": np.array(full, np.int64)}, opset=18)


@pytest.mark.parametrize("complex_in", [False, True])
@pytest.mark.parametrize("length", [None, 6, 11])
@pytest.mark.parametrize("onesided", [0, 1])
def test_dft_forward(tmp_path, complex_in, length, onesided):
    x = np.random.default_rng(19).standard_normal((2, 8, 3, 2 if complex_in else 1))
    inputs = {"x": x, "dft_length": None if length is None else np.array(length, np.int64),
              "axis": np.array(1, np.int64)}
    check_op(tmp_path, "DFT", inputs, {"onesided": onesided}, opset=20,
             constants={k: v for k, v in inputs.items() if k != "x" and v is not None})


def test_dft_inverse_onesided_is_irfft(tmp_path):
    x = np.random.default_rng(20).standard_normal((3, 5, 2))
    check_op(tmp_path, "DFT", {"x": x, "dft_length": np.array(8, np.int64)}, {"inverse": 1, "onesided": 1, "axis": 1},
             constants={"dft_length": np.array(8, np.int64)}, opset=17)
