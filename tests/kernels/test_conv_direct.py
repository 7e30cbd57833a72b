"""The direct NHWC convolution kernel (aie_conv2d_set_algo(DIRECT)) against float64, on every ISA.

The automatic choice sends only some shapes to the direct kernel; these tests
force it (and the implicit GEMM, for comparison) through the library's
aie_conv2d_set_algo, on shapes chosen for its edge cases: rows split into
balanced tiles of unequal heights (Q not a multiple of MR), border taps on both sides,
strides, dilation, asymmetric pads, taps wholly in the padding, and the
fused epilogue with a residual (also in place).
"""

from __future__ import annotations

import ctypes
from contextlib import contextmanager

import numpy as np
import pytest

from engine import kernels
from engine.kernels._lib import lib
from engine.kernels.conv import ConvParams
import conv_reference as ref

ISAS = kernels.available_isas()
ALGO_AUTO, ALGO_GEMM, ALGO_DIRECT, ALGO_DEPTHWISE = 0, 1, 2, 3


@contextmanager
def conv_algo(algo: int):
    fn = lib().aie_conv2d_set_algo
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
    old = fn(algo)
    try:
        yield
    finally:
        fn(old)


def algo_of(x_shape, w_shape, strides, pads, dilations) -> int:
    n, h, w, c = x_shape
    k, _, r, s = w_shape
    p = ConvParams(n, h, w, c, k, r, s, *strides, *dilations, *pads, 1, 0, 0)
    fn = lib().aie_conv2d_algo
    fn.argtypes, fn.restype = [ctypes.POINTER(ConvParams)], ctypes.c_int
    return fn(ctypes.byref(p))


# N, H, W, C, K, R, S, strides, dilations, pads (top, left, bottom, right)
CASES = {
    "3x3-pad1-W31": (1, 9, 31, 17, 40, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1)),
    "3x3-s2-asym": (2, 17, 33, 5, 33, 3, 3, (2, 2), (1, 1), (0, 1, 2, 2)),
    "3x3-d2": (1, 11, 37, 7, 16, 3, 3, (1, 1), (2, 2), (2, 2, 2, 2)),
    "3x3-d(1,3)-asym": (1, 8, 40, 3, 17, 3, 3, (1, 1), (1, 3), (0, 3, 1, 0)),
    "stem-7x7-s2": (1, 37, 45, 3, 64, 7, 7, (2, 2), (1, 1), (3, 3, 3, 3)),
    "5x5-s3-nopad": (1, 20, 64, 6, 31, 5, 5, (3, 3), (1, 1), (0, 0, 0, 0)),
    "1x1-s2": (1, 9, 45, 16, 33, 1, 1, (2, 2), (1, 1), (0, 0, 0, 0)),
    "3x1-rect-bigpad": (1, 4, 29, 9, 18, 3, 1, (1, 1), (1, 1), (3, 2, 3, 4)),
    "1x5-wide": (2, 3, 30, 4, 7, 1, 5, (1, 1), (1, 1), (0, 2, 0, 2)),
    "3x3-C128": (1, 5, 16, 128, 64, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1)),
    "1x1-s1-flat": (3, 5, 7, 19, 45, 1, 1, (1, 1), (1, 1), (0, 0, 0, 0)),
    # <= half a weight panel of output channels: the narrow (2*MR pixel) tiles
    "narrow-3x3-s2-K16": (1, 13, 75, 3, 16, 3, 3, (2, 2), (1, 1), (1, 1, 1, 1)),
    "narrow-3x3-K8-Q30": (2, 4, 30, 16, 8, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1)),
    "narrow-5x5-K5-d2": (1, 9, 41, 6, 5, 5, 5, (1, 1), (2, 2), (4, 3, 4, 5)),
    "1x1-s1-tiny": (1, 2, 5, 8, 20, 1, 1, (1, 1), (1, 1), (0, 0, 0, 0)),
    # short and ragged rows: half tiles, shifted whole and half tiles
    "3x3-Q7": (1, 7, 7, 20, 33, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1)),
    "3x3-Q8": (2, 8, 8, 9, 64, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1)),
    "3x3-Q17": (1, 6, 17, 11, 35, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1)),
    "3x3-Q23-s2": (1, 9, 46, 8, 16, 3, 3, (2, 2), (1, 1), (1, 1, 1, 1)),
    # border tiles read one zero-padded input strip: padding on both sides of one tile,
    # and a tile whose strip is all padding (pad 40 on a 2-pixel row)
    "strip-s2-pad4-5": (1, 5, 9, 3, 16, 3, 3, (2, 2), (1, 1), (1, 4, 1, 5)),
    "strip-all-pad": (1, 3, 2, 3, 13, 3, 3, (1, 1), (1, 1), (0, 40, 0, 0)),
    "strip-wide-K40": (1, 4, 21, 5, 40, 3, 3, (1, 1), (1, 1), (1, 2, 1, 3)),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", list(CASES))
