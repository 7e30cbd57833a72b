"""The Winograd F(2x2, 3x3) convolution path against float64, on every ISA.

Weights packed with pack_conv_weights(..., winograd=True) make conv2d_packed
take the Winograd path. The shapes cover its edge cases: odd output sizes
(tiles hanging over the bottom/right edge), asymmetric and zero pads (tiles
starting in the padding), channel counts that are not a multiple of any
vector width, K not a multiple of the weight panel, more tiles than one
task block (several blocks and output-channel parts on 2 threads), batch >
1 (tiles crossing images), blocks cut smaller for 2 threads (AVX2), and the fused epilogue with a residual (also in
place). The library's choice (winograd_wins) is checked where it matters.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine import kernels
import conv_reference as ref

ISAS = kernels.available_isas()

# N, H, W, C, K, pads (top, left, bottom, right)
CASES = {
    "pad1-odd-W": (1, 9, 31, 17, 40, (1, 1, 1, 1)),
    "7x7-two-images": (2, 7, 7, 20, 33, (1, 1, 1, 1)),
    "nopad-tiny": (1, 5, 6, 3, 5, (0, 0, 0, 0)),
    "asym-pads": (1, 13, 11, 64, 70, (2, 0, 1, 3)),
    "C1-K1": (1, 6, 9, 1, 1, (1, 1, 1, 1)),
    "even-14x14": (1, 14, 14, 32, 32, (1, 1, 1, 1)),
    # 16 * T * C floats per block: C = 24 -> several blocks of tiles
    "many-tiles": (1, 58, 61, 24, 48, (1, 1, 1, 1)),
    "batch3-odd": (3, 11, 12, 19, 65, (1, 2, 1, 0)),
    "C130-K97": (1, 10, 9, 130, 97, (1, 1, 1, 1)),
    "1xW-output": (1, 3, 20, 8, 16, (0, 1, 0, 1)),
    # one L2-sized block of tiles: on 2 threads AVX2 cuts it into 12-tile
    # blocks (a ragged last one, blocks crossing images), then channel parts
    "small-blocks-2-images": (2, 9, 13, 50, 40, (1, 1, 1, 1)),
}


def _data(case, seed=0):
    return ref.conv_data((*case[:5], 3, 3), seed)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", list(CASES))
def test_winograd_matches_float64(isa, name):
    case = CASES[name]
    x, w, b = _data(case)
    pads = case[5]
    with kernels.use_isa(isa):
        packed = kernels.pack_conv_weights(w, winograd=True)
        assert packed.winograd
        y1 = kernels.conv2d_packed(x, packed, b, pads=pads, threads=1)
        y2 = kernels.conv2d_packed(x, packed, b, pads=pads, threads=2)
    ref.assert_close(y1, ref.conv2d(x, w, b, pads=pads), ref.conv2d(x, w, pads=pads, absolute=True), f"{name}/{isa}")
    # every output's arithmetic is fixed by its tile: any thread count, same bits
    assert np.array_equal(y1, y2), f"{name}/{isa}: 1 and 2 threads differ"


ACTIVATIONS = [None, "relu", ("clip", -0.5, 0.7), "hardswish", "silu", "sigmoid", "gelu", ("leaky_relu", 0.1)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", ["pad1-odd-W", "batch3-odd", "C130-K97"])
def test_winograd_fused_epilogue_and_residual(isa, name):
    """y = act(conv + bias + residual): bias optional, residual optional and in place."""
    case = CASES[name]
    x, w, b = _data(case, seed=1)
    pads = case[5]
    with kernels.use_isa(isa):
        packed = kernels.pack_conv_weights(w, winograd=True)
        scale, residual = ref.check_fused_epilogues(
            lambda bias, act, res: kernels.conv2d_packed(x, packed, bias, pads=pads, activation=act, residual=res,
                                                         threads=2),
            x, w, b, ACTIVATIONS, f"{name}/{isa}", without_bias=True, pads=pads)
        # residual in place: out is the residual buffer (ResNet's Add + Relu)
        out = residual.copy()
        kernels.conv2d_packed(x, packed, b, pads=pads, activation="relu", residual=out, out=out, threads=2)
        ref.assert_close(out, ref.conv2d(x, w, b, pads=pads, residual=residual, act="relu"),
                         scale + np.abs(residual) + 1, f"{name}/{isa}/in-place")


@pytest.mark.parametrize("isa", ISAS)
def test_winograd_agrees_with_the_gemm_packing(isa):
    """The two packings of the same weights give the same convolution."""
    x, w, b = _data(CASES["asym-pads"], seed=3)
    pads = CASES["asym-pads"][5]
    with kernels.use_isa(isa):
        yw = kernels.conv2d_packed(x, kernels.pack_conv_weights(w, winograd=True), b, pads=pads, activation="relu")
        yg = kernels.conv2d_packed(x, kernels.pack_conv_weights(w), b, pads=pads, activation="relu")
    ref.assert_close(yw, yg.astype(np.float64), ref.conv2d(x, w, pads=pads, absolute=True), f"winograd vs gemm/{isa}")


@pytest.mark.parametrize("isa", ISAS)
def test_winograd_nan_positions_follow_the_receptive_fields(isa):
    """A NaN input reaches exactly the outputs whose 3x3 window holds it (the
    transforms only ever combine pixels of the same tile), as the direct sum
    does; the reference checks NaN positions. (An Inf input may come out NaN
    where the direct sum gives +-Inf: the transforms subtract pixels.)"""
    x, w, b = _data(CASES["pad1-odd-W"], seed=4)
    x[0, 3, 5, 2] = np.nan
    x[0, 0, 0, 0] = np.nan
    x[0, 8, 30, 16] = np.nan
    with kernels.use_isa(isa):
        y = kernels.conv2d_packed(x, kernels.pack_conv_weights(w, winograd=True), b, pads=(1, 1, 1, 1))
    ref.assert_close(y, ref.conv2d(x, w, b, pads=(1, 1, 1, 1)), ref.conv2d(x, w, pads=(1, 1, 1, 1), absolute=True),
                     f"nan/{isa}")
    assert np.isnan(y).any()


def test_winograd_rejects_what_it_cannot_compute():
    x, w, _ = _data(CASES["pad1-odd-W"])
    packed = kernels.pack_conv_weights(w, winograd=True)
    with pytest.raises(Exception, match="Winograd.*3x3, stride-1"):
        kernels.conv2d_packed(x, packed, strides=(2, 2), pads=(1, 1, 1, 1))
    with pytest.raises(Exception, match="Winograd.*3x3, stride-1"):
        kernels.conv2d_packed(x, packed, dilations=(2, 2), pads=(2, 2, 2, 2))
    with pytest.raises(ValueError, match="Winograd.*5x5"):
        kernels.pack_conv_weights(np.ones((4, 3, 5, 5), np.float32), winograd=True)
    with pytest.raises(ValueError, match="Winograd.*groups 2"):
        kernels.pack_conv_weights(np.ones((4, 3, 3, 3), np.float32), group=2, winograd=True)


def test_winograd_wins_where_it_was_measured_faster():
    wins = kernels.winograd_wins
    assert wins((1, 56, 56, 64), (64, 64, 3, 3), pads=(1, 1, 1, 1))
    assert wins((1, 14, 14, 256), (256, 256, 3, 3), pads=(1, 1, 1, 1))
    assert not wins((1, 7, 7, 512), (512, 512, 3, 3), pads=(1, 1, 1, 1)), "512x512 weights stream too slowly"
    assert not wins((1, 7, 7, 256), (256, 256, 3, 3), pads=(1, 1, 1, 1)), "16 tiles are too few"
    assert not wins((1, 56, 56, 64), (128, 64, 3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    assert not wins((1, 56, 56, 64), (64, 64, 3, 3), dilations=(2, 2), pads=(2, 2, 2, 2))
    assert not wins((1, 56, 56, 8), (8, 8, 3, 3), pads=(1, 1, 1, 1)), "8 channels: too short products"
    # spatial size unknown (a converter packing ahead of any input): channels decide
    assert wins(None, (128, 128, 3, 3))
    assert not wins(None, (512, 512, 3, 3))


def test_winograd_needs_more_input_channels_on_avx2():
    # AVX2's 6-pixel tiles lose to the direct path on 16-32-long products
    # (conv_direct_avx2.c: measured); AVX-512 and scalar keep 16 as before
    if "avx2" not in ISAS:
        pytest.skip("this machine cannot run the avx2 kernels")
    with kernels.use_isa("avx2"):
        wins = kernels.winograd_wins
        assert not wins((1, 80, 80, 16), (16, 16, 3, 3), pads=(1, 1, 1, 1))
        assert not wins((1, 40, 40, 32), (64, 32, 3, 3), pads=(1, 1, 1, 1))
        assert not wins(None, (32, 32, 3, 3))
        assert wins((1, 40, 40, 48), (48, 48, 3, 3), pads=(1, 1, 1, 1))
        assert wins((1, 40, 40, 96), (64, 96, 3, 3), pads=(1, 1, 1, 1))
    with kernels.use_isa("scalar"):
        assert kernels.winograd_wins((1, 80, 80, 16), (16, 16, 3, 3), pads=(1, 1, 1, 1))
