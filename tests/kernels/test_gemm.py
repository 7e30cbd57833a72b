"""engine.kernels.matmul on every ISA path against numpy in float64."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine import kernels
from engine.kernels.gemm import ACTIVATIONS

ISAS = kernels.available_isas()
SIZES = [(1, 1, 1), (1, 3, 7), (3, 7, 17), (17, 31, 1), (31, 17, 64), (64, 100, 31), (100, 64, 3), (7, 1023, 17),
         (1023, 17, 7), (5, 64, 1023)]


def _rand(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _assert_close(got, a, b, *, alpha=1.0, beta=0.0, c0=None, extra=0.0):
    """Error normalised by sum |alpha a b| (+ |beta c|): float32 sums over K."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = alpha * (a64 @ b64)
    scale = abs(alpha) * (np.abs(a64) @ np.abs(b64)) + 1e-30
    if c0 is not None and beta != 0.0:
        ref += beta * c0.astype(np.float64)
        scale += abs(beta) * np.abs(c0)
    k = a.shape[1]
    err = np.abs(got - ref - extra) / scale
    assert got.dtype == np.float32
    assert np.all(err <= 4e-7 * (k + 8)), f"max normalised error {err.max():.3g} (K={k})"


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("m,n,k", SIZES)
def test_matmul_matches_float64(isa, m, n, k):
    rng = np.random.default_rng(m * 10007 + n * 101 + k)
    a, b = _rand(rng, m, k), _rand(rng, k, n)
    with kernels.use_isa(isa):
        _assert_close(kernels.matmul(a, b), a, b)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("trans_a,trans_b", [(False, True), (True, False), (True, True)])
def test_transposes_flags_and_views(isa, trans_a, trans_b):
    rng = np.random.default_rng(3)
    m, n, k = 37, 45, 29
    a, b = _rand(rng, m, k), _rand(rng, k, n)
    sa = np.ascontiguousarray(a.T) if trans_a else a
    sb = np.ascontiguousarray(b.T) if trans_b else b
    with kernels.use_isa(isa):
        _assert_close(kernels.matmul(sa, sb, trans_a=trans_a, trans_b=trans_b), a, b)
        # a transposed view is passed as a leading dimension, not copied
        _assert_close(kernels.matmul(np.ascontiguousarray(a.T).T, np.ascontiguousarray(b.T).T), a, b)


@pytest.mark.parametrize("isa", ISAS)
def test_strided_rows_and_out(isa):
    rng = np.random.default_rng(4)
    big_a, big_b = _rand(rng, 40, 50), _rand(rng, 60, 70)
    a, b = big_a[3:33, 5:25], big_b[10:30, 1:66]  # ld > row length
    out_big = _rand(rng, 30, 80)
    out = out_big[:, 7:72]
    c0 = out.copy()
    with kernels.use_isa(isa):
        got = kernels.matmul(a, b, out=out, alpha=0.5, beta=-2.0)
    assert got is out
    _assert_close(out, a, b, alpha=0.5, beta=-2.0, c0=c0)
    assert np.array_equal(out_big[:, :7], out_big[:, :7])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("m,n,k", [(0, 5, 3), (4, 0, 3), (0, 0, 0)])
def test_empty_outputs(isa, m, n, k):
    with kernels.use_isa(isa):
        c = kernels.matmul(np.ones((m, k), np.float32), np.ones((k, n), np.float32))
    assert c.shape == (m, n)


@pytest.mark.parametrize("isa", ISAS)
def test_k_zero_gives_beta_c(isa):
    out = np.full((3, 4), 2.0, np.float32)
    with kernels.use_isa(isa):
        kernels.matmul(np.ones((3, 0), np.float32), np.ones((0, 4), np.float32), out=out, beta=1.5)
        assert np.all(out == 3.0)
        c = kernels.matmul(np.ones((3, 0), np.float32), np.ones((0, 4), np.float32))
    assert np.all(c == 0.0)


@pytest.mark.parametrize("isa", ISAS)
def test_large_magnitudes(isa):
    rng = np.random.default_rng(5)
    a, b = _rand(rng, 20, 300, scale=1e17), _rand(rng, 300, 9, scale=1e17)  # products ~1e34, sums near 1e36
    with kernels.use_isa(isa):
        c = kernels.matmul(a, b)
    assert np.all(np.isfinite(c))
    _assert_close(c, a, b)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("m", [2, 40])
