"""Trilu, Hardmax, OneHot, EyeLike, Dropout, Shrink, Swish, SwiGLU,
ReverseSequence (engine.ops.masking) against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.op_oracle import check_op

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-2, 0, 3])
def test_trilu(tmp_path, upper, k):
    check_op(tmp_path, "Trilu", {"x": RNG.integers(-9, 9, (2, 4, 6)).astype(np.int64), "k": np.array(k, np.int64)},
             {"upper": upper}, opset=14)


def test_hardmax_picks_the_first_maximum(tmp_path):
    x = RNG.integers(0, 3, (3, 4, 5)).astype(np.float32)  # many ties
    check_op(tmp_path, "Hardmax", {"x": x}, {"axis": 1}, opset=13)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_with_negative_and_out_of_range_indices(tmp_path, axis):
    idx = np.array([[0, -1, 3], [7, -4, 2]], np.int64)  # 7 and -5.. are out of range for depth 4
    check_op(tmp_path, "OneHot", {"indices": idx, "depth": np.array(4, np.int64),
                                  "values": np.array([-2.0, 5.0], np.float32)}, {"axis": axis}, opset=11)


def test_eye_like_dropout_shrink_swish(tmp_path):
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    check_op(tmp_path, "EyeLike", {"x": x}, {"k": 1, "dtype": 7}, opset=9)
    check_op(tmp_path, "Dropout", {"x": x, "ratio": np.array(0.3, np.float32)}, n_outputs=2, opset=13)
    check_op(tmp_path, "Shrink", {"x": x}, {"lambd": 0.4, "bias": 0.1}, opset=9)
    check_op(tmp_path, "Swish", {"x": x}, {"alpha": 0.7}, opset=24)


def test_training_dropout_is_cleanly_unsupported(tmp_path):
    from engine.errors import UnsupportedOperatorError

    x = RNG.standard_normal((4, 6)).astype(np.float32)
    with pytest.raises(UnsupportedOperatorError, match="training_mode"):
        check_op(tmp_path, "Dropout", {"x": x, "ratio": np.array(0.5, np.float32), "t": np.array(True)},
                 constants={"ratio": np.array(0.5, np.float32), "t": np.array(True)}, opset=13)


def test_swiglu(tmp_path):
    a, b = (RNG.standard_normal((3, 8)).astype(np.float32) for _ in range(2))
    check_op(tmp_path, "SwiGLU", {"A": a, "B": b}, {"alpha": 1.5}, opset=28)


@pytest.mark.parametrize("time_axis,batch_axis", [(0, 1), (1, 0)])
def test_reverse_sequence_with_run_time_lengths(tmp_path, time_axis, batch_axis):
    x = RNG.standard_normal((5, 4, 3) if time_axis == 0 else (4, 5, 3)).astype(np.float32)
    lens = np.array([5, 1, 3, 0], np.int64)
    check_op(tmp_path, "ReverseSequence", {"x": x, "sequence_lens": lens},
             {"time_axis": time_axis, "batch_axis": batch_axis}, opset=10)
