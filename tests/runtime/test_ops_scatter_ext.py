"""Col2Im, MaxUnpool, TensorScatter (engine.ops.scatter_composed) against
onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.op_oracle import check_op

RNG = np.random.default_rng(31)


@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 1], "pads": [1, 0, 1, 2], "dilations": [1, 2]}])
def test_col2im_sums_overlapping_blocks(tmp_path, attrs):
    image, block = [5, 6], [2, 3]
    strides, pads, dil = attrs.get("strides", [1, 1]), attrs.get("pads", [0] * 4), attrs.get("dilations", [1, 1])
    counts = [(image[d] + pads[d] + pads[d + 2] - (dil[d] * (block[d] - 1) + 1)) // strides[d] + 1 for d in range(2)]
    x = RNG.standard_normal((2, 3 * 6, counts[0] * counts[1])).astype(np.float32)
    consts = {"image_shape": np.array(image, np.int64), "block_shape": np.array(block, np.int64)}
    check_op(tmp_path, "Col2Im", {"input": x, **consts}, attrs, constants=consts, opset=18)


@pytest.mark.parametrize("output_shape", [None, [1, 2, 5, 6]])
def test_max_unpool(tmp_path, output_shape):
    x = RNG.standard_normal((1, 2, 2, 2)).astype(np.float32)
    # distinct flat positions in the unpooled [1, 2, 4, 4] tensor
    idx = np.sort(RNG.choice(32, 8, replace=False)).reshape(1, 2, 2, 2).astype(np.int64)
    inputs = {"x": x, "i": idx}
    consts = {}
    if output_shape:
        inputs["output_shape"] = consts["output_shape"] = np.array(output_shape, np.int64)
    check_op(tmp_path, "MaxUnpool", inputs, {"kernel_shape": [2, 2], "strides": [2, 2]}, constants=consts, opset=11)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_kv_cache_write(tmp_path, mode):
    past = RNG.standard_normal((2, 3, 6, 4)).astype(np.float32)
    upd = RNG.standard_normal((2, 3, 2, 4)).astype(np.float32)
    where = np.array([1, 5 if mode == "circular" else 4], np.int64)  # circular wraps past the end
    check_op(tmp_path, "TensorScatter", {"past_cache": past, "update": upd, "write_indices": where}, {"mode": mode},
             opset=24)