def test_direct_matches_float64(isa, name):
    case = CASES[name]
    x, w, b = ref.conv_data(case)
    kw = ref.conv_kw(case)
    with kernels.use_isa(isa), conv_algo(ALGO_DIRECT):
        assert algo_of(x.shape, w.shape, case[7], case[9], case[8]) == ALGO_DIRECT, f"{name}: direct not taken"
        y = kernels.conv2d(x, w, b, threads=1, **kw)
    ref.assert_conv_close(y, f"{name}/{isa}", x, w, b, **kw)


ACTIVATIONS = [None, "relu", ("clip", -0.5, 0.7), "hardswish", "silu", "sigmoid", "gelu"]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", ["3x3-s2-asym", "stem-7x7-s2", "1x5-wide", "1x1-s1-flat", "narrow-3x3-K8-Q30"])
def test_direct_fused_epilogue_and_residual(isa, name):
    """y = act(conv + bias + residual), bias optional, residual optional and in place."""
    case = CASES[name]
    x, w, b = ref.conv_data(case, seed=1)
    kw = ref.conv_kw(case)
    with kernels.use_isa(isa), conv_algo(ALGO_DIRECT):
        scale, residual = ref.check_fused_epilogues(
            lambda bias, act, res: kernels.conv2d(x, w, bias, activation=act, residual=res, threads=1, **kw),
            x, w, b, ACTIVATIONS, f"{name}/{isa}", without_bias=True, **kw)
        packed = kernels.pack_conv_weights(w)
        y = residual.copy()
        kernels.conv2d_packed(x, packed, b, residual=y, activation="relu", threads=2, out=y, **kw)
    ref.assert_close(y, ref.conv2d(x, w, b, residual=residual, act="relu", **kw), scale + np.abs(residual) + 1,
                     f"{name}/{isa} residual in place")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", ["narrow-3x3-s2-K16", "narrow-5x5-K5-d2", "3x3-s2-asym", "1x1-s1-flat"])
def test_direct_silu_on_accumulators_matches_unary_silu(isa, name):
    """SiLU is applied to the tile's registers, not as a pass over the stored rows: the same
    function on the same values, so bitwise the standalone silu of the unfused conv's output,
    on narrow and wide tiles, ragged channel tails (K 5, 33, 45), and for outputs far in both
    tails, NaN and inf (x scaled by 40, a few inputs non-finite)."""
    case = CASES[name]
    x, w, b = ref.conv_data(case, seed=7)
    x *= 40
    x.flat[::97] = np.nan
    x.flat[5::211] = np.inf
    kw = ref.conv_kw(case)
    with kernels.use_isa(isa), conv_algo(ALGO_DIRECT):
        fused = kernels.conv2d(x, w, b, activation="silu", threads=2, **kw)
        plain = kernels.conv2d(x, w, b, threads=1, **kw)
        want = kernels.silu(plain, threads=1)
    assert np.isnan(plain).any() and (np.abs(plain) > 100).any()
    assert np.array_equal(fused.view(np.uint32), want.view(np.uint32)), f"{name}/{isa}"
    finite = np.isfinite(plain)
    p64 = plain[finite].astype(np.float64)
    with np.errstate(over="ignore"):
        want64 = p64 / (1.0 + np.exp(-p64))
    ref.assert_close(fused[finite], want64, np.abs(p64), f"{name}/{isa} vs float64")


