"""conv2d_bf16 at every level against a float64 reference.

Error bounds (kernels/include/aie_conv_lowp.h): x and w are rounded to bf16
(at most 2^-9 relative each), products of two bf16 are exact in fp32, and
the D = R*S*C products plus the residual and the bias are summed in fp32.
With mag = sum over the window of |x w| + |residual| + |bias|:
    against the float64 conv of the bf16-ROUNDED inputs: |y - ref~| <= (D + 2) * 2^-24 * mag~
    against the float64 conv of the fp32 inputs:         |y - ref| <= (2^-8 + (D + 2) * 2^-24) * mag
Relu is exact and keeps both (it is 1-Lipschitz).
"""

from __future__ import annotations

import numpy as np
import pytest
from conv_reference import conv2d as conv2d_ref

from engine import kernels
from engine.kernels.conv import pack_conv_weights
from engine.kernels.conv_lowp import (PackedConvWeightsBf16, conv2d_bf16, conv_bf16_path, is_bf16_conv_blob,
                                      pack_conv_bf16, pack_conv_weights_bf16)


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 rounded to bf16 and back, nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


def _conv64(x, w, strides, pads, dilations):
    return conv2d_ref(x, w, strides=strides, pads=pads, dilations=dilations)


def check_bf16_conv(got, x, w, *, bias=None, residual=None, relu=False, strides=(1, 1), pads=(0, 0, 0, 0),
                    dilations=(1, 1)):
    """got within both bounds of the module docstring."""
    d = w.shape[1] * w.shape[2] * w.shape[3]
    ref = _conv64(x, w, strides, pads, dilations)
    ref_r = _conv64(bf16_round(x), bf16_round(w), strides, pads, dilations)
    mag = _conv64(np.abs(x), np.abs(w), strides, pads, dilations)
    mag_r = _conv64(np.abs(bf16_round(x)), np.abs(bf16_round(w)), strides, pads, dilations)
    for extra in (residual, bias):
        if extra is not None:
            ref, ref_r = ref + extra, ref_r + extra
            mag, mag_r = mag + np.abs(extra), mag_r + np.abs(extra)
    if relu:
        ref, ref_r = np.maximum(ref, 0), np.maximum(ref_r, 0)
    assert got.dtype == np.float32 and got.shape == ref.shape
    err_r = np.abs(got - ref_r) / ((d + 2) * 2.0**-24 * mag_r + 1e-30)
    assert err_r.max() <= 1.0, f"{err_r.max():.3g} of the summation bound (D={d})"
    err = np.abs(got - ref) / ((2.0**-8 + (d + 2) * 2.0**-24) * mag + 1e-30)
    assert err.max() <= 1.0, f"{err.max():.3g} of the input-rounding bound (D={d})"


# (N, H, W, C, K, R, S, strides, pads (t, l, b, r), dilations)
CASES = [
    (2, 5, 7, 33, 17, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1)),     # 1x1 stride 1: a GEMM on x
    (1, 9, 11, 16, 40, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    (1, 12, 10, 64, 64, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1)),   # C in whole k-chunks
    (1, 20, 19, 3, 64, 7, 7, (2, 2), (3, 3, 3, 3), (1, 1)),    # the ResNet stem: runs of S*C = 21
    (1, 13, 14, 5, 33, 2, 3, (1, 2), (0, 2, 1, 0), (2, 2)),    # dilation, asymmetric pads
    (1, 6, 5, 130, 31, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),    # D = 1170: three K slices
    (1, 4, 4, 32, 300, 1, 1, (2, 2), (0, 0, 0, 0), (1, 1)),    # K over one 256-column block
    (3, 1, 1, 7, 1, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1)),       # one pixel, one channel
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:7])))
def test_matches_float64_at_every_level(level, case):
    n, h, w_, c, k, r, s, strides, pads, dil = case
    rng = np.random.default_rng(h * 131 + c * 7 + k)
    x = rng.standard_normal((n, h, w_, c)).astype(np.float32)
    w = rng.standard_normal((k, c, r, s)).astype(np.float32)
    bias = rng.standard_normal(k).astype(np.float32)
    packed = pack_conv_weights_bf16(w)
    y = conv2d_bf16(x, packed, bias, strides=strides, pads=pads, dilations=dil)
    check_bf16_conv(y, x, w, bias=bias, strides=strides, pads=pads, dilations=dil)


