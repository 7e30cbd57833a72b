"""LpPool composed: the window sum of |x|^p (an AveragePool counting the
zero padding, times the window size), to the power 1/p. 1-D and 2-D
windows, like the pooling kernel."""

from __future__ import annotations

import numpy as np

from engine.lowering import LoweringContext
from engine.ops.compose import Composer

_POOL_ATTRS = ("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides")


def lower_lp_pool(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32,))
    p = ctx.attr("p", 2)
    if p <= 0:
        raise ctx.unsupported(f"p={p}")
    kernel = ctx.attr("kernel_shape")
    if not kernel:
        raise ctx.unsupported("no kernel_shape")
    c = Composer(ctx)
    powered = c.mul(x, x) if p == 2 else c.op("Pow", c.op("Abs", x), c.scalar(p, np.float32))
    attrs = {k: ctx.attr(k) for k in _POOL_ATTRS if ctx.attr(k) is not None}
    # Padding adds nothing to an Lp sum: average over the whole window.
    avg = c.op("AveragePool", powered, count_include_pad=1, **attrs)
    total = c.mul(avg, c.scalar(int(np.prod(kernel)), np.float32))
    c.out(0, c.op("Sqrt", total) if p == 2 else c.op("Pow", total, c.scalar(1.0 / p, np.float32)))


RULES = {"LpPool": {11: lower_lp_pool}}
ATTRS = {"LpPool": {"p", *_POOL_ATTRS}}
