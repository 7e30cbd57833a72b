"""Data-movement kernels against numpy (and onnx.reference for Slice/Pad)."""

from __future__ import annotations

import numpy as np
import pytest

from engine import kernels as K
from tests.runtime.op_oracle import reference_outputs, single_node_model

DTYPES = (np.float32, np.int64, np.uint8, np.float16, np.bool_)


def arr(shape, dtype, seed=0):
    a = np.random.default_rng(seed).integers(-100, 100, shape)
    return np.asarray(a, dtype=dtype)


def onnx_run(op, inputs, outputs=1, **attrs):
    """One ONNX node through onnx.reference (the test oracle); None: an absent optional input."""
    named = {f"i{k}": v for k, v in enumerate(inputs)}
    model = single_node_model(op, named, attrs, outputs, 18)
    return reference_outputs(model, {n: v for n, v in named.items() if v is not None}, "onnx.reference")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,perm", [((3, 7), (1, 0)), ((2, 3, 4), (2, 0, 1)), ((31, 17, 5), (1, 0, 2)),
                                        ((2, 33, 65), (0, 2, 1)), ((1, 1023), (1, 0)), ((2, 0, 3), (2, 1, 0)),
                                        ((2, 1, 3, 1, 2, 3, 1, 2), (7, 6, 5, 4, 3, 2, 1, 0)), ((5,), (0,))])
def test_transpose(dtype, shape, perm):
    x = arr(shape, dtype)
    y = K.transpose(x, perm)
    assert y.dtype == x.dtype and np.array_equal(y, np.transpose(x, perm))


def test_transpose_large_tiles_threads():
    x = arr((3, 257, 129), np.float32)
    want = np.transpose(x, (0, 2, 1))
    assert np.array_equal(K.transpose(x, (0, 2, 1), threads=1), want)
    assert np.array_equal(K.transpose(x, (0, 2, 1), threads=2), want)


@pytest.mark.parametrize("dtype", (np.float32, np.int32, np.float16, np.int64))
@pytest.mark.parametrize("hw", [(1, 1), (17, 19), (1, 255), (1, 257), (33, 65)])
def test_nchw_to_nhwc_of_three_channels(dtype, hw):
    """An RGB image to NHWC: three planes interleaved (4-byte elements take
    their own loop), block edges of 256 pixels crossed, two threads."""
    x = arr((2, 3, *hw), dtype, seed=hw[1])
    want = np.transpose(x, (0, 2, 3, 1))
    for threads in (1, 2):
        assert np.array_equal(K.transpose(x, (0, 2, 3, 1), threads=threads), want)


def test_contiguous_from_views():
    x = arr((17, 31), np.float32)
    for view in (x[::-1], x[:, ::3], x.T, x[3:10:2, ::-2].T, np.broadcast_to(x[:1], (5, 31))):
        assert np.array_equal(K.contiguous(view), view)


