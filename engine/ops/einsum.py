"""Einsum composed from Transpose, Reshape, Slice (diagonals), ReduceSum,
Mul and MatMul. Operands are combined left to right; a float32 pair whose
shared labels all match runs as one batched GEMM, anything else as a
broadcasting Mul and a ReduceSum. Ellipsis dims must agree between operands
(no broadcasting of size-1 ellipsis dims)."""

from __future__ import annotations

import string

import numpy as np

from engine.lowering import LoweringContext
from engine.ops.common import NUMERIC
from engine.ops.compose import Composer, ints


def _parse(ctx, equation: str, operands):
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ctx.unsupported(f"equation {equation!r} names {len(terms)} operands, got {len(operands)}")
    spare = [ch for ch in string.ascii_letters if ch not in eq]
    ell_rank = 0
    for t, v in zip(terms, operands):
        if "..." in t:
            ell_rank = max(ell_rank, v.rank - (len(t) - 3))
    ell = "".join(spare[:ell_rank])
    labels = []
    for t, v in zip(terms, operands):
        if "..." in t:
            n = v.rank - (len(t) - 3)
            t = t.replace("...", ell[ell_rank - n:] if n else "")
        if len(t) != v.rank or not all(ch in string.ascii_letters for ch in t):
            raise ctx.unsupported(f"term {t!r} of {equation!r} does not match an operand of rank {v.rank}")
        labels.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:  # implicit output: ellipsis dims, then labels seen once, sorted
        counts = {ch: "".join(labels).count(ch) for ch in "".join(labels)}
        out = ell + "".join(sorted(ch for ch, n in counts.items() if n == 1 and ch not in ell))
    if len(set(out)) != len(out) or any(ch not in "".join(labels) for ch in out):
        raise ctx.unsupported(f"output {out!r} of {equation!r}")
    return labels, out


def _diagonal(c: Composer, v, lab: str):
    """Take the diagonal of every repeated label: the pair moved last,
    flattened, and read with stride n + 1."""
    while len(set(lab)) != len(lab):
        ch = next(ch for ch in lab if lab.count(ch) > 1)
        i = lab.index(ch)
        j = lab.index(ch, i + 1)
        n = v.shape[i]
        if v.shape[j] != n:
            raise c.ctx.unsupported(f"diagonal of label {ch!r} over dims of {v.shape[i]} and {v.shape[j]}")
        rest = [k for k in range(len(lab)) if k not in (i, j)]
        v = c.transpose(v, rest + [i, j])
        v = c.reshape(v, [v.shape[k] for k in range(len(rest))] + [n * n])
        v = c.op("Slice", v, ints([0]), ints([n * n]), ints([len(rest)]), ints([n + 1]))
        lab = "".join(lab[k] for k in rest) + ch
    return v, lab


def _sum_out(c: Composer, v, lab: str, keep: set):
    drop = [k for k, ch in enumerate(lab) if ch not in keep]
    if drop:
        v = c.reduce("ReduceSum", v, drop, keepdims=0)
        lab = "".join(ch for ch in lab if ch in keep)
    return v, lab


def _arrange(c: Composer, v, lab: str, order: str):
    """v with its labels in `order` (labels it lacks become size-1 dims)."""
    present = [ch for ch in order if ch in lab]
    perm = [lab.index(ch) for ch in present]
    if perm != list(range(len(perm))):
        v = c.transpose(v, perm)
    shape = [v.shape[present.index(ch)] if ch in lab else 1 for ch in order]
    return c.reshape(v, shape) if tuple(shape) != v.shape else v


def _pair(c: Composer, a, la: str, b, lb: str, keep: set):
    sizes = {}
    for v, lab in ((a, la), (b, lb)):
        for ch, n in zip(lab, v.shape):
            if sizes.setdefault(ch, n) != n:
                raise c.ctx.unsupported(f"label {ch!r} has sizes {sizes[ch]} and {n}")
    batch = "".join(ch for ch in la if ch in lb and ch in keep)
    contract = "".join(ch for ch in la if ch in lb and ch not in keep)
    left = "".join(ch for ch in la if ch not in lb)
    right = "".join(ch for ch in lb if ch not in la)
    out_lab = batch + left + right

    def prod(labs: str) -> int:
        return int(np.prod([sizes[ch] for ch in labs], dtype=np.int64))

    if a.dtype == np.float32 and contract:
        a3 = c.reshape(_arrange(c, a, la, batch + left + contract), [prod(batch), prod(left), prod(contract)])
        b3 = c.reshape(_arrange(c, b, lb, batch + contract + right), [prod(batch), prod(contract), prod(right)])
        y = c.op("MatMul", a3, b3)
        return c.reshape(y, [sizes[ch] for ch in out_lab]), out_lab
    full = out_lab + contract
    y = c.mul(_arrange(c, a, la, full), _arrange(c, b, lb, full))
    if contract:
        y = c.reduce("ReduceSum", y, list(range(len(out_lab), len(full))), keepdims=0)
    return y, out_lab


def lower_einsum(ctx: LoweringContext) -> None:
    operands = [v for v in ctx.inputs if v is not None]
    for v in operands:
        ctx.require_dtype(v, NUMERIC)
        if v.dtype != operands[0].dtype:
            raise ctx.unsupported("operand dtypes differ")
    labels, out = _parse(ctx, ctx.attr("equation"), operands)
    c = Composer(ctx)
    vals = []
    for v, lab in zip(operands, labels):
        vals.append(_diagonal(c, v, lab))
    acc, acc_lab = vals[0]
    for k in range(1, len(vals) + 1):
        later = set(out) | set("".join(lab for _, lab in vals[k:]))
        acc, acc_lab = _sum_out(c, acc, acc_lab, later | (set(vals[k][1]) if k < len(vals) else set()))
        if k == len(vals):
            break
        b, lb = _sum_out(c, *vals[k], later | set(acc_lab))
        acc, acc_lab = _pair(c, acc, acc_lab, b, lb, later)
    perm = [acc_lab.index(ch) for ch in out]
    if perm != list(range(len(perm))):
        acc = c.transpose(acc, perm)
    elif acc is operands[0]:
        acc = c.op("Identity", acc)
    c.out(0, acc)


RULES = {"Einsum": {12: lower_einsum}}
ATTRS = {"Einsum": {"equation"}}
