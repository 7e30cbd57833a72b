"""Sigmoid and SiLU over a dense sweep of float32 bit patterns, not random points.

Every 97th bit pattern whose value lies in [-110, 110] (about 23 million floats, all binades from the
denormals up) against float64, on each ISA this host runs, plus the bitwise agreement of the ISAs
(kernels/include/aie_eltwise.h promises one result on every path). Where the gate sigmoid(x) is a
normal float the bound is in ulp (the tests' bounds, aie_eltwise.h's column plus ~0.5); below
x ~ -87.3 the gate is denormal, so its error is absolute, within one smallest denormal, and silu's
product x * gate carries |x| of them plus its own half-ulp rounding.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine import kernels
from engine import kernels as K

TINY = 2.0**-149  # the smallest denormal float32: the spacing of every denormal
# op -> (float64 reference, ulp bound where the gate is normal, error in TINY where it is denormal)
OPS = {
    "sigmoid": (lambda d: 1 / (1 + np.exp(-d)), 2.5, lambda x: 1.0),
    "silu": (lambda d: d / (1 + np.exp(-d)), 3.0, np.abs),
}
CHUNK = 1 << 30  # bit patterns per slice: keeps the float64 temporaries near 200 MB


def sweep_slices():
    """The swept floats, in slices of the bit-pattern space (ascending patterns, step 97)."""
    for lo in range(0, 1 << 32, CHUNK):
        first = lo + (-lo) % 97
        bits = np.arange(first, lo + CHUNK, 97, dtype=np.uint64).astype(np.uint32)
        x = bits.view(np.float32)
        yield x[np.abs(x) <= 110]


def errors(op, x, got):
    """(max ulp where the gate is normal, max error / its bound where it is denormal) against float64."""
    ref, _, tail_bound = OPS[op]
    d = x.astype(np.float64)
    with np.errstate(all="ignore"):
        want = ref(d)
        den = 1 / (1 + np.exp(-d)) < 2.0**-126
    spacing = np.spacing(np.abs(want.astype(np.float32))).astype(np.float64)
    err = np.abs(got.astype(np.float64) - want)
    tail = err[den] / (tail_bound(d[den]) * TINY + 0.5 * spacing[den])
    return float((err[~den] / spacing[~den]).max(initial=0)), float(tail.max(initial=0))


@pytest.mark.parametrize("op", sorted(OPS))
def test_dense_sweep_against_float64(isa, op):
    max_ulp = OPS[op][1]
    worst_ulp = worst_tail = 0.0
    for x in sweep_slices():
        got = getattr(K, op)(x)
        assert not np.isnan(got).any(), f"{op} gave NaN for a finite input"
        u, t = errors(op, x, got)
        worst_ulp, worst_tail = max(worst_ulp, u), max(worst_tail, t)
    assert worst_ulp <= max_ulp, f"{op} on {isa}: {worst_ulp:.3f} ulp where the gate is normal"
    assert worst_tail <= 1, f"{op} on {isa}: {worst_tail:.2f} times the bound where the gate is denormal"


def test_isas_agree_bitwise_on_the_sweep():
    isas = kernels.available_isas()
    if len(isas) < 2:
        pytest.skip(f"only one ISA on this host ({isas}): nothing to compare")
    for x in sweep_slices():
        for op in OPS:
            outs = []
            for isa in isas:
                with kernels.use_isa(isa):
                    outs.append(getattr(K, op)(x).view(np.uint32))
            for isa, out in zip(isas[1:], outs[1:]):
                bad = np.flatnonzero(out != outs[0])
                assert bad.size == 0, f"{op}: {isa} differs from {isas[0]} at x = {x[bad[:3]]}"


def test_specials_and_the_denormal_tail(isa):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-40, -1e-40, -100.0, -103.0, -104.0, -1e30],
                 np.float32)
    s, y = K.sigmoid(x), K.silu(x)
    assert np.array_equal(s[:4], [0.5, 0.5, 1.0, 0.0]) and np.isnan(s[4:6]).all() and np.isnan(y[4:6]).all()
    assert s[6] == 0.5 and s[7] == 0.5
    # silu keeps the sign of zero: silu(-0) = -0 * 0.5, silu(-inf) is the limit -0, not -inf * 0 = NaN
    assert y[0] == 0 and not np.signbit(y[0]) and y[1] == 0 and np.signbit(y[1])
    assert y[2] == np.inf and y[3] == 0 and np.signbit(y[3])
    # exp(-|x|) form: sigmoid reaches the denormals before it reaches 0
    assert 0 < s[8] < 2.0**-126 and 0 < s[9] < 2.0**-126
    assert s[10] == 0 and s[11] == 0 and y[10] == 0 and np.signbit(y[11])
