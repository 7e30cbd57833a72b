"""matmul_bf16 at every level against a float64 reference.

Error bounds (kernels/include/aie_gemm_lowp.h): bf16 keeps 8 significant
bits, so rounding an input costs at most 2^-9 relative; products of two bf16
are exact in fp32 and K of them are summed in fp32. Against the float64
product of the bf16-ROUNDED inputs only the summation errs:
    |C - ref_rounded| <= (K + 2) * 2^-24 * sum_k |a~||b~|
and against the float64 product of the fp32 inputs
    |C - ref| <= (2^-8 + (K + 2) * 2^-24) * sum_k |a||b|.
"""

from __future__ import annotations

import numpy as np
import pytest
from lowp_support import assert_refused

from engine import kernels
from engine.kernels.gemm_lowp import matmul_bf16, pack_b_bf16

SIZES = [(1, 1, 1), (1, 3, 15), (3, 15, 16), (15, 16, 17), (16, 17, 31), (17, 31, 32), (31, 33, 33), (33, 63, 63),
         (63, 65, 65), (65, 1, 129), (5, 200, 300), (130, 40, 1000),
         (37, 45, 700)]  # K slices of 512: a whole one and a short one


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns (uint16), round to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_round(x: np.ndarray) -> np.ndarray:
    return (bf16_bits(x).astype(np.uint32) << 16).view(np.float32)


