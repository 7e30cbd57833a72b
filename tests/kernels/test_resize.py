"""2-D Resize (nearest, linear) against onnx.reference, NCHW and NHWC."""

from __future__ import annotations

import numpy as np
import pytest

from engine import kernels as K
from tests.runtime.op_oracle import reference_outputs, single_node_model

COORDS = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def onnx_resize(x, scales, sizes, **attrs):
    inputs = {"x": x, "roi": None, "scales": None if scales is None else np.array(scales, np.float32),
              "sizes": None if sizes is None else np.array(sizes, np.int64)}
    model = single_node_model("Resize", inputs, attrs, 1, 18)
    return reference_outputs(model, {n: v for n, v in inputs.items() if v is not None}, "onnx.reference")[0]


X = np.random.default_rng(0).standard_normal((2, 3, 5, 7)).astype(np.float32)
CASES = [dict(scales=[1, 1, 2, 2]), dict(scales=[1, 1, 0.5, 0.6]), dict(scales=[1, 1, 1.7, 3.0]),
         dict(sizes=[2, 3, 9, 4]), dict(sizes=[2, 3, 1, 1]), dict(sizes=[2, 3, 5, 7])]


def check(mode, coord, nearest, case, threads=None):
    attrs = dict(mode=mode, coordinate_transformation_mode=coord)
    if mode == "nearest":
        attrs["nearest_mode"] = nearest
    want = onnx_resize(X, case.get("scales"), case.get("sizes"), **attrs)
    got = K.resize(X, **case, mode=mode, coordinate_transformation_mode=coord, nearest_mode=nearest,
                   threads=threads)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # the same image in NHWC: scales/sizes in NHWC order
    nhwc = {k: [v[0], v[2], v[3], v[1]] for k, v in case.items()}
    got2 = K.resize(np.ascontiguousarray(X.transpose(0, 2, 3, 1)), **nhwc, mode=mode,
                    coordinate_transformation_mode=coord, nearest_mode=nearest, layout="NHWC")
    np.testing.assert_allclose(got2, want.transpose(0, 2, 3, 1), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=lambda c: str(c))
@pytest.mark.parametrize("nearest", NEAREST)
@pytest.mark.parametrize("coord", COORDS)
def test_nearest(coord, nearest, case):
    check("nearest", coord, nearest, case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: str(c))
@pytest.mark.parametrize("coord", COORDS)
def test_linear(coord, case):
    check("linear", coord, "round_prefer_floor", case)


def test_threads_and_errors():
    check("linear", "half_pixel", "floor", dict(scales=[1, 1, 4, 4]), threads=2)
    with pytest.raises(ValueError, match="mode 'cubic' not supported"):
        K.resize(X, scales=[1, 1, 2, 2], mode="cubic")
    with pytest.raises(ValueError, match="1 on the batch and channel dims"):
        K.resize(X, scales=[1, 2, 2, 2])
    with pytest.raises(ValueError, match="exactly one of scales and sizes"):
        K.resize(X)
    with pytest.raises(ValueError, match="tf_crop_and_resize"):
        K.resize(X, scales=[1, 1, 2, 2], coordinate_transformation_mode="tf_crop_and_resize")