def test_residual_and_relu_fused_in_place(level):
    """ResNet's Add + Relu: y = relu(conv + residual + bias) with the residual in y itself."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 9, 9, 64)).astype(np.float32)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    residual = rng.standard_normal((1, 9, 9, 64)).astype(np.float32)
    out = residual.copy()
    y = conv2d_bf16(x, pack_conv_weights_bf16(w), bias, pads=(1, 1, 1, 1), residual=out, out=out,
                    activation="relu")
    assert y is out
    check_bf16_conv(y, x, w, bias=bias, residual=residual, relu=True, pads=(1, 1, 1, 1))
    separate = conv2d_bf16(x, pack_conv_weights_bf16(w), bias, pads=(1, 1, 1, 1), residual=residual,
                           activation="relu")
    np.testing.assert_array_equal(separate, y)


def test_activation_is_the_fp32_epilogue():
    """The activation is the shared vector math: bitwise the standalone op on the linear result."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 7, 8, 24)).astype(np.float32)
    w = rng.standard_normal((40, 24, 3, 3)).astype(np.float32)
    packed = pack_conv_weights_bf16(w)
    linear = conv2d_bf16(x, packed, pads=(1, 1, 1, 1))
    for act, fn in (("silu", kernels.silu), ("gelu", kernels.gelu), (("clip", -0.5, 2.0), None)):
        fused = conv2d_bf16(x, packed, pads=(1, 1, 1, 1), activation=act)
        want = fn(linear) if fn else np.clip(linear, -0.5, 2.0)
        np.testing.assert_array_equal(fused, want)


def test_weights_packed_at_one_level_run_at_every_other():
    """One layout everywhere: a blob packed at the best level runs on the portable path, within the bound, and
    the portable path agrees with itself across thread counts bit for bit."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 11, 10, 48)).astype(np.float32)
    w = rng.standard_normal((35, 48, 3, 3)).astype(np.float32)
    packed = pack_conv_weights_bf16(w)
    for name in kernels.available_levels():
        with kernels.use_level(name):
            one = conv2d_bf16(x, packed, pads=(1, 1, 1, 1), threads=1)
            two = conv2d_bf16(x, packed, pads=(1, 1, 1, 1), threads=2)
            np.testing.assert_array_equal(one, two)
            check_bf16_conv(one, x, w, pads=(1, 1, 1, 1))


def test_path_names_the_level_kernel(level):
    assert conv_bf16_path() == {"amx": "amx_bf16_32x32", "avx512_bf16": "avx512_bf16_32x32"}.get(
        level, "portable_bf16_32x32")


def test_blob_kind_is_recognised():
    w = np.ones((4, 3, 3, 3), np.float32)
    assert is_bf16_conv_blob(pack_conv_bf16(w))
    assert not is_bf16_conv_blob(pack_conv_weights(w).blob)


@pytest.mark.parametrize("call, message", [
    (lambda p, x: conv2d_bf16(np.ones((1, 6, 6, 3), np.float32), p), "weights expect 4 input channels"),
    (lambda p, x: conv2d_bf16(x.astype(np.float64), p), "expected dtype float32"),
    (lambda p, x: conv2d_bf16(x, p, np.ones(3, np.float32)), "bias: expected shape (5,)"),
    (lambda p, x: conv2d_bf16(x, p, strides=(0, 1)), "strides"),
    (lambda p, x: conv2d_bf16(x, pack_conv_weights(np.ones((5, 4, 3, 3), np.float32))), "PackedConvWeightsBf16"),
    (lambda p, x: conv2d_bf16(x, p, residual=np.ones((1, 2, 2, 5), np.float32)), "residual: expected"),
])
def test_bad_arguments_are_refused_with_the_reason(call, message):
    packed = pack_conv_weights_bf16(np.ones((5, 4, 3, 3), np.float32))
    assert isinstance(packed, PackedConvWeightsBf16)
    with pytest.raises(ValueError) as exc:
        call(packed, np.ones((1, 6, 6, 4), np.float32))
    assert message in str(exc.value)
