"""Executor ops (kernels/exec/topk_scatter.c, bitshift_cumprod.c, grid_sample.c): ScatterElements,
ScatterND, GatherND, TopK, BitShift (and BitCast), CumProd, GridSample (with
AffineGrid, which feeds it in real models), against onnx.reference; an
out-of-range index is a clean error at run time, not a wild write."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.op_oracle import check_op

RNG = np.random.default_rng(200)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(tmp_path, reduction):
    data = RNG.standard_normal((4, 5)).astype(np.float32)
    # distinct indices per column for "none", where duplicates are undefined
    idx = np.stack([RNG.permutation(4)[:3] for _ in range(2)], axis=1).astype(np.int64) - 2
    updates = RNG.standard_normal((3, 2)).astype(np.float32)
    check_op(tmp_path, "ScatterElements", {"data": data, "indices": idx, "updates": updates},
             {"axis": 0, "reduction": reduction}, opset=18)


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_nd_slices(tmp_path, reduction):
    data = RNG.integers(-5, 5, (4, 3, 2)).astype(np.int64)
    idx = np.array([[1], [3], [-4]], np.int64)
    updates = RNG.integers(-5, 5, (3, 3, 2)).astype(np.int64)
    check_op(tmp_path, "ScatterND", {"data": data, "indices": idx, "updates": updates}, {"reduction": reduction},
             opset=18)


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd(tmp_path, batch_dims):
    data = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    idx = np.array([[[1, 2], [0, -1]], [[-2, 1], [1, 0]]], np.int64)  # valid for both batch_dims
    check_op(tmp_path, "GatherND", {"data": data, "indices": idx}, {"batch_dims": batch_dims}, opset=13)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_topk_with_ties(tmp_path, largest, dtype):
    x = RNG.integers(0, 4, (3, 7, 2)).astype(dtype)  # ties keep the lower index first
    check_op(tmp_path, "TopK", {"x": x, "k": np.array([4], np.int64)}, {"axis": 1, "largest": largest}, n_outputs=2,
             opset=11)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int32])
def test_bitshift_broadcast_and_wide_counts(tmp_path, direction, dtype):
    x = RNG.integers(-100 if dtype == np.int32 else 0, 100, (3, 4)).astype(dtype)
    bits = np.iinfo(dtype).bits
    y = np.array([0, 1, 3, bits], dtype)  # a count of the full width gives 0 (or -1)
    check_op(tmp_path, "BitShift", {"x": x, "y": y}, {"direction": direction}, opset=11)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumprod(tmp_path, exclusive, reverse):
    x = (RNG.random((3, 4, 2)) + 0.5).astype(np.float32)
    check_op(tmp_path, "CumProd", {"x": x, "axis": np.array(1, np.int64)}, {"exclusive": exclusive, "reverse": reverse},
             opset=26)


def test_out_of_range_index_is_a_clean_error(tmp_path):
    from engine.errors import EngineError

    data = RNG.standard_normal((4, 5)).astype(np.float32)
    with pytest.raises(EngineError, match="scatter_elements index 9 out of range"):
        check_op(tmp_path, "ScatterElements",
                 {"data": data, "indices": np.array([[9]], np.int64), "updates": np.ones((1, 1), np.float32)},
                 opset=18, oracle=lambda feeds: [feeds["data"]])


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d(tmp_path, mode, padding, align):
    x = RNG.standard_normal((2, 3, 5, 4)).astype(np.float32)
    grid = RNG.uniform(-1.4, 1.4, (2, 6, 3, 2)).astype(np.float32)  # some points outside the image
    check_op(tmp_path, "GridSample", {"X": x, "grid": grid},
             {"mode": mode, "padding_mode": padding, "align_corners": align}, opset=20, atol=1e-4)


@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 2, 3, 2, 4]])
@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid(tmp_path, size, align):
    d = len(size) - 2
    theta = RNG.standard_normal((size[0], d, d + 1)).astype(np.float32)
    check_op(tmp_path, "AffineGrid", {"theta": theta, "size": np.array(size, np.int64)}, {"align_corners": align},
             constants={"size": np.array(size, np.int64)}, opset=20)


@pytest.mark.parametrize("src,to", [(np.float32, 6), (np.int64, 11), (np.bool_, 2)])
def test_bitcast_is_a_view(tmp_path, src, to):
    x = RNG.standard_normal((3, 4)).astype(src) if src != np.bool_ else RNG.random((3, 4)) < 0.5
    check_op(tmp_path, "BitCast", {"x": x}, {"to": to}, opset=26)
