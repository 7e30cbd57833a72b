"""conv2d_u8s8_depthwise (kernels/core/conv_s8_depthwise.c, the CONV_U8S8_DW
step) at every level, bit-exact against a numpy int64 reference: odd channel
counts (tails of the 64-channel blocks), strides, dilations, uneven pads,
saturation (255 x -128 over 7x7 taps), the uint8 output stage to the byte."""

from __future__ import annotations

import numpy as np
import pytest

from engine.kernels.conv_int8_depthwise import conv2d_u8s8_depthwise

CASES = [  # (N, H, W, C, R, S), strides, pads (t, l, b, r), dilations
    ((1, 5, 7, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 9, 8, 67, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((1, 11, 10, 130, 7, 7), (2, 1), (3, 3, 3, 3), (1, 1)),
    ((1, 9, 9, 64, 3, 2), (1, 2), (2, 0, 1, 3), (2, 1)),
    ((1, 4, 4, 1, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
]


def ref_int(x, w, x_zero, strides, pads, dilations):
    n, h, wd, c = x.shape
    _, _, r, s = w.shape
    xp = np.full((n, h + pads[0] + pads[2], wd + pads[1] + pads[3], c), x_zero, np.int64)
    xp[:, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    xp -= x_zero
    p = (xp.shape[1] - (r - 1) * dilations[0] - 1) // strides[0] + 1
    q = (xp.shape[2] - (s - 1) * dilations[1] - 1) // strides[1] + 1
    out = np.zeros((n, p, q, c), np.int64)
    for i in range(r):
        for j in range(s):
            hi, wj = i * dilations[0], j * dilations[1]
            patch = xp[:, hi:hi + strides[0] * (p - 1) + 1:strides[0], wj:wj + strides[1] * (q - 1) + 1:strides[1]]
            out += patch * w[:, 0, i, j].astype(np.int64)
    return out


@pytest.mark.parametrize("fill", ["random", "saturate"])
@pytest.mark.parametrize("shape,strides,pads,dilations", CASES)
def test_depthwise_u8s8_exact(level, shape, strides, pads, dilations, fill):
    n, h, wd, c, r, s = shape
    rng = np.random.default_rng(sum(shape))
    if fill == "saturate":
        x, w = np.full((n, h, wd, c), 255, np.uint8), np.full((c, 1, r, s), -128, np.int8)
    else:
        x = rng.integers(0, 256, (n, h, wd, c), dtype=np.uint8)
        w = rng.integers(-128, 128, (c, 1, r, s), dtype=np.int8)
    x_zero = 0 if fill == "saturate" else int(rng.integers(0, 256))
    kw = dict(strides=strides, pads=pads, dilations=dilations)
    acc = ref_int(x, w, x_zero, strides, pads, dilations)
    assert np.array_equal(conv2d_u8s8_depthwise(x, w, x_zero=x_zero, **kw), acc)
    w_scale = rng.uniform(0.001, 0.01, c).astype(np.float32)
    bias = rng.integers(-5000, 5000, c).astype(np.int32)
    x_scale, y_scale, y_zero = 0.02, 0.0005 * r * s * 40, 120
    mult = np.float32(x_scale) * w_scale / np.float32(y_scale)
    want = np.clip(np.rint((acc + bias).astype(np.int32).astype(np.float32) * mult) + y_zero, 0, 255)
    got = conv2d_u8s8_depthwise(x, w, x_zero=x_zero, out_dtype="uint8", x_scale=x_scale, w_scale=w_scale,
                                y_scale=y_scale, y_zero=y_zero, bias=bias, threads=3, **kw)
    assert np.array_equal(got, want.astype(np.uint8))
    if fill == "saturate" and r * s >= 9:
        assert got.min() == 0  # the low end reached


def test_bad_arguments_are_one_line():
    x = np.zeros((1, 4, 4, 3), np.uint8)
    from engine.errors import KernelError

    with pytest.raises(KernelError, match=r"conv2d_u8s8_depthwise: .*x_zero=300 is outside"):
        conv2d_u8s8_depthwise(x, np.zeros((3, 1, 3, 3), np.int8), x_zero=300)
    with pytest.raises(ValueError, match=r"not depthwise over x's 3 channels"):
        conv2d_u8s8_depthwise(x, np.zeros((4, 1, 3, 3), np.int8))
