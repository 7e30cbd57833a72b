"""float64 references for the convolution and pooling tests (NHWC in, NHWC out).

Written directly from the ONNX operator definitions, independent of the
kernels' algorithms: convolution as a sum of shifted strided slices of the
zero-padded input, transposed convolution as the scatter it is defined as,
pooling as an explicit loop over windows.
"""

from __future__ import annotations

import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def conv_data(case, seed=0):
    """Seeded float32 x (N, H, W, C), w (K, C / group, R, S) and bias (K) for a case
    (N, H, W, C, K, R, S, strides, dilations, pads[, group]), the tests' layout."""
    n, h, w, c, k, r, s = case[:7]
    group = case[10] if len(case) > 10 else 1
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, c), dtype=np.float32)
    wt = rng.standard_normal((k, c // group, r, s), dtype=np.float32)
    return x, wt, rng.standard_normal(k, dtype=np.float32)


def conv_kw(case) -> dict:
    """The keyword arguments of a case: strides, dilations, pads (and group when it has one)."""
    kw = dict(strides=case[7], dilations=case[8], pads=case[9])
    if len(case) > 10:
        kw["group"] = case[10]
    return kw


def assert_close(y, want, scale, what):
    """|y - want| within float32 accumulation error of the |x|*|w| scale."""
    assert y.shape == want.shape, f"{what}: shape {y.shape} != {want.shape}"
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(y), nan), f"{what}: NaN positions differ"
    err = np.abs(y.astype(np.float64) - want)[~nan]
    tol = (1e-5 * scale + 1e-6)[~nan]
    assert np.all(err <= tol), f"{what}: max error {err.max():.3g} (worst ratio {(err / tol).max():.3g})"


def assert_conv_close(y, what, x, w, b=None, act=None, **kw):
    """y is conv2d(x, w, b) [then act] within float32 error of its |x|*|w| scale."""
    assert_close(y, conv2d(x, w, b, act=act, **kw), conv2d(x, w, **kw, absolute=True), what)


def check_fused_epilogues(run, x, w, b, activations, what, *, without_bias=False, **kw):
    """run(bias, act, residual) -> y, for every activation in `activations`,
    with the bias b (and with none when without_bias), without and with a
    seeded residual, each against conv2d in float64. Returns (scale, residual):
    the |x|*|w| scale and that residual, for the caller's further checks."""
    scale = conv2d(x, w, **kw, absolute=True)
    residual = np.random.default_rng(2).standard_normal(scale.shape, dtype=np.float32)
    for act in activations:
        for bias in (b, None) if without_bias else (b,):
            for res in (None, residual):
                assert_close(run(bias, act, res), conv2d(x, w, bias, residual=res, act=act, **kw),
                             scale + (0 if res is None else np.abs(residual)) + 1,
                             f"{what}/{act}/bias={bias is not None}/residual={res is not None}")
    return scale, residual


def activation(y: np.ndarray, act) -> np.ndarray:
    """The activations of engine.kernels.conv, in float64."""
    if act is None:
        return y
    if act == "relu6":
        act = ("clip", 0.0, 6.0)
    name, *p = (act,) if isinstance(act, str) else act
    if name == "relu":
        return np.where(y < 0, 0.0, y)
    if name == "clip":
        return np.where(np.isnan(y), y, np.clip(y, p[0], p[1]))
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-y))
    if name == "silu":
        return y / (1.0 + np.exp(-y))
    if name == "hardswish":
        return y * np.clip(y / 6.0 + 0.5, 0.0, 1.0)
    if name == "hardsigmoid":
        return np.clip(p[0] * y + p[1], 0.0, 1.0)
    if name == "leaky_relu":
        return np.where(y < 0, y * p[0], y)
    if name == "tanh":
        return np.tanh(y)
    if name == "gelu":
        return 0.5 * y * (1.0 + _erf(y / math.sqrt(2.0)))
    if name == "gelu_tanh":
        return 0.5 * y * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y**3)))
    raise ValueError(name)


