"""matmul_u8s8 at every level, bit-exact against a numpy int64 reference.

int32 sums sum_k (a - a_zero) * b must be exact on every path (the AVX2 path
widens to int16 and uses vpmaddwd because vpmaddubsw saturates: the
all-255 x all--128 cases would catch it). The fp32 and uint8 outputs follow
the formulas of kernels/include/aie_gemm_lowp.h, computed here with numpy in
float32, and must match to the bit / byte.
"""

from __future__ import annotations

import numpy as np
import pytest
from lowp_support import assert_refused

from engine import kernels
from engine.errors import KernelError
from engine.kernels.gemm_lowp import matmul_u8s8, pack_b_s8

DIMS = (1, 3, 15, 16, 17, 31, 33, 63, 65)
# K below, at and above the int8 tile depth (64) and the VNNI quad (4)
SIZES = [(m, n, k) for m, n, k in zip(DIMS, DIMS[3:] + DIMS[:3], DIMS[6:] + DIMS[:6])] + [
    (1, 1, 1), (65, 65, 65), (7, 100, 129), (130, 70, 300), (2, 3, 1000),
    (9, 40, 2100)]  # K slices of 1024: two whole and a short one


def ref_int32(a, b, a_zero):
    return (a.astype(np.int64) - a_zero) @ b.astype(np.int64)


def requant_ref(acc, bias, a_scale, b_scale, y_scale, y_zero):
    """The header's definition in numpy float32: round half to even, then the zero point, then saturate."""
    mult = np.float32(a_scale) * b_scale.astype(np.float32) / np.float32(y_scale)
    y = (acc + bias).astype(np.int32).astype(np.float32) * mult
    return np.clip(np.rint(y) + y_zero, 0, 255).astype(np.uint8)


def _data(rng, m, n, k, fill):
    if fill == "saturate":
        return np.full((m, k), 255, np.uint8), np.full((k, n), -128, np.int8)
    return (rng.integers(0, 256, (m, k), dtype=np.uint8), rng.integers(-128, 128, (k, n), dtype=np.int8))


@pytest.mark.parametrize("fill", ["random", "saturate"])
@pytest.mark.parametrize("m,n,k", SIZES)
def test_int32_exact(level, m, n, k, fill):
    rng = np.random.default_rng(m * 7919 + n * 31 + k)
    a, b = _data(rng, m, n, k, fill)
    a_zero = int(rng.integers(0, 256))
    packed = pack_b_s8(b)
    assert np.array_equal(matmul_u8s8(a, packed, a_zero=a_zero), ref_int32(a, b, a_zero))
    assert np.array_equal(matmul_u8s8(a, packed), ref_int32(a, b, 0))


@pytest.mark.parametrize("m,n,k", [(17, 33, 65), (64, 64, 64), (5, 129, 200)])
def test_float32_dequantised_with_bias_and_activation(level, m, n, k):
    rng = np.random.default_rng(k)
    a, b = _data(rng, m, n, k, "random")
    b_scale = rng.uniform(0.001, 0.01, n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    got = matmul_u8s8(a, pack_b_s8(b), a_zero=128, out_dtype="float32", a_scale=0.05, b_scale=b_scale, bias=bias,
                      activation="relu")
    acc = ref_int32(a, b, 128).astype(np.float32)
    want = np.maximum(acc * (np.float32(0.05) * b_scale) + bias, np.float32(0))
    assert got.dtype == np.float32 and np.array_equal(got, want)


@pytest.mark.parametrize("fill", ["random", "saturate"])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (17, 33, 65), (31, 15, 63), (40, 100, 257)])
def test_uint8_requantised(level, m, n, k, fill):
    rng = np.random.default_rng(m + n + k)
    a, b = _data(rng, m, n, k, fill)
    b_scale = rng.uniform(0.001, 0.01, n).astype(np.float32)
    bias = rng.integers(-5000, 5000, n, dtype=np.int32)
    y_scale, y_zero = 0.02 * k ** 0.5, 120
    got = matmul_u8s8(a, pack_b_s8(b), a_zero=3, out_dtype="uint8", a_scale=0.03, b_scale=b_scale, y_scale=y_scale,
                      y_zero=y_zero, bias=bias)
    want = requant_ref(ref_int32(a, b, 3), bias, 0.03, b_scale, y_scale, y_zero)
    assert got.dtype == np.uint8 and np.array_equal(got, want)
    if fill == "random":
        assert 0 < np.count_nonzero((got > 0) & (got < 255)), "the case should not saturate everywhere"


