"""conv2d_u8s8 at every level, bit-exact against a numpy int64 reference.

The reference pads x with its zero point (ONNX QLinearConv's padding: the
quantised 0.0) and sums (x - x_zero) * w in int64; the int32 sums must be
equal, and the uint8 / float32 outputs must follow the int8 GEMM's formulas
(kernels/include/aie_gemm_lowp.h) to the byte / bit. Odd sizes, R*S*C not a
multiple of the tile depth (64), strides, dilations, uneven pads, 1x1 (x is
the GEMM's A), saturation (255 x -128)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.kernels.conv_int8 import conv2d_u8s8, pack_conv_s8

CASES = [  # (N, H, W, C, K, R, S), strides, pads (t, l, b, r), dilations
    ((1, 5, 7, 3, 5, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 9, 8, 17, 33, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((1, 6, 6, 64, 31, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    ((1, 7, 5, 70, 40, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    ((1, 11, 10, 3, 16, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),
    ((1, 9, 9, 5, 6, 3, 2), (1, 2), (2, 0, 1, 3), (2, 1)),
    ((1, 4, 4, 130, 65, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
]


def ref_int(x, w, x_zero, strides, pads, dilations):
    n, h, wd, c = x.shape
    k, _, r, s = w.shape
    xp = np.full((n, h + pads[0] + pads[2], wd + pads[1] + pads[3], c), x_zero, np.int64)
    xp[:, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    xp -= x_zero
    p = (xp.shape[1] - (r - 1) * dilations[0] - 1) // strides[0] + 1
    q = (xp.shape[2] - (s - 1) * dilations[1] - 1) // strides[1] + 1
    out = np.zeros((n, p, q, k), np.int64)
    for i in range(r):
        for j in range(s):
            hi, wj = i * dilations[0], j * dilations[1]
            patch = xp[:, hi:hi + strides[0] * (p - 1) + 1:strides[0], wj:wj + strides[1] * (q - 1) + 1:strides[1]]
            out += patch @ w[:, :, i, j].T.astype(np.int64)
    return out


@pytest.mark.parametrize("fill", ["random", "saturate"])
@pytest.mark.parametrize("shape,strides,pads,dilations", CASES)
def test_conv_u8s8_exact(level, shape, strides, pads, dilations, fill):
    n, h, wd, c, k, r, s = shape
    rng = np.random.default_rng(sum(shape))
    if fill == "saturate":
        x, w = np.full((n, h, wd, c), 255, np.uint8), np.full((k, c, r, s), -128, np.int8)
    else:
        x = rng.integers(0, 256, (n, h, wd, c), dtype=np.uint8)
        w = rng.integers(-128, 128, (k, c, r, s), dtype=np.int8)
    x_zero = int(rng.integers(0, 256))
    kw = dict(strides=strides, pads=pads, dilations=dilations)
    acc = ref_int(x, w, x_zero, strides, pads, dilations)
    packed = pack_conv_s8(w)
    assert np.array_equal(conv2d_u8s8(x, w, x_zero=x_zero, packed=packed, **kw), acc)
    w_scale = rng.uniform(0.001, 0.01, k).astype(np.float32)
    bias = rng.integers(-5000, 5000, k).astype(np.int32)
    x_scale, y_scale, y_zero = 0.02, 0.0005 * c * r * s, 120
    mult = np.float32(x_scale) * w_scale / np.float32(y_scale)
    want = np.clip(np.rint((acc + bias).astype(np.int32).astype(np.float32) * mult) + y_zero, 0, 255)
    got = conv2d_u8s8(x, w, x_zero=x_zero, packed=packed, out_dtype="uint8", x_scale=x_scale, w_scale=w_scale,
                      y_scale=y_scale, y_zero=y_zero, bias=bias, threads=3, **kw)
    assert np.array_equal(got, want.astype(np.uint8))
    fbias = rng.standard_normal(k).astype(np.float32)
    got = conv2d_u8s8(x, w, x_zero=x_zero, packed=packed, out_dtype="float32", x_scale=x_scale, w_scale=w_scale,
                      bias=fbias, activation="relu", **kw)
    want = np.maximum(acc.astype(np.int32).astype(np.float32) * (np.float32(x_scale) * w_scale) + fbias, 0)
    assert np.array_equal(got, want)


def test_bad_arguments_are_one_line():
    w = np.zeros((4, 3, 3, 3), np.int8)
    with pytest.raises(ValueError, match="int8 K x C x R x S"):
        pack_conv_s8(w.astype(np.float32))
    with pytest.raises(ValueError, match="uint8 NHWC"):
        conv2d_u8s8(np.zeros((1, 4, 4, 3), np.float32), w)
    with pytest.raises(ValueError, match="does not match x.s 5 channels"):
        conv2d_u8s8(np.zeros((1, 4, 4, 5), np.uint8), w)
