"""A fused activation gives the bits of the plain op followed by the standalone unary op.

Whether a fusion pass fires must not change the answer: the GEMM, conv
(direct, Winograd, 1x1) and depthwise epilogues and the unary ops all run the
one vector-math library (kernels/core/vmath_fn.h). Checked for every
activation at every ISA, with odd sizes so the masked tails run too, and the
activation math itself against float64 at odd lengths.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine import kernels
from engine.kernels import eltwise as K
from engine.kernels.gemm import ACTIVATIONS

ISAS = kernels.available_isas()
# epilogue activation -> (standalone unary op, parameters passed to both)
UNARY_OF = {
    "relu": ("relu", ()), "clip": ("clip", (-0.3, 0.4)), "gelu": ("gelu", ()), "gelu_tanh": ("gelu_tanh", ()),
    "sigmoid": ("sigmoid", ()), "silu": ("silu", ()), "hardswish": ("hardswish", ()),
    "hardsigmoid": ("hardsigmoid", (0.2, 0.5)), "leaky_relu": ("leaky_relu", (0.1,)), "tanh": ("tanh", ()),
}


def test_every_activation_has_a_unary_twin():
    assert set(UNARY_OF) == set(ACTIVATIONS)


def _act(name):
    params = UNARY_OF[name][1]
    return (name, *params) if params else name


def _unfused(name, y):
    op, params = UNARY_OF[name]
    return K.unary(op, np.ascontiguousarray(y), *params)


def _assert_same_bits(fused, unfused, what):
    f, u = fused.view(np.uint32), unfused.view(np.uint32)
    differ = (f != u) & ~(np.isnan(fused) & np.isnan(unfused))
    assert not differ.any(), (f"{what}: {int(differ.sum())} of {differ.size} differ, first fused "
                              f"{fused[differ][0]!r} vs unfused {unfused[differ][0]!r}")


def _inputs(rng, *shape, scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_gemm_epilogue(isa, name):
    rng = np.random.default_rng(3)
    a, b, bias = _inputs(rng, 23, 19), _inputs(rng, 19, 41), _inputs(rng, 41)
    # K = 1 with a = 1 puts exact values, specials and the tails straight into the epilogue
    x = np.concatenate([np.linspace(-30, 30, 997), [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 90.0, -105.0]])
    x = x.astype(np.float32)[None, :]
    one = np.ones((1, 1), np.float32)
    with kernels.use_isa(isa):
        for what, args, kw in (("gemm", (a, b), {"bias": bias, "alpha": 1.25}), ("gemm k=1", (one, x), {})):
            _assert_same_bits(kernels.matmul(*args, activation=_act(name), **kw),
                              _unfused(name, kernels.matmul(*args, **kw)), f"{isa} {what} {name}")


# (x shape NHWC, weight shape, group, strides, pads): 3x3 direct and Winograd, strided 3x3,
# 1x1 (GEMM), depthwise 3x3 and 5x5 strided; odd channel counts leave vector tails
CONVS = {
    "3x3": ((1, 9, 11, 5), (13, 5, 3, 3), 1, (1, 1), (1, 1, 1, 1)),
    "3x3 winograd": ((1, 9, 11, 5), (13, 5, 3, 3), 1, (1, 1), (1, 1, 1, 1)),
    "3x3 stride 2": ((2, 9, 8, 7), (9, 7, 3, 3), 1, (2, 2), (1, 0, 1, 1)),
    "1x1": ((1, 5, 7, 6), (17, 6, 1, 1), 1, (1, 1), (0, 0, 0, 0)),
    "depthwise 3x3": ((1, 10, 9, 19), (19, 1, 3, 3), 19, (1, 1), (1, 1, 1, 1)),
    "depthwise 5x5 stride 2": ((1, 11, 12, 21), (21, 1, 5, 5), 21, (2, 2), (2, 2, 2, 2)),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("conv", list(CONVS))
def test_conv_epilogue(isa, conv):
    xs, ws, group, strides, pads = CONVS[conv]
    rng = np.random.default_rng(5)
    x, w, bias = _inputs(rng, *xs, scale=1.5), _inputs(rng, *ws), _inputs(rng, ws[0])
    with kernels.use_isa(isa):
        packed = kernels.pack_conv_weights(w, group=group, winograd="winograd" in conv)

        def run(**kw):
            return kernels.conv2d_packed(x, packed, bias, strides=strides, pads=pads, **kw)

        plain = run()
        residual = _inputs(rng, *plain.shape)
        plain_res = run(residual=residual)
        for name in ACTIVATIONS:
            _assert_same_bits(run(activation=_act(name)), _unfused(name, plain), f"{isa} conv {conv} {name}")
            _assert_same_bits(run(activation=_act(name), residual=residual), _unfused(name, plain_res),
                              f"{isa} conv {conv} {name} + residual")


def _ref64(name, d):
    """float64 reference of each activation (gelu through erfc: no cancellation in the tail)."""
    with np.errstate(all="ignore"):
        if name == "relu":
            return np.maximum(d, 0)
        if name == "clip":
            return np.clip(d, np.float32(-0.3), np.float32(0.4))  # the float32 bounds the kernel gets
        if name == "gelu":
            return 0.5 * d * np.vectorize(math.erfc, otypes=[float])(-d / math.sqrt(2))
        if name == "gelu_tanh":
            return d / (1 + np.exp(-2 * math.sqrt(2 / math.pi) * (d + 0.044715 * d**3)))
        if name == "sigmoid":
            return 1 / (1 + np.exp(-d))
        if name == "silu":
            return d / (1 + np.exp(-d))
        if name == "tanh":
            return np.tanh(d)
        if name == "leaky_relu":
            return np.where(d < 0, d * np.float32(0.1), d)
        # hard* are defined on the float32 intermediate alpha x + beta (two roundings), as ONNX and numpy
        x = d.astype(np.float32)
        alpha, beta = (np.float32(1 / 6), np.float32(0.5)) if name == "hardswish" else (np.float32(0.2), np.float32(0.5))
        g = np.clip(x * alpha + beta, 0, 1).astype(np.float64)
        return d * g if name == "hardswish" else g


# max ulp of each activation (include/aie_eltwise.h); gelu_tanh below -1 gets 2|z| more (documented there)
ULPS = {"relu": 0, "clip": 0, "leaky_relu": 0.5, "hardsigmoid": 0, "hardswish": 0.5, "sigmoid": 2.5, "silu": 3,
        "tanh": 2.5, "gelu": 5, "gelu_tanh": 4}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_against_float64(isa, name):
    rng = np.random.default_rng(11)
    for n in (1, 7, 17, 1023):  # shorter than, between and past the vector widths
        x = np.concatenate([rng.uniform(-12, 12, n), rng.uniform(-1.5, 1.5, n)]).astype(np.float32)
        with kernels.use_isa(isa):
            got = _unfused(name, x).astype(np.float64)
        d = x.astype(np.float64)
        want = _ref64(name, d)
        bound = np.full(x.shape, float(ULPS[name]))
        if name == "gelu_tanh":
            bound += np.where(x < -1, 2 * np.abs(2 * math.sqrt(2 / math.pi) * (d + 0.044715 * d**3)), 0)
        # results below 2^-100 (deep tails, denormals) count absolutely
        ulp = np.spacing(np.maximum(np.abs(want), 2.0**-100).astype(np.float32)).astype(np.float64)
        err = np.abs(got - want) / ulp
        worst = int(np.argmax(err - bound))
        assert err[worst] <= bound[worst], (
            f"{isa} {name}({x[worst]!r}) n={n}: {got[worst]!r} vs {want[worst]!r}, {err[worst]:.2f} ulp > {bound[worst]}")
