"""GridSample over 2-D images (one executor step, kernels/exec/grid_sample.c)
and AffineGrid (a constant base grid times theta on the batched SGEMM)."""

from __future__ import annotations

import numpy as np

from engine.kernels.abi import GridSampleStep, Op
from engine.lowering import LoweringContext
from engine.ops.compose import Composer, const

# opset 16 spelled the modes bilinear / bicubic; opset 20 linear / cubic.
MODES = {"nearest": 0, "linear": 1, "bilinear": 1, "cubic": 2, "bicubic": 2}
PADDING = {"zeros": 0, "border": 1, "reflection": 2}


def lower_grid_sample(ctx: LoweringContext) -> None:
    x, grid = ctx.input(0), ctx.input(1)
    ctx.require_dtype(x, (np.float32,))
    ctx.require_dtype(grid, (np.float32,), "grid")
    mode = ctx.attr("mode", "linear" if ctx.opset >= 20 else "bilinear")
    pad = ctx.attr("padding_mode", "zeros")
    if mode not in MODES or pad not in PADDING:
        raise ctx.unsupported(f"mode={mode!r}, padding_mode={pad!r}")
    if x.rank != 4 or grid.rank != 4 or grid.shape[0] != x.shape[0] or grid.shape[3] != 2:
        raise ctx.unsupported(f"X {x.shape} with grid {grid.shape}: only 2-D sampling (X [N, C, H, W], "
                              "grid [N, OH, OW, 2])")
    N, C, H, W = x.shape
    OH, OW = grid.shape[1:3]
    out = ctx.out(0, (N, C, OH, OW), np.float32)
    if out.size == 0:
        return
    if H * W == 0:
        raise ctx.unsupported(f"sampling an empty image {x.shape}")
    params = GridSampleStep(N=N, C=C, H=H, W=W, OH=OH, OW=OW, mode=MODES[mode], padding=PADDING[pad],
                            align_corners=int(bool(ctx.attr("align_corners", 0))))
    ctx.step(Op.GRID_SAMPLE, [out, x, grid], params.words())


def _base_grid(sizes, align: int) -> np.ndarray:
    """Homogeneous sample points [prod(sizes), d + 1], (x, y[, z], 1) per
    point, built with onnx.reference's aranges so the points agree exactly."""
    axes = []
    for n in sizes:
        if align:
            axes.append(np.arange(-1, 1 + 0.0001, 2.0 / (n - 1)) if n > 1 else np.array([-1.0]))
        else:
            axes.append(np.arange(-1 + 1.0 / n, 1, 2.0 / n))
        if len(axes[-1]) != n:
            raise ValueError(f"grid axis of {len(axes[-1])} points for size {n}")
    mesh = np.meshgrid(*axes, indexing="ij")
    coords = [m.reshape(-1) for m in reversed(mesh)]  # x varies along the last dim
    return np.stack(coords + [np.ones_like(coords[0])], axis=1).astype(np.float32)


def lower_affine_grid(ctx: LoweringContext) -> None:
    theta = ctx.input(0)
    ctx.require_dtype(theta, (np.float32,), "theta")
    size = [int(s) for s in ctx.const(1, "size").reshape(-1)]
    d = len(size) - 2
    if d not in (2, 3) or theta.shape != (size[0], d, d + 1) or min(size) <= 0:
        raise ctx.unsupported(f"theta {theta.shape} for size {size}")
    try:
        base = _base_grid(size[2:], ctx.attr("align_corners", 0))
    except ValueError as exc:
        raise ctx.unsupported(str(exc)) from None
    c = Composer(ctx)
    grid = c.op("MatMul", const(base), c.transpose(theta, (0, 2, 1)))  # [N, points, d]
    c.out(0, c.reshape(grid, [size[0], *size[2:], d]))


RULES = {"GridSample": {16: lower_grid_sample}, "AffineGrid": {20: lower_affine_grid}}
ATTRS = {"GridSample": {"mode", "padding_mode", "align_corners"}, "AffineGrid": {"align_corners"}}