def test_ties_round_to_even():
    """acc * multiplier landing exactly on .5: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> 0, -1.5 -> -2."""
    a = np.array([[1], [3], [5], [255], [0]], np.uint8)  # a_zero 0; -1 * 1 via b = -1 below
    b = np.array([[1]], np.int8)
    got = matmul_u8s8(a, pack_b_s8(b), out_dtype="uint8", a_scale=0.5, b_scale=1.0, y_scale=1.0, y_zero=10)
    # acc * 0.5 = 0.5, 1.5, 2.5, 127.5, 0 -> rounded 0, 2, 2, 128, 0 -> + 10, saturated at 255
    assert got.reshape(-1).tolist() == [10, 12, 12, 138, 10]
    neg = matmul_u8s8(a[:2], pack_b_s8(-b), out_dtype="uint8", a_scale=0.5, b_scale=1.0, y_scale=1.0, y_zero=10)
    assert neg.reshape(-1).tolist() == [10, 8]  # -0.5 -> -0, -1.5 -> -2


def test_outputs_identical_across_levels_and_threads():
    rng = np.random.default_rng(5)
    a, b = _data(rng, 97, 130, 200, "random")
    packed = pack_b_s8(np.ascontiguousarray(b.T), trans_b=True)
    b_scale = rng.uniform(0.001, 0.01, 130).astype(np.float32)
    kw = dict(a_zero=77, out_dtype="uint8", a_scale=0.04, b_scale=b_scale, y_scale=0.3, y_zero=128)
    first = None
    for name in kernels.available_levels():
        with kernels.use_level(name):
            for threads in (1, 2, 3):
                got = matmul_u8s8(a, packed, threads=threads, **kw)
                first = got if first is None else first
                assert np.array_equal(got, first), f"level {name}, {threads} threads"


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda p: matmul_u8s8(np.zeros((2, 5), np.uint8), p), "a is 2x5 but the packed B is 4x3"),
        (lambda p: matmul_u8s8(np.zeros((2, 4), np.int8), p), "a must be uint8, got int8"),
        (lambda p: matmul_u8s8(np.zeros((2, 4), np.uint8), p, a_zero=256), "a_zero must be an integer in 0..255"),
        (lambda p: matmul_u8s8(np.zeros((2, 4), np.uint8), p, out_dtype="int16"), "out_dtype 'int16' is not one of"),
        (lambda p: matmul_u8s8(np.zeros((2, 4), np.uint8), p, out_dtype="uint8", a_scale=1.0, b_scale=[1, 2]),
         "b_scale has 2 values, expected 1 or N=3"),
        (lambda p: matmul_u8s8(np.zeros((2, 4), np.uint8), p, bias=np.zeros(3, np.float32)),
         "bias and activation need out_dtype float32 or uint8"),
        (lambda p: pack_b_s8(np.zeros((40000, 2), np.int8)), "K=40000 is above 32768"),
        (lambda p: pack_b_s8(np.zeros((4, 3), np.uint8)), "b must be int8, got uint8"),
    ],
)
def test_bad_arguments_raise_value_error(call, message):
    assert_refused(call, pack_b_s8(np.zeros((4, 3), np.int8)), message)


def test_bad_scale_is_a_kernel_error_naming_it():
    packed = pack_b_s8(np.zeros((4, 3), np.int8))
    with pytest.raises(KernelError, match=r"aie_gemm_u8s8: y_scale=0 must be finite and > 0"):
        matmul_u8s8(np.zeros((2, 4), np.uint8), packed, out_dtype="uint8", a_scale=1.0, b_scale=1.0, y_scale=0.0)