def conv2d(x, w, bias=None, *, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1,
           residual=None, act=None, absolute=False):
    """ONNX Conv on NHWC x and OIHW w in float64. absolute=True sums |x|*|w|
    (the scale a float32 rounding error is measured against)."""
    x = np.abs(x.astype(np.float64)) if absolute else x.astype(np.float64)
    w = np.abs(w.astype(np.float64)) if absolute else w.astype(np.float64)
    n, h, wd, c = x.shape
    k, cg, r, s = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilations, pads
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    p = (h + pt + pb - ((r - 1) * dh + 1)) // sh + 1
    q = (wd + pl + pr - ((s - 1) * dw + 1)) // sw + 1
    kg = k // group
    y = np.zeros((n, p, q, k))
    for g in range(group):
        for i in range(r):
            for j in range(s):
                patch = xp[:, i * dh:i * dh + sh * (p - 1) + 1:sh, j * dw:j * dw + sw * (q - 1) + 1:sw,
                           g * cg:(g + 1) * cg]
                y[..., g * kg:(g + 1) * kg] += patch @ w[g * kg:(g + 1) * kg, :, i, j].T
    if absolute:
        return y
    if bias is not None:
        y += bias.astype(np.float64)
    if residual is not None:
        y += residual.astype(np.float64)
    return activation(y, act)


def conv_transpose2d(x, w, bias=None, *, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1),
                     output_padding=(0, 0), group=1, act=None, absolute=False):
    """ONNX ConvTranspose on NHWC x and (C, K/group, R, S) w, explicit pads, float64."""
    x = np.abs(x.astype(np.float64)) if absolute else x.astype(np.float64)
    w = np.abs(w.astype(np.float64)) if absolute else w.astype(np.float64)
    n, h, wd, c = x.shape
    _, kg, r, s = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr), (oph, opw) = strides, dilations, pads, output_padding
    cg, k = c // group, kg * group
    full_h = sh * (h - 1) + (r - 1) * dh + 1 + oph
    full_w = sw * (wd - 1) + (s - 1) * dw + 1 + opw
    y = np.zeros((n, full_h, full_w, k))
    for g in range(group):
        for i in range(r):
            for j in range(s):
                y[:, i * dh:i * dh + sh * (h - 1) + 1:sh, j * dw:j * dw + sw * (wd - 1) + 1:sw,
                  g * kg:(g + 1) * kg] += x[..., g * cg:(g + 1) * cg] @ w[g * cg:(g + 1) * cg, :, i, j]
    y = y[:, pt:full_h - pb, pl:full_w - pr, :]
    if absolute:
        return y
    if bias is not None:
        y = y + bias.astype(np.float64)
    return activation(y, act)


def _pool_out(size, k, stride, pb, pe, dil, ceil_mode):
    span = (k - 1) * dil + 1
    room = size + pb + pe - span
    out = (-(-room // stride) if ceil_mode else room // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pb:
        out -= 1
    return out


def pool2d(kind, x, kernel, *, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), ceil_mode=False,
           count_include_pad=False):
    """ONNX MaxPool / AveragePool (onnxruntime's window rules), NHWC, float64."""
    x = x.astype(np.float64)
    n, h, wd, c = x.shape
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = kernel, strides, dilations, pads
    p = _pool_out(h, kh, sh, pt, pb, dh, ceil_mode)
    q = _pool_out(wd, kw, sw, pl, pr, dw, ceil_mode)
    y = np.empty((n, p, q, c))
    for i in range(p):
        rows = [i * sh - pt + a * dh for a in range(kh)]
        rows_all = [r for r in rows if r < h + pb]
        rows_in = [r for r in rows if 0 <= r < h]
        for j in range(q):
            cols = [j * sw - pl + b * dw for b in range(kw)]
            cols_all = [v for v in cols if v < wd + pr]
            cols_in = [v for v in cols if 0 <= v < wd]
            win = x[:, rows_in][:, :, cols_in].reshape(n, -1, c)
            if kind == "max":
                y[:, i, j] = win.max(axis=1) if win.shape[1] else -np.inf
            else:
                count = len(rows_all) * len(cols_all) if count_include_pad else len(rows_in) * len(cols_in)
                y[:, i, j] = win.sum(axis=1) / count
    return y