@pytest.mark.parametrize("dtype", (np.float32, np.int64, np.uint8))
def test_expand_and_tile(dtype):
    x = arr((3, 1, 5), dtype)
    for shape in ((3, 4, 5), (2, 3, 7, 5), (1, 1), (3, 0, 5)):
        assert np.array_equal(K.expand(x, shape), x * np.ones(shape, dtype) if dtype != np.uint8 else
                              np.broadcast_to(x, np.broadcast_shapes(x.shape, shape)))
    for reps in ((1, 1, 1), (2, 3, 1), (1, 1, 4), (0, 2, 1)):
        assert np.array_equal(K.tile(x, reps), np.tile(x, reps))
    s = np.asarray(7, dtype)  # 0-d
    assert np.array_equal(K.expand(s, (2, 3)), np.full((2, 3), 7, dtype))
    with pytest.raises(ValueError, match="not broadcast-compatible"):
        K.expand(x, (3, 4, 4))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather(dtype):
    x = arr((5, 7, 3), dtype)
    for axis in (0, 1, 2, -1):
        n = x.shape[axis]
        idx = np.array([[0, n - 1], [-1, -n]], np.int64)
        assert np.array_equal(K.gather(x, idx, axis), np.take(x, idx, axis))
    assert np.array_equal(K.gather(x, np.array(2), 1), np.take(x, 2, 1))  # scalar index drops the dim
    assert K.gather(x, np.zeros(0, np.int64), 0).shape == (0, 7, 3)
    with pytest.raises(ValueError, match=r"index 7 at position 1 is outside \[-7, 7\)"):
        K.gather(x, np.array([1, 7]), 1)
    with pytest.raises(ValueError, match=r"index -6 at position 0"):
        K.gather(x, np.array([-6]), 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_concat_split(dtype):
    parts = [arr((3, n, 4), dtype, seed=n) for n in (1, 0, 7, 17)]
    for axis in (1, -2):
        y = K.concat(parts, axis)
        assert np.array_equal(y, np.concatenate(parts, 1))
        back = K.split(y, [1, 0, 7, 17], axis)
        assert all(np.array_equal(a, b) for a, b in zip(back, parts))
    a, b = arr((2, 3), dtype, 1), arr((5, 3), dtype, 2)
    assert np.array_equal(K.concat([a, b], 0), np.concatenate([a, b], 0))
    with pytest.raises(ValueError, match=r"xs\[1\].*does not match"):
        K.concat([a, b], 1)
    with pytest.raises(ValueError, match="must be >= 0 and sum to dim"):
        K.split(a, [1, 2], 0)


SLICES = [([1], [4], [0], [1]), ([-1], [-100], [0], [-1]), ([0, 5], [100, 1], [1, 0], [3, -2]),
          ([2], [2], [1], [1]), ([-3, 1], [2**62, -1], [-1, 1], [1, 2]), ([10], [-10], [1], [-4])]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_slice_matches_onnx_reference(starts, ends, axes, steps):
    x = arr((7, 11, 5), np.float32)
    got = K.slice(x, starts, ends, axes, steps)
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    (want,) = onnx_run("Slice", [x, i64(starts), i64(ends), i64(axes), i64(steps)])
    assert got.shape == want.shape and np.array_equal(got, want)


@pytest.mark.parametrize("mode", ("constant", "reflect", "edge", "wrap"))
@pytest.mark.parametrize("pads", ([0, 2, 1, 3], [1, 0, 0, 2], [2, 4, 2, 4], [0, 0, 0, 0], [-1, 1, 2, -2]))
def test_pad_matches_onnx_reference(mode, pads):
    x = arr((4, 5), np.float32)
    got = K.pad(x, pads, mode, value=7.5)
    # onnx.reference (numpy.pad) rejects negative pads: crop first, as ONNX defines them
    crop = x[max(-pads[0], 0):x.shape[0] - max(-pads[2], 0), max(-pads[1], 0):x.shape[1] - max(-pads[3], 0)]
    pos = np.array([max(p, 0) for p in pads], np.int64)
    (want,) = onnx_run("Pad", [np.ascontiguousarray(crop), pos, np.array(7.5, np.float32)], mode=mode)
    assert got.shape == want.shape and np.array_equal(got, want)


@pytest.mark.parametrize("dtype", (np.int64, np.uint8, np.float16))
def test_pad_other_dtypes_and_wide_reflect(dtype):
    x = arr((3, 1, 4), dtype)
    for mode in ("constant", "reflect", "edge", "wrap"):
        want = np.pad(x, ((1, 0), (2, 1), (6, 5)), mode=mode, **({"constant_values": 3} if mode == "constant" else {}))
        assert np.array_equal(K.pad(x, [1, 2, 6, 0, 1, 5], mode, value=3), want), mode
    with pytest.raises(ValueError, match="dim 1 is empty: nothing to repeat"):
        K.pad(arr((2, 0), dtype), [0, 1, 0, 0], "edge")
