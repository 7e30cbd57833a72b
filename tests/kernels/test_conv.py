"""engine.kernels.conv2d / conv_transpose2d against a float64 reference, on every ISA path."""

from __future__ import annotations

import numpy as np
import pytest

from engine import kernels
from engine.errors import KernelError
import conv_reference as ref

ISAS = kernels.available_isas()

# N, H, W, C, K, R, S, strides, dilations, pads (top, left, bottom, right), group
CASES = {
    "3x3-pad1": (1, 7, 7, 3, 5, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),
    "3x3-s2-asym": (2, 17, 17, 17, 31, 3, 3, (2, 2), (1, 1), (0, 1, 2, 1), 1),
    "5x5-s3-d2": (1, 17, 17, 31, 17, 5, 5, (3, 3), (2, 2), (2, 2, 2, 2), 1),
    "3x3-multitile": (2, 17, 17, 31, 33, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1),
    "stem-7x7-s2": (1, 33, 33, 3, 16, 7, 7, (2, 2), (1, 1), (3, 3, 3, 3), 1),
    "rect-3x1-s(1,2)": (1, 3, 17, 3, 5, 3, 1, (1, 2), (1, 1), (1, 0, 1, 0), 1),
    "1x1-H1": (1, 1, 1, 3, 4, 1, 1, (1, 1), (1, 1), (0, 0, 0, 0), 1),
    "1x1-gemm": (2, 7, 7, 17, 31, 1, 1, (1, 1), (1, 1), (0, 0, 0, 0), 1),
    "1x1-s2-downsample": (1, 17, 17, 16, 32, 1, 1, (2, 2), (1, 1), (0, 0, 0, 0), 1),
    "1x1-padded": (1, 3, 3, 5, 7, 1, 1, (1, 1), (1, 1), (1, 0, 0, 1), 1),
    "group2-3x3": (1, 7, 7, 6, 10, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1), 2),
    "group4-1x1": (1, 7, 7, 8, 12, 1, 1, (1, 1), (1, 1), (0, 0, 0, 0), 4),
    "dw-3x3": (1, 17, 17, 31, 31, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1), 31),
    "dw-3x3-s2-d2-asym": (2, 17, 17, 17, 17, 3, 3, (2, 2), (2, 2), (2, 1, 0, 2), 17),
    "dw-5x5-C40": (1, 7, 7, 40, 40, 5, 5, (1, 1), (1, 1), (2, 2, 2, 2), 40),
    "dw-7x7-H3": (1, 3, 3, 3, 3, 7, 7, (1, 1), (1, 1), (3, 3, 3, 3), 3),
    "dw-multiplier2": (1, 7, 7, 3, 6, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1), 3),
    "C1-5x5": (1, 7, 7, 1, 1, 5, 5, (1, 1), (1, 1), (2, 2, 2, 2), 1),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", list(CASES))
def test_conv2d_matches_float64(isa, name):
    case = CASES[name]
    x, w, b = ref.conv_data(case)
    kw = ref.conv_kw(case)
    with kernels.use_isa(isa):
        y = kernels.conv2d(x, w, b, threads=1, **kw)
    ref.assert_conv_close(y, f"{name}/{isa}", x, w, b, **kw)


EPILOGUE_CASES = ["3x3-s2-asym", "1x1-gemm", "dw-3x3", "group2-3x3"]
ACTIVATIONS = [None, "relu", "relu6", ("clip", -0.5, 0.7), "hardswish", "silu", "sigmoid",
               ("leaky_relu", 0.1), ("hardsigmoid", 0.2, 0.5), "gelu", "tanh"]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", EPILOGUE_CASES)
def test_conv2d_fused_epilogue(isa, name):
    """y = act(conv + bias + residual) for every activation, with and without a residual."""
    case = CASES[name]
    x, w, b = ref.conv_data(case, seed=1)
    kw = ref.conv_kw(case)
    with kernels.use_isa(isa):
        ref.check_fused_epilogues(
            lambda bias, act, res: kernels.conv2d(x, w, bias, activation=act, residual=res, threads=1, **kw),
            x, w, b, ACTIVATIONS, f"{name}/{isa}", **kw)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", ["3x3-s2-asym", "1x1-gemm", "dw-3x3", "group4-1x1"])
def test_conv2d_without_bias(isa, name):
    case = CASES[name]
    x, w, _ = ref.conv_data(case, seed=8)
    kw = ref.conv_kw(case)
    with kernels.use_isa(isa):
        y = kernels.conv2d(x, w, None, activation="relu", threads=1, **kw)
    ref.assert_conv_close(y, f"{name}/{isa}", x, w, act="relu", **kw)