@pytest.mark.parametrize("isa", ISAS)
def test_direct_nan_and_inf_propagate(isa):
    case = CASES["3x3-pad1-W31"]
    x, w, b = ref.conv_data(case, seed=5)
    x[0, 0, 0, 0] = np.nan  # a border pixel: reaches outputs through copied taps
    x[0, 4, 15, 3] = np.inf  # an interior one
    with kernels.use_isa(isa), conv_algo(ALGO_DIRECT):
        y = kernels.conv2d(x, w, b, threads=1, **ref.conv_kw(case))
    want = ref.conv2d(x, w, b, **ref.conv_kw(case))
    assert np.isnan(want).any() and np.isinf(want).any()
    assert np.array_equal(np.isnan(y), np.isnan(want)) and np.array_equal(np.isinf(y), np.isinf(want))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", ["3x3-s2-asym", "stem-7x7-s2", "1x1-s1-flat", "narrow-3x3-s2-K16"])
def test_direct_deterministic_across_threads(isa, name):
    """Each output's arithmetic does not depend on the worker: 1, 2 and 3 threads agree bitwise."""
    case = CASES[name]
    x, w, b = ref.conv_data(case, seed=3)
    with kernels.use_isa(isa), conv_algo(ALGO_DIRECT):
        ys = [kernels.conv2d(x, w, b, activation="relu", threads=t, **ref.conv_kw(case)) for t in (1, 2, 3, 2)]
    for y in ys[1:]:
        assert np.array_equal(y, ys[0])


@pytest.mark.parametrize("isa", ISAS)
def test_direct_and_gemm_paths_agree(isa):
    case = CASES["stem-7x7-s2"]
    x, w, b = ref.conv_data(case, seed=4)
    kw = ref.conv_kw(case)
    with kernels.use_isa(isa):
        with conv_algo(ALGO_DIRECT):
            yd = kernels.conv2d(x, w, b, threads=1, **kw)
        with conv_algo(ALGO_GEMM):
            assert algo_of(x.shape, w.shape, case[7], case[9], case[8]) == ALGO_GEMM
            yg = kernels.conv2d(x, w, b, threads=1, **kw)
    ref.assert_close(yd, yg.astype(np.float64), 2 * ref.conv2d(x, w, **kw, absolute=True), f"{isa}: direct vs gemm")


def test_automatic_choice():
    """ResNet's 3x3 layers, the 7x7 stem and 1x1 stride-1 layers (one long row of pixels) go
    direct under AUTO; a 3x3 layer with 1024 input channels (R*S*C beyond the limit), a
    grouped one and rows shorter than half a tile take the implicit GEMM."""
    with conv_algo(ALGO_AUTO):
        for isa in ISAS:
            with kernels.use_isa(isa):
                assert algo_of((1, 56, 56, 64), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)) == ALGO_DIRECT
                assert algo_of((1, 224, 224, 3), (64, 3, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1)) == ALGO_DIRECT
                assert algo_of((1, 14, 14, 256), (256, 256, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)) == ALGO_DIRECT
                assert algo_of((1, 14, 14, 64), (64, 64, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)) == ALGO_DIRECT
                assert algo_of((1, 7, 7, 512), (512, 512, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)) == ALGO_DIRECT
                assert algo_of((1, 8, 8, 64), (128, 64, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)) == ALGO_DIRECT
                # 3x3 output rows: fewer pixels than half an AVX-512 tile (7)
                if isa == "avx512":
                    assert algo_of((1, 3, 3, 64), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)) == ALGO_GEMM
                assert algo_of((1, 14, 14, 1024), (64, 1024, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)) == ALGO_GEMM
