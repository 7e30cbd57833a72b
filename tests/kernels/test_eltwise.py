"""Elementwise kernels against numpy in float64 on every ISA path."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine import kernels as K

SIZES = (0, 1, 3, 7, 17, 31, 1023)


def rand(shape, seed, scale=4.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def ulp_close(got, want64, max_ulp, atol=0.0):
    """|got - want| <= max_ulp ulps of float32(want) (or atol); NaNs must match."""
    want32 = want64.astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want64)), "NaN positions differ"
    ok = ~np.isnan(want64)
    g, w = got[ok].astype(np.float64), want64[ok]
    inf = np.isinf(w32 := want32[ok])
    assert np.array_equal(g[inf], w32[inf].astype(np.float64)), "infinities differ"
    fin = ~inf
    ulp = np.spacing(np.abs(w32[fin])).astype(np.float64)
    err = np.abs(g[fin] - w[fin])
    bad = err > np.maximum(max_ulp * ulp, atol)
    assert not bad.any(), f"max error {float((err / ulp).max()):.2f} ulp at x index {np.argmax(err / ulp)}"


def erf64(x):
    return np.vectorize(math.erf, otypes=[float])(x)


def erfc64(x):
    return np.vectorize(math.erfc, otypes=[float])(x)


# name -> (float64 reference, max ulp on SIMD paths, test range scale)
REFS = {
    "relu": (lambda x: np.maximum(x, 0), 0),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), 2.5),
    "tanh": (np.tanh, 2),
    "erf": (erf64, 2),
    "exp": (np.exp, 1.5),
    "sqrt": (np.sqrt, 0.5),
    "reciprocal": (lambda x: 1 / x, 0.5),
    "abs": (np.abs, 0),
    "neg": (np.negative, 0),
    "floor": (np.floor, 0),
    "ceil": (np.ceil, 0),
    "round": (np.round, 0),  # numpy rounds half to even, as ONNX
    "sign": (np.sign, 0),
    "silu": (lambda x: x / (1 + np.exp(-x)), 3),
    "softplus": (lambda x: np.log1p(np.exp(x)), 3),
    "hardswish": (lambda x: x * np.clip(x.astype(np.float32) * np.float32(1 / 6) + np.float32(0.5), 0, 1), 1),
}


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", sorted(REFS))
def test_unary_matches_float64(isa, op, n):
    ref, max_ulp = REFS[op]
    x = rand(n, n + len(op))
    if op in ("sqrt",):
        x = np.abs(x)
    if op == "round":
        x[: n // 2] = np.round(x[: n // 2]) + 0.5  # exact halves
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
    ulp_close(getattr(K, op)(x), want, max(max_ulp, 0.5))


def test_log_over_wide_range(isa):
    x = np.exp(np.random.default_rng(1).uniform(-80, 80, 1023)).astype(np.float32)
    ulp_close(K.log(x), np.log(x.astype(np.float64)), 1.5)


def test_gelu_both_forms(isa):
    x = np.concatenate([rand(1023, 2), np.linspace(-14, 10, 511, dtype=np.float32)])
    d = x.astype(np.float64)
    ulp_close(K.gelu(x), 0.5 * d * erfc64(-d / math.sqrt(2)), 5)
    t = K.gelu(x, approximate="tanh")
    want = d / (1 + np.exp(-2 * math.sqrt(2 / math.pi) * (d + 0.044715 * d**3)))
    ulp_close(t[x >= -1], want[x >= -1], 4)
    # below -1 the float32 rounding of the tanh argument dominates (documented)
    ulp_close(t[x < -1], want[x < -1], 200)


def test_parametric_unary(isa):
    x = rand(31, 3)
    d = x.astype(np.float64)
    ulp_close(K.leaky_relu(x, 0.1), np.where(d < 0, d * np.float32(0.1), d), 0.5)
    ulp_close(K.clip(x, -1.0, 2.0), np.clip(d, -1, 2), 0)
    # ONNX Clip is min(max(x, lo), hi): lo > hi gives hi everywhere.
    ulp_close(K.clip(x, 2.0, 1.0), np.minimum(np.maximum(d, 2.0), 1.0), 0)
    hs = np.clip(x * np.float32(0.3) + np.float32(0.4), 0, 1)
    ulp_close(K.hardsigmoid(x, 0.3, 0.4), hs.astype(np.float64), 0)
    ulp_close(K.elu(x, 0.7), np.where(d > 0, d, np.float32(0.7) * np.expm1(d)), 2.5)
    a, g = 1.67326319217681884765625, 1.05070102214813232421875
    ulp_close(K.selu(x), g * np.where(d > 0, d, a * np.expm1(d)), 2.5)


def test_nan_inf_propagation(isa):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30], np.float32)
    with np.errstate(all="ignore"):
        assert np.array_equal(K.exp(x)[:3], [np.nan, np.inf, 0], equal_nan=True)
        assert np.array_equal(K.sigmoid(x)[:3], [np.nan, 1, 0], equal_nan=True)
        assert np.array_equal(K.tanh(x)[:3], [np.nan, 1, -1], equal_nan=True)
        assert np.array_equal(K.erf(x)[:3], [np.nan, 1, -1], equal_nan=True)
        assert np.array_equal(K.log(x)[:5], [np.nan, np.inf, np.nan, -np.inf, -np.inf], equal_nan=True)
        for f in (K.relu, lambda v: K.clip(v, -1, 1), K.floor, K.round, K.sign, K.silu, K.gelu):
            assert np.isnan(f(x)[0])
        # x * gate(x) at -inf is the limit 0, not inf * 0
        for f in (K.silu, K.gelu, lambda v: K.gelu(v, "tanh"), K.hardswish):
            out = f(x)
            assert out[1] == np.inf and out[2] == 0
        assert np.array_equal(K.maximum(x, np.float32(0)), np.maximum(x, 0), equal_nan=True)
        assert np.array_equal(K.minimum(np.float32(0), x), np.minimum(0, x), equal_nan=True)


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
          "maximum": np.maximum, "minimum": np.minimum}
SHAPES = [((), ()), ((7,), ()), ((), (17,)), ((31, 17), (17,)), ((31, 1), (31, 17)), ((3, 1, 5), (1, 7, 1)),
          ((2, 3, 4, 5), (3, 1, 5)), ((1023,), (1023,)), ((0, 3), (3,)), ((2, 1, 3, 1, 2, 1, 2, 3), (3, 1, 1, 1, 3)),
          # rows of <= 16 (inline loop) and 17: a detector's scores, short rows from either side
          ((6301, 1), (6301, 8)), ((9, 5, 15), (9, 5, 1)), ((129, 16), (1, 16)), ((33, 1), (1, 17))]


@pytest.mark.parametrize("sa,sb", SHAPES)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_broadcasting(isa, op, sa, sb):
    a, b = rand(sa, 1), rand(sb, 2)
    if op == "div":
        b = np.where(np.abs(b) < 0.1, np.float32(0.5), b)
    got = getattr(K, op)(a, b)
    want = BINARY[op](a, b)  # float32 ops are correctly rounded: bitwise equal
    assert got.shape == want.shape and np.array_equal(got, want, equal_nan=True)


def test_binary_strided_views(isa):
    base = rand((17, 31), 3)
    a = base.T  # transposed view
    b = base[::-2, ::3].T.copy()[:, :1]  # (11, 1) contiguous copy
    rev = base[::-1, 1::2][:, :11].T  # negative strides
    assert np.array_equal(K.add(a[:11], rev), a[:11] + rev)
    assert np.array_equal(K.mul(a[:11], b), a[:11] * b)


@pytest.mark.parametrize("expo", [2.0, 3.0, 0.5, -1.0, 0.0, 1.0, 1.7])
def test_pow(isa, expo):
    x = np.abs(rand(1023, 4)) + np.float32(0.01)
    got = K.pow(x, np.float32(expo))
    ulp_close(got, np.power(x.astype(np.float64), float(np.float32(expo))), 1.5)
    e = np.abs(rand(1023, 5))
    ulp_close(K.pow(x, e), np.power(x.astype(np.float64), e.astype(np.float64)), 1.5)


def test_int64_arithmetic_and_errors():
    a = np.array([[7, -7, 2**40], [1, 0, -3]], np.int64)
    b = np.array([2, -2, 3], np.int64)
    assert np.array_equal(K.add(a, b), a + b)
    assert np.array_equal(K.mul(a, b), a * b)
    assert np.array_equal(K.div(a, b), np.trunc(a / b).astype(np.int64))
    assert np.array_equal(K.maximum(a, 1), np.maximum(a, 1))
    assert np.array_equal(K.pow(a[:, :2], np.int64(2)), a[:, :2] ** 2)
    with pytest.raises(ValueError, match="division by zero at output element 1"):
        K.div(np.array([1, 2], np.int64), np.array([1, 0], np.int64))
    i32 = np.arange(-5, 6, dtype=np.int32)
    assert np.array_equal(K.sub(i32, np.int32(3)), i32 - 3)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.uint8, np.bool_])
def test_comparisons(isa, dtype):
    rng = np.random.default_rng(6)
    a = rng.integers(0, 3, (17, 31)).astype(dtype)
    b = rng.integers(0, 3, (31,)).astype(dtype)
    for name, ref in (("equal", np.equal), ("not_equal", np.not_equal), ("less", np.less),
                      ("less_equal", np.less_equal), ("greater", np.greater), ("greater_equal", np.greater_equal)):
        got = getattr(K, name)(a, b)
        assert got.dtype == np.bool_ and np.array_equal(got, ref(a, b)), name


def test_compare_nan_and_logic(isa):
    a = np.array([np.nan, 1, 2], np.float32)
    assert not K.equal(a, a)[0] and K.not_equal(a, a)[0] and not K.less(a, np.float32(5))[0]
    p, q = np.array([True, True, False, False]), np.array([True, False, True, False])
    assert np.array_equal(K.logical_and(p, q), p & q)
    assert np.array_equal(K.logical_or(p, q), p | q)
    assert np.array_equal(K.logical_xor(p, q), p ^ q)
    assert np.array_equal(K.logical_not(p), ~p)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.float16])
def test_where(isa, dtype):
    rng = np.random.default_rng(7)
    cond = rng.integers(0, 2, (7, 1, 31)).astype(bool)
    a = rng.integers(-9, 9, (17, 31)).astype(dtype)
    b = rng.integers(-9, 9, (7, 17, 1)).astype(dtype)
    assert np.array_equal(K.where(cond, a, b), np.where(cond, a, b))
    assert np.array_equal(K.where(np.array(True), a, b), np.where(True, a, b))


def test_cast():
    x = np.array([1.9, -1.9, 0.0, 255.0, -0.5], np.float32)
    assert np.array_equal(K.cast(x, np.int64), x.astype(np.int64))
    assert np.array_equal(K.cast(x, np.int32), x.astype(np.int32))
    assert np.array_equal(K.cast(x, np.bool_), x.astype(bool))
    i = np.array([-3, 0, 2**40, 7], np.int64)
    assert np.array_equal(K.cast(i, np.float32), i.astype(np.float32))
    assert np.array_equal(K.cast(i, np.int32), i.astype(np.int32))
    assert np.array_equal(K.cast(np.array([True, False]), np.float32), [1.0, 0.0])
    with pytest.raises(ValueError, match=r"element 1 = nan"):
        K.cast(np.array([1.0, np.nan], np.float32), np.int64)


def test_bad_input_is_a_clear_value_error():
    x = rand((3, 4), 8)
    with pytest.raises(ValueError, match="dtype float64, expected float32"):
        K.sigmoid(x.astype(np.float64))
    with pytest.raises(ValueError, match="C-contiguous"):
        K.exp(x.T)
    with pytest.raises(ValueError, match=r"shapes \(3, 4\), \(3,\) cannot be broadcast"):
        K.add(x, rand(3, 9))
    with pytest.raises(ValueError, match="operand dtypes differ"):
        K.add(x, x.astype(np.int64))
    with pytest.raises(ValueError, match="approximate must be"):
        K.gelu(x, approximate="erf")
    with pytest.raises(ValueError, match="at most 8"):
        K.relu(np.zeros((1,) * 9, np.float32))


def test_threads_give_identical_results():
    x = rand(300_000, 9)
    one = K.gelu(x, threads=1)
    assert np.array_equal(one, K.gelu(x, threads=2))
    a, b = rand((600, 513), 10), rand((513,), 11)
    assert np.array_equal(K.add(a, b, threads=1), K.add(a, b, threads=2))