@pytest.mark.parametrize("name", ["3x3-multitile", "1x1-gemm", "dw-3x3-s2-d2-asym"])
def test_conv2d_threads_agree_and_are_deterministic(name):
    case = CASES[name]
    x, w, b = ref.conv_data(case, seed=3)
    kw = ref.conv_kw(case)
    y1 = kernels.conv2d(x, w, b, threads=1, **kw)
    y2 = kernels.conv2d(x, w, b, threads=2, **kw)
    assert np.array_equal(y2, kernels.conv2d(x, w, b, threads=2, **kw)), "2 threads: not bitwise repeatable"
    ref.assert_close(y2, y1.astype(np.float64), ref.conv2d(x, w, **kw, absolute=True), f"{name}: 1 vs 2 threads")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", ["3x3-pad1", "1x1-gemm", "dw-3x3", "dw-5x5-C40"])
def test_conv2d_residual_in_place(isa, name):
    """The residual may be the output buffer itself (ResNet's Add + Relu in place)."""
    case = CASES[name]
    x, w, b = ref.conv_data(case, seed=4)
    kw = dict(strides=case[7], pads=case[9], dilations=case[8])
    with kernels.use_isa(isa):
        packed = kernels.pack_conv_weights(w, group=case[10])
        y = np.random.default_rng(5).standard_normal(ref.conv2d(x, w, **kw, group=case[10]).shape,
                                                     dtype=np.float32)
        res = y.copy()
        kernels.conv2d_packed(x, packed, b, residual=y, activation="relu", threads=1, out=y, **kw)
    want = ref.conv2d(x, w, b, residual=res, act="relu", group=case[10], **kw)
    scale = ref.conv2d(x, w, **kw, group=case[10], absolute=True) + np.abs(res)
    ref.assert_close(y, want, scale, f"{name}/{isa} residual in place")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", ["3x3-pad1", "1x1-gemm", "dw-3x3"])
def test_conv2d_nan_propagates(isa, name):
    case = CASES[name]
    x, w, b = ref.conv_data(case, seed=5)
    x[0, 2, 3, 0] = np.nan
    kw = ref.conv_kw(case)
    with kernels.use_isa(isa):
        y = kernels.conv2d(x, w, b, activation="relu", threads=1, **kw)
    want = ref.conv2d(x, w, b, act="relu", **kw)
    assert np.isnan(want).any()
    ref.assert_close(y, want, np.nan_to_num(ref.conv2d(x, w, **kw, absolute=True)), f"{name}/{isa} NaN")


@pytest.mark.parametrize("name", ["3x3-s2-asym", "1x1-gemm", "dw-3x3"])
def test_conv2d_empty_batch(name):
    case = CASES[name]
    x, w, b = ref.conv_data(case)
    x = x[:0]
    y = kernels.conv2d(x, w, b, **ref.conv_kw(case))
    want = ref.conv2d(x, w, b, **ref.conv_kw(case))
    assert y.shape == want.shape and y.shape[0] == 0


def test_conv2d_large_magnitudes():
    case = CASES["3x3-s2-asym"]
    x, w, b = ref.conv_data(case, seed=6)
    x *= 1e15
    kw = ref.conv_kw(case)
    y = kernels.conv2d(x, w, b, threads=1, **kw)
    ref.assert_conv_close(y, "1e15 inputs", x, w, b, **kw)


def test_packed_weights_reject_other_isa():
    if len(ISAS) < 2:
        pytest.skip("needs two ISA paths to pack for one and run on another")
    x, w, b = ref.conv_data(CASES["3x3-pad1"])
    with kernels.use_isa(ISAS[-1]):
        packed = kernels.pack_conv_weights(w)
    with kernels.use_isa("scalar"):
        with pytest.raises(KernelError, match="packed for ISA"):
            kernels.conv2d_packed(x, packed, b, pads=(1, 1, 1, 1))


def test_packed_weights_reject_other_channels():
    x, w, _ = ref.conv_data(CASES["3x3-pad1"])
    packed = kernels.pack_conv_weights(w)
    with pytest.raises(ValueError, match="weights expect 3 input channels"):
        kernels.conv2d_packed(np.zeros((1, 5, 5, 4), np.float32), packed)


