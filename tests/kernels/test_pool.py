"""engine.kernels pooling against float64 references and onnxruntime (the oracle the
runtime is compared to), on every ISA path."""

from __future__ import annotations

import numpy as np
import pytest

import conv_reference as ref
from engine import kernels
from tests.runtime.op_oracle import reference_outputs, single_node_model

ISAS = kernels.available_isas()

# N, H, W, C, kernel, strides, dilations, pads (top, left, bottom, right), ceil_mode
CASES = {
    "2x2-s2": (1, 8, 8, 3, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), False),
    "3x3-s2-pad1-resnet": (2, 17, 17, 17, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), False),
    "3x3-s2-ceil": (1, 7, 7, 31, (3, 3), (2, 2), (1, 1), (0, 0, 0, 0), True),
    "3x3-s2-ceil-asym": (1, 17, 16, 9, (3, 3), (2, 2), (1, 1), (1, 0, 2, 1), True),
    "2x3-s(1,3)-ceil": (2, 7, 17, 40, (2, 3), (1, 3), (1, 1), (1, 2, 0, 1), True),
    "3x3-d2": (1, 17, 17, 3, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), False),
    "2x2-d3-ceil": (1, 7, 7, 17, (2, 2), (2, 2), (3, 3), (1, 0, 1, 1), True),
    "1x1-H1": (3, 1, 1, 1, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), False),
    "7x7-whole": (1, 7, 7, 33, (7, 7), (1, 1), (1, 1), (0, 0, 0, 0), False),
}


def _x(case, seed=0):
    n, h, w, c = case[:4]
    return np.random.default_rng(seed).standard_normal((n, h, w, c), dtype=np.float32)


def _kw(case):
    return dict(strides=case[5], dilations=case[6], pads=case[7], ceil_mode=case[8])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", list(CASES))
def test_max_pool(isa, name):
    case = CASES[name]
    x = _x(case)
    with kernels.use_isa(isa):
        y = kernels.max_pool2d(x, case[4], threads=1, **_kw(case))
    want = ref.pool2d("max", x, case[4], **_kw(case))
    np.testing.assert_array_equal(y, want.astype(np.float32), err_msg=f"{name}/{isa}")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_avg_pool(isa, name, count_include_pad):
    case = CASES[name]
    x = _x(case, seed=1)
    with kernels.use_isa(isa):
        y = kernels.avg_pool2d(x, case[4], count_include_pad=count_include_pad, threads=1, **_kw(case))
    want = ref.pool2d("avg", x, case[4], count_include_pad=count_include_pad, **_kw(case))
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-6, err_msg=f"{name}/{isa}")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("shape", [(1, 7, 7, 33), (2, 1, 1, 3), (3, 5, 3, 17), (1, 14, 14, 64)])
def test_global_pools(isa, shape):
    x = np.random.default_rng(2).standard_normal(shape, dtype=np.float32)
    with kernels.use_isa(isa):
        avg = kernels.global_avg_pool(x, threads=1)
        mx = kernels.global_max_pool(x, threads=1)
    n, c = shape[0], shape[3]
    np.testing.assert_allclose(avg.reshape(n, c), x.astype(np.float64).mean(axis=(1, 2)), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(mx.reshape(n, c), x.max(axis=(1, 2)))


@pytest.mark.parametrize("isa", ISAS)
def test_nan_propagates(isa):
    x = _x(CASES["3x3-s2-pad1-resnet"], seed=3)
    x[0, 4, 4, 2] = np.nan
    x[1, 0, 0, 16] = np.nan
    kw = _kw(CASES["3x3-s2-pad1-resnet"])
    with kernels.use_isa(isa):
        checks = [
            (kernels.max_pool2d(x, (3, 3), threads=1, **kw), ref.pool2d("max", x, (3, 3), **kw)),
            (kernels.avg_pool2d(x, (3, 3), threads=1, **kw), ref.pool2d("avg", x, (3, 3), **kw)),
            (kernels.global_max_pool(x, threads=1), x.max(axis=(1, 2), keepdims=True)),
            (kernels.global_avg_pool(x, threads=1), x.mean(axis=(1, 2), keepdims=True)),
        ]
    for got, want in checks:
        assert np.isnan(want).any()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_threads_agree():
    x = _x(CASES["3x3-s2-pad1-resnet"], seed=4)
    kw = _kw(CASES["3x3-s2-pad1-resnet"])
    for fn in (kernels.max_pool2d, kernels.avg_pool2d):
        np.testing.assert_array_equal(fn(x, (3, 3), threads=1, **kw), fn(x, (3, 3), threads=2, **kw))
    np.testing.assert_array_equal(kernels.global_avg_pool(x, threads=1), kernels.global_avg_pool(x, threads=2))


def test_empty_batch():
    x = np.zeros((0, 7, 7, 3), np.float32)
    assert kernels.max_pool2d(x, (3, 3), strides=(2, 2)).shape == (0, 3, 3, 3)
    assert kernels.global_avg_pool(x).shape == (0, 1, 1, 3)


@pytest.mark.parametrize("kwargs, message", [
    (dict(x=np.zeros((1, 4, 4, 3), np.float64)), "x: expected dtype float32"),
    (dict(kernel=(5, 5)), "larger than the padded input"),
    (dict(pads=(3, 0, 0, 0)), "smaller than the window span"),
    (dict(strides=(0, 1)), "strides: expected 2 integers >= 1"),
    (dict(kernel=(2,)), "kernel: expected 2 integers"),
])
def test_bad_arguments_raise_value_error(kwargs, message):
    x = kwargs.pop("x", np.ones((1, 4, 4, 3), np.float32))
    kernel = kwargs.pop("kernel", (3, 3))
    with pytest.raises(ValueError, match=message):
        kernels.max_pool2d(x, kernel, **kwargs)


ORT_CASES = ["3x3-s2-ceil", "3x3-s2-ceil-asym", "2x3-s(1,3)-ceil", "2x2-d3-ceil", "3x3-s2-pad1-resnet"]


@pytest.mark.parametrize("name", ORT_CASES)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool-exclude", "AveragePool-include"])
def test_matches_onnxruntime(name, op):
    """The ONNX output-shape and window rules, checked against onnxruntime itself."""
    case = CASES[name]
    x = _x(case, seed=5)
    kw = _kw(case)
    pt, pl, pb, pr = kw["pads"]
    attrs = dict(kernel_shape=list(case[4]), strides=list(kw["strides"]), pads=[pt, pl, pb, pr],
                 ceil_mode=int(kw["ceil_mode"]))
    if kw["dilations"] != (1, 1):
        attrs["dilations"] = list(kw["dilations"])
    op_type = op.split("-")[0]
    if op_type == "AveragePool":
        attrs["count_include_pad"] = int(op.endswith("include"))
    nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    model = single_node_model(op_type, {"x": nchw}, attrs, 1, 19)
    want = reference_outputs(model, {"x": nchw}, "onnxruntime")[0].transpose(0, 2, 3, 1)
    if op_type == "MaxPool":
        got = kernels.max_pool2d(x, case[4], threads=1, **kw)
    else:
        got = kernels.avg_pool2d(x, case[4], count_include_pad=op.endswith("include"), threads=1, **kw)
    assert got.shape == want.shape, f"{name}/{op}: shape {got.shape}, onnxruntime {want.shape}"
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{name}/{op}")
