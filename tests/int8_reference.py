"""What tests comparing our int8 kernels with onnxruntime's share: whether
onnxruntime's u8 x s8 kernels are exact on this CPU, weights drawn so that
they are, and an exact integer reference for the full-range case.

Why: without VNNI (AVX2, or AVX-512 without VNNI) onnxruntime's MLAS u8 x s8
GEMM/conv kernels multiply with VPMADDUBSW, which adds each pair of u8 x s8
products into int16 with saturation: with activations up to 255 and weights
up to 127, 2 * 255 * 127 = 64770 > 32767, so onnxruntime's sums are clipped
where ours (exact int32 sums) are not. onnxruntime's quantisation docs
recommend 7-bit weights (reduce_range) on such CPUs for this reason: then
2 * 255 * 64 = 32640 fits, its sums are exact, and byte identity with it still
tests ours. With VNNI (VPDPBUSD sums into int32) or AMX it is exact at full
range. The full-range path is then checked against int_conv / int_matmul."""

from __future__ import annotations

import numpy as np

from engine.kernels.levels import available_levels

# VPDPBUSD on ymm (AVX-VNNI) or zmm (AVX-512 VNNI; AMX hosts have it too).
ORT_INT8_EXACT_AT_FULL_RANGE = bool({"avx_vnni", "avx512_vnni"} & set(available_levels()))
# 7 bits, as onnxruntime.quantization's reduce_range: 2 * 255 * 64 = 32640 fits int16.
REDUCED_WEIGHT_RANGE = (-64, 63)
FULL_WEIGHT_RANGE = (-127, 127)


def ort_exact_weights(rng: np.random.Generator, shape, full_range: bool = False) -> np.ndarray:
    """Random int8 weights onnxruntime's u8 x s8 kernels sum exactly on this CPU (or all of
    -127..127 when full_range), one draw either way, so the rest of a seeded test's data does not
    depend on the CPU."""
    lo, hi = FULL_WEIGHT_RANGE if full_range or ORT_INT8_EXACT_AT_FULL_RANGE else REDUCED_WEIGHT_RANGE
    return rng.integers(lo, hi + 1, shape).astype(np.int8)


def quantize_u8(x: np.ndarray, scale, zero) -> np.ndarray:
    """QuantizeLinear to uint8 (round half to even, saturate), as int64."""
    return np.clip(np.rint(np.asarray(x, np.float32) / np.float32(scale)) + int(zero), 0, 255).astype(np.int64)


def int_matmul(xq: np.ndarray, x_zero, wq: np.ndarray) -> np.ndarray:
    """(xq - x_zero) @ wq summed exactly in int64: xq [..., K], wq [K, N]."""
    return (np.asarray(xq, np.int64) - int(x_zero)) @ np.asarray(wq, np.int64)


def int_conv(xq: np.ndarray, x_zero, wq: np.ndarray, strides, pads) -> np.ndarray:
    """2-D convolution of (xq - x_zero) [N, C, H, W] with wq [K, C, kh, kw] (group 1, no dilation),
    summed exactly in int64; pads [top, left, bottom, right] hold x_zero (real zero)."""
    x = np.asarray(xq, np.int64) - int(x_zero)
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    k, c, kh, kw = wq.shape
    sh, sw = strides
    oh, ow = (x.shape[2] - kh) // sh + 1, (x.shape[3] - kw) // sw + 1
    cols = np.stack([x[:, :, i:i + sh * oh:sh, j:j + sw * ow:sw] for i in range(kh) for j in range(kw)], axis=2)
    # cols [N, C, kh*kw, OH, OW] against w [K, C, kh*kw]
    return np.einsum("ncpyx,kcp->nkyx", cols, np.asarray(wq, np.int64).reshape(k, c, kh * kw))


def requantize_u8(acc: np.ndarray, x_scale, w_scale, y_scale, y_zero) -> np.ndarray:
    """int32 sums to uint8 the way onnxruntime's QLinear kernels (and ours) do: one float32
    multiplier x_scale * w_scale / y_scale per output channel (w_scale broadcast over acc's
    channel axis by the caller), round half to even, saturate."""
    m = (np.float32(x_scale) * np.asarray(w_scale, np.float32) / np.float32(y_scale)).astype(np.float32)
    return np.clip(np.rint(acc.astype(np.float32) * m) + int(y_zero), 0, 255).astype(np.uint8)