def test_nan_inf_propagate(isa, m):
    rng = np.random.default_rng(6)
    a, b = _rand(rng, m, 50), _rand(rng, 50, 33)
    a[1, 7] = np.nan
    b[11, 5] = np.inf
    with kernels.use_isa(isa):
        c = kernels.matmul(a, b)
    assert np.all(np.isnan(c[1]))
    rest = np.delete(c, 1, axis=0)
    assert np.all(np.isinf(rest[:, 5]))
    assert np.all(np.isfinite(np.delete(rest, 5, axis=1)))


def _act_ref(name, x, p):
    x = x.astype(np.float64)
    erfc = np.vectorize(math.erfc)  # erfc form: no cancellation in the negative tail
    table = {
        "relu": lambda: np.maximum(x, 0),
        "clip": lambda: np.clip(x, p[0], p[1]),
        "gelu": lambda: 0.5 * x * erfc(-x / math.sqrt(2)),
        # 0.5 x (1 + tanh u) written as x * sigmoid(2u)
        "gelu_tanh": lambda: x / (1 + np.exp(-2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
        "sigmoid": lambda: 1 / (1 + np.exp(-x)),
        "silu": lambda: x / (1 + np.exp(-x)),
        "hardswish": lambda: x * np.clip(x / 6 + 0.5, 0, 1),
        "hardsigmoid": lambda: np.clip(p[0] * x + p[1], 0, 1),
        "leaky_relu": lambda: np.where(x < 0, p[0] * x, x),
        "tanh": lambda: np.tanh(x),
    }
    with np.errstate(over="ignore"):  # exp(-x) overflowing to inf is the intended limit
        return table[name]()


ACT_PARAMS = {"clip": (-0.3, 0.4), "hardsigmoid": (0.2, 0.5), "leaky_relu": (0.1,)}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
@pytest.mark.parametrize("bias_shape", [None, "col", "row"])
def test_fused_epilogue(isa, name, bias_shape):
    rng = np.random.default_rng(7)
    m, n, k = 23, 41, 19
    a, b = _rand(rng, m, k), _rand(rng, k, n)
    bias = {None: None, "col": _rand(rng, n), "row": _rand(rng, m, 1)}[bias_shape]
    params = ACT_PARAMS.get(name, ())
    act = (name, *params) if params else name
    with kernels.use_isa(isa):
        got = kernels.matmul(a, b, bias=bias, activation=act, alpha=1.25)
    pre = 1.25 * (a.astype(np.float64) @ b.astype(np.float64)) + (0 if bias is None else bias)
    want = _act_ref(name, pre, params)
    assert np.allclose(got, want, rtol=2e-5, atol=2e-5), f"{name}: max diff {np.abs(got - want).max():.3g}"


ULP_BOUNDS = {"sigmoid": 4, "silu": 4, "tanh": 4, "gelu": 6, "gelu_tanh": 8, "hardswish": 2, "hardsigmoid": 2}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", list(ULP_BOUNDS))
def test_activation_accuracy_in_ulps(isa, name):
    """The act_*.h math (shared with the elementwise ops) against float64,
    through the epilogue: C = act(1 * x) exactly isolates the activation."""
    x = np.concatenate([np.linspace(-30, 30, 60001), np.linspace(-1, 1, 20001), np.linspace(-105, 90, 2001),
                        [0.0, -0.0, 1e-30, -1e-30]])
    x = x.astype(np.float32)
    with kernels.use_isa(isa):
        got = kernels.matmul(np.ones((1, 1), np.float32), x[None, :], activation=name).ravel()
    want = _act_ref(name, x, ACT_PARAMS.get(name, ()))
    # ulp of the float64 value, floored at the smallest normal (subnormal results count absolutely);
    # hardswish/hardsigmoid compute x/6 + 0.5 in float as ONNX defines them, so near their kinks
    # the error is measured in ulps of that intermediate (~1), not of the tiny result
    # results below 2^-100 (the deep tails, down to subnormals) are held to an absolute 2^-120
    floor = 1.0 if name in ("hardswish", "hardsigmoid") else 2.0**-100
    ulp = np.spacing(np.maximum(np.abs(want), floor).astype(np.float32)).astype(np.float64)
    bound = np.full(x.shape, float(ULP_BOUNDS[name]))
    if name == "gelu_tanh":
        # u = sqrt(2/pi)(x + 0.044715 x^3) is rounded in float (as every float implementation does);
        # exp(2u) turns its relative error into |2u| times as many ulps in the negative tail
        bound += 4 * np.abs(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x.astype(np.float64) ** 3))
    err = np.abs(got - want) / ulp / bound
    worst = int(np.argmax(err))
    assert err[worst] <= 1.0, f"{name}({x[worst]!r}) = {got[worst]!r}, want {want[worst]!r}: {err[worst] * bound[worst]:.1f} ulp > {bound[worst]:.0f}"


@pytest.mark.parametrize("isa", ISAS)
def test_activation_special_values(isa):
    x = np.array([np.nan, np.inf, -np.inf, 0.0], np.float32)
    one = np.ones((1, 1), np.float32)
    with kernels.use_isa(isa):
        for name in ACTIVATIONS:
            act = (name, *ACT_PARAMS[name]) if name in ACT_PARAMS else name
            got = kernels.matmul(one, x[None, :], activation=act).ravel()
            assert np.isnan(got[0]), name
            if name in ("sigmoid", "tanh", "hardsigmoid"):
                assert got[1] == 1.0 and got[2] == (-1.0 if name == "tanh" else 0.0), (name, got)
            if name in ("relu", "gelu", "gelu_tanh", "silu", "hardswish", "leaky_relu"):
                assert got[1] == np.inf, (name, got)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("m,n,k", [(1, 100, 31), (6, 33, 64), (64, 100, 300), (100, 64, 17)])
def test_packed_b(isa, m, n, k):
    rng = np.random.default_rng(8)
    a, b = _rand(rng, m, k), _rand(rng, k, n)
    bias = _rand(rng, n)
    with kernels.use_isa(isa):
        packed = kernels.pack_b(np.ascontiguousarray(b.T), trans_b=True)
        assert packed.shape == (k, n)
        got = kernels.matmul_packed(a, packed, bias=bias)
    _assert_close(got, a, b, extra=bias.astype(np.float64))


def test_packed_b_rejects_other_isa():
    if len(ISAS) < 2:
        pytest.skip("needs two ISA paths on this CPU to pack for one and run on another")
    b = np.ones((8, 8), np.float32)
    with kernels.use_isa(ISAS[-1]):
        packed = kernels.pack_b(b)
    with kernels.use_isa(ISAS[0]):
        with pytest.raises(ValueError, match="pack it again"):
            kernels.matmul_packed(np.ones((2, 8), np.float32), packed)


@pytest.mark.parametrize("threads", [1, 2])
def test_bitwise_repeatable_and_thread_independent(threads):
    rng = np.random.default_rng(9)
    a, b = _rand(rng, 300, 200), _rand(rng, 200, 260)
    first = kernels.matmul(a, b, threads=threads)
    for _ in range(3):
        assert np.array_equal(kernels.matmul(a, b, threads=threads), first)
    assert np.array_equal(kernels.matmul(a, b, threads=1), first)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: kernels.matmul(np.ones((2, 3)), np.ones((3, 2), np.float32)), "a must be float32"),
        (lambda: kernels.matmul(np.ones((2, 3), np.float32), np.ones((4, 2), np.float32)), "inner dimensions"),
        (lambda: kernels.matmul(np.ones((2, 3, 1), np.float32), np.ones((3, 2), np.float32)), "must be 2-D"),
        (lambda: kernels.matmul(np.ones((4, 6), np.float32)[:, ::2], np.ones((3, 2), np.float32)), "not row-major"),
        (lambda: kernels.matmul(np.ones((2, 3), np.float32), [[1.0]]), "numpy.ndarray"),
        (lambda: kernels.matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), out=np.ones((3, 3), np.float32)),
         "out has shape"),
        (lambda: kernels.matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), beta=1.0), "needs out"),
        (lambda: kernels.matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), activation="swish"),
         "unknown activation"),
        (lambda: kernels.matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), bias=np.ones(3, np.float32)),
         "bias shape"),
        (lambda: kernels.matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), threads=0), "threads"),
        (lambda: kernels.matmul_packed(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)), "PackedB"),
    ],
)
def test_bad_arguments_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_out_overlapping_input_is_rejected():
    buf = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="overlaps"):
        kernels.matmul(buf, buf, out=buf)



def test_plain_call_fast_path_agrees_with_the_general_path():
    # matmul(a, b) with no options takes a short path; the general one (here
    # reached through trans_b on a stored transpose) must give the same bits.
    rng = np.random.default_rng(12)
    a, b = _rand(rng, 20, 70), _rand(rng, 70, 33)
    fast = kernels.matmul(a, b)
    general = kernels.matmul(a, np.ascontiguousarray(b.T), trans_b=True)
    assert np.array_equal(fast, general)
    out = np.full((20, 33), np.nan, np.float32)
    assert kernels.matmul(a, b, out=out) is out and np.array_equal(out, fast)
    # an out the short path cannot take goes to the general checks
    with pytest.raises(ValueError, match="out has shape"):
        kernels.matmul(a, b, out=np.empty((33, 20), np.float32))
    with pytest.raises(ValueError, match="overlaps"):
        kernels.matmul(a, b, out=a[:, :33])