@pytest.mark.parametrize("kwargs, message", [
    (dict(x=np.zeros((1, 5, 5, 3), np.float64)), "x: expected dtype float32, got float64"),
    (dict(x=np.zeros((5, 5, 3), np.float32)), "x: expected 4 dimensions"),
    (dict(x=np.zeros((1, 5, 6, 3), np.float32)[:, :, ::2]), "x: must be C-contiguous"),
    (dict(x=np.zeros((1, 5, 5, 4), np.float32)), "weights expect 3 input channels"),
    (dict(bias=np.zeros(3, np.float32)), r"bias: expected shape \(4,\)"),
    (dict(strides=(0, 1)), "strides: expected 2 integers >= 1"),
    (dict(pads=(1, 1, 1)), "pads: expected 4 integers >= 0"),
    (dict(x=np.zeros((1, 2, 2, 3), np.float32)), "larger than the padded input"),
    (dict(group=2), "group=2 must divide"),
    (dict(activation="swish9"), "activation 'swish9' unknown"),
    (dict(activation=("clip", 1.0)), "takes 2 parameter"),
    (dict(residual=np.zeros((1, 5, 5, 3), np.float32)), "residual: expected the output shape"),
    (dict(threads=0), "threads must be >= 1"),
])
def test_conv2d_bad_arguments_raise_value_error(kwargs, message):
    args = dict(x=np.ones((1, 5, 5, 3), np.float32), w=np.ones((4, 3, 3, 3), np.float32), bias=None)
    args.update({k: kwargs.pop(k) for k in ("x", "bias") if k in kwargs})
    with pytest.raises(ValueError, match=message):
        kernels.conv2d(args["x"], args["w"], args["bias"], **kwargs)


# ---- ConvTranspose -----------------------------------------------------------

# N, H, W, C, K, R, S, strides, dilations, pads, output_padding, group
TRANSPOSE_CASES = {
    "2x2-s2": (1, 7, 7, 16, 8, 2, 2, (2, 2), (1, 1), (0, 0, 0, 0), (0, 0), 1),
    "3x3-s2-pad-outpad": (2, 7, 5, 3, 5, 3, 3, (2, 2), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    "4x4-s2-p1": (1, 8, 8, 17, 3, 4, 4, (2, 2), (1, 1), (1, 1, 1, 1), (0, 0), 1),
    "3x3-s3-d2-asym": (1, 3, 4, 4, 6, 3, 3, (3, 1), (2, 2), (0, 1, 2, 0), (2, 0), 2),
    "1x1": (1, 5, 5, 7, 9, 1, 1, (1, 1), (1, 1), (0, 0, 0, 0), (0, 0), 1),
    "depthwise": (1, 5, 5, 6, 6, 3, 3, (2, 2), (1, 1), (1, 1, 1, 1), (1, 1), 6),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", list(TRANSPOSE_CASES))
def test_conv_transpose2d_matches_float64(isa, name):
    n, h, wd, c, k, r, s, strides, dil, pads, out_pad, group = TRANSPOSE_CASES[name]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, h, wd, c), dtype=np.float32)
    w = rng.standard_normal((c, k // group, r, s), dtype=np.float32)
    b = rng.standard_normal(k, dtype=np.float32)
    kw = dict(strides=strides, pads=pads, dilations=dil, output_padding=out_pad, group=group)
    with kernels.use_isa(isa):
        y = kernels.conv_transpose2d(x, w, b, activation="relu", threads=2, **kw)
    want = ref.conv_transpose2d(x, w, b, act="relu", **kw)
    ref.assert_close(y, want, ref.conv_transpose2d(x, w, **kw, absolute=True), f"{name}/{isa}")


def test_conv_transpose2d_bad_output_padding():
    x = np.ones((1, 3, 3, 2), np.float32)
    w = np.ones((2, 2, 3, 3), np.float32)
    with pytest.raises(ValueError, match="output_padding"):
        kernels.conv_transpose2d(x, w, strides=(2, 2), output_padding=(2, 0))


def test_conv_transpose2d_threads_and_empty_batch():
    n, h, wd, c, k, r, s, strides, dil, pads, out_pad, group = TRANSPOSE_CASES["3x3-s2-pad-outpad"]
    rng = np.random.default_rng(9)
    x = rng.standard_normal((n, h, wd, c), dtype=np.float32)
    w = rng.standard_normal((c, k // group, r, s), dtype=np.float32)
    kw = dict(strides=strides, pads=pads, dilations=dil, output_padding=out_pad, group=group)
    y1 = kernels.conv_transpose2d(x, w, threads=1, **kw)
    y2 = kernels.conv_transpose2d(x, w, threads=2, **kw)
    np.testing.assert_allclose(y1, y2, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(y2, kernels.conv_transpose2d(x, w, threads=2, **kw))
    empty = kernels.conv_transpose2d(x[:0], w, **kw)
    assert empty.shape == (0,) + y1.shape[1:]