def _check(got, a, b, *, bias=None, relu=False, a_is_bf16=False):
    k = a.shape[1]
    ar, br = bf16_round(a).astype(np.float64), bf16_round(b).astype(np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref_r, ref = ar @ br, a64 @ b64
    mag_r, mag = np.abs(ar) @ np.abs(br) + 1e-30, np.abs(a64) @ np.abs(b64) + 1e-30
    if bias is not None:  # its fp32 addition rounds relative to |bias| too
        ref_r, ref = ref_r + bias, ref + bias
        mag_r, mag = mag_r + np.abs(bias), mag + np.abs(bias)
    if relu:
        ref_r, ref = np.maximum(ref_r, 0), np.maximum(ref, 0)
    assert got.dtype == np.float32
    err_r = np.abs(got - ref_r) / ((k + 2) * 2.0**-24 * mag_r)
    assert err_r.max() <= 1.0, f"{err_r.max():.3g} of the summation bound (K={k})"
    if not a_is_bf16:
        err = np.abs(got - ref) / ((2.0**-8 + (k + 2) * 2.0**-24) * mag)
        assert err.max() <= 1.0, f"{err.max():.3g} of the input-rounding bound (K={k})"


@pytest.mark.parametrize("m,n,k", SIZES)
def test_matches_float64(level, m, n, k):
    rng = np.random.default_rng(m * 1009 + n * 31 + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    _check(matmul_bf16(a, pack_b_bf16(b)), a, b)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_bf16_input_bias_relu_threads(level, threads):
    rng = np.random.default_rng(7)
    m, n, k = 97, 70, 161
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    packed = pack_b_bf16(np.ascontiguousarray(b.T), trans_b=True)
    got = matmul_bf16(bf16_bits(a), packed, bias=bias, activation="relu", threads=threads)
    _check(got, bf16_round(a), b, bias=bias, relu=True, a_is_bf16=True)
    # bitwise the same for any thread count
    assert np.array_equal(got, matmul_bf16(bf16_bits(a), packed, bias=bias, activation="relu", threads=1))


def test_packed_b_runs_at_every_level():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((40, 70)).astype(np.float32)
    b = rng.standard_normal((70, 50)).astype(np.float32)
    packed = pack_b_bf16(b)
    for name in kernels.available_levels():
        with kernels.use_level(name):
            _check(matmul_bf16(a, packed), a, b)


def _gelu64(x: np.ndarray) -> np.ndarray:
    from math import erfc, sqrt

    return np.array([v * 0.5 * erfc(-v / sqrt(2.0)) if np.isfinite(v) else (v if v > 0 else -0.0) for v in x.ravel()],
                    np.float64).reshape(x.shape)


def _gelu_inputs(m: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """K = 1 and B = ones: the summed x is A's value itself (bf16, exact), so
    the epilogue's GELU meets chosen values: the erf region, both tails, far
    tails where the gate underflows, infinities."""
    rng = np.random.default_rng(m * 7 + n)
    x = np.concatenate([rng.standard_normal(m // 2) * 3, rng.uniform(-14, 14, m - m // 2 - 6),
                        [0.0, -0.0, -40.0, 40.0, np.inf, -np.inf]]).astype(np.float32)
    return bf16_round(x).reshape(m, 1), np.ones((1, n), np.float32), bf16_round(x).astype(np.float64)


@pytest.mark.parametrize("m,n", [(37, 1), (71, 33), (130, 17)])
def test_gelu_epilogue_to_bf16_accuracy(level, m, n):
    """The bf16 GEMM's GELU (include/aie_gemm_lowp.h): within
    (2^-18 + x^2 2^-23) |gelu(x)| of float64, -0 at -inf, inf at inf."""
    a, b, x = _gelu_inputs(m, n)
    got = matmul_bf16(a, pack_b_bf16(b), activation="gelu").astype(np.float64)
    ref = _gelu64(x)[:, None].repeat(n, axis=1)
    xs = x[:, None]
    finite = np.isfinite(xs).ravel()
    tol = (2.0**-18 + np.where(np.isfinite(xs), xs, 0) ** 2 * 2.0**-23) * np.abs(ref) + 1e-38
    err = np.abs(got - ref)[finite] / tol[finite]
    assert err.max() <= 1.0, f"{err.max():.3g} of the bound at x={x[finite][np.argmax(err.max(axis=1))]}"
    assert np.all(got[x == np.inf] == np.inf)
    assert np.all(got[x == -np.inf] == 0) and np.all(np.signbit(got[x == -np.inf]))
    assert np.all(np.signbit(got[x == -40.0]))


def test_gelu_epilogue_same_bits_on_every_level():
    """K = 1: the sums are exact on every level (longer sums are added in a
    level's own order), so the GELU alone decides the bits."""
    a, b, _ = _gelu_inputs(67, 45)
    packed, bias = pack_b_bf16(b), np.random.default_rng(3).standard_normal(45).astype(np.float32)
    outs = {}
    for name in kernels.available_levels():
        with kernels.use_level(name):
            outs[name] = matmul_bf16(a, packed, bias=bias, activation="gelu", threads=2)
    first = next(iter(outs.values()))
    for name, got in outs.items():
        assert np.array_equal(got, first, equal_nan=True), name


def test_row_slices_and_out():
    rng = np.random.default_rng(2)
    big = rng.standard_normal((50, 90)).astype(np.float32)
    a = big[5:45, 10:80]  # lda > K
    b = rng.standard_normal((70, 33)).astype(np.float32)
    out_big = np.zeros((40, 40), np.float32)
    got = matmul_bf16(a, pack_b_bf16(b), out=out_big[:, 3:36])
    assert got.base is out_big or got is not None
    _check(out_big[:, 3:36], np.ascontiguousarray(a), b)
    assert not out_big[:, :3].any() and not out_big[:, 36:].any()


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda p: matmul_bf16(np.zeros((2, 5), np.float32), p), "a is 2x5 but the packed B is 4x3"),
        (lambda p: matmul_bf16(np.zeros((2, 4), np.float64), p), "a must be float32 or uint16, got float64"),
        (lambda p: matmul_bf16(np.zeros((2, 4), np.float32), "B"), "packed must be a PackedLowpB"),
        (lambda p: matmul_bf16(np.zeros((2, 4), np.float32), p, out=np.zeros((2, 2), np.float32)),
         "out has shape (2, 2), expected (2, 3)"),
        (lambda p: matmul_bf16(np.zeros((2, 4), np.float32), p, activation="nope"), "unknown activation 'nope'"),
        (lambda p: pack_b_bf16(np.zeros((4, 3), np.int8)), "b must be float32, got int8"),
    ],
)
def test_bad_arguments_raise_value_error(call, message):
    assert_refused(call, pack_b_bf16(np.zeros((4, 3), np.float32)), message)
