"""Zoo models through the engine vs onnxruntime (rtol 1e-4, atol 1e-5).

make test covers every zoo model at batch 1 and 7 through the .onnx and the
.aie path with 1 and 2 threads, except the two 224x224 CNNs which run at
batch 1 only (ResNet-18 at batch 64 takes tens of seconds on 2 cores);
the full matrix including batch 64 is marked slow (pytest -m slow).
"""

from __future__ import annotations

import pytest

from engine import aie_format
from engine.convert import convert_file
from engine.session import InferenceSession
from models import zoo as model_zoo
from tests.runtime.op_oracle import assert_matches_ort

SMALL = ["digits", "mlp", "cnn_bn", "detector", "lstm", "bert_mini"]
LARGE = ["mobilenetv2", "resnet18"]


def _session(path, tmp_path, via, threads):
    if via == "aie":
        dst = tmp_path / (path.stem + ".aie")
        convert_file(path, dst)
        return InferenceSession(dst, threads=threads)
    return InferenceSession(path, threads=threads)


def _inputs(name, batch):
    return model_zoo.random_inputs(name, batch=batch, seed=batch, seq=32)


@pytest.mark.parametrize("via", ["onnx", "aie"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", SMALL)
def test_small_models_match_onnxruntime(zoo, tmp_path, name, via, threads):
    path = zoo(name)
    sess = _session(path, tmp_path, via, threads)
    for batch in (1, 7):
        assert_matches_ort(path, _inputs(name, batch), sess)


@pytest.mark.parametrize("name", LARGE)
def test_large_models_match_onnxruntime_batch1(zoo, tmp_path, name):
    path = zoo(name)
    assert_matches_ort(path, _inputs(name, 1), _session(path, tmp_path, "aie", 2))


@pytest.mark.slow
@pytest.mark.parametrize("via", ["onnx", "aie"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", SMALL + LARGE)
def test_full_matrix(zoo, tmp_path, name, via, threads):
    path = zoo(name)
    sess = _session(path, tmp_path, via, threads)
    for batch in (1, 7, 64):
        assert_matches_ort(path, _inputs(name, batch), sess)


def test_plan_cache_is_bounded(zoo):
    sess = InferenceSession(zoo("mlp"), threads=1, plan_cache_size=3)
    for batch in range(1, 9):
        sess.run(None, _inputs("mlp", batch))
    assert sess.plan_count == 3


def test_convert_summary_and_planned_memory(zoo, tmp_path):
    dst = tmp_path / "cnn.aie"
    summary = convert_file(zoo("cnn_bn"), dst)
    assert "fold_batchnorm" in summary.passes
    assert summary.op_counts.get("BatchNormalization", 0) == 0
    assert summary.arena_bytes > 0 and summary.weights_bytes > 0
    assert aie_format.planned_memory(dst) == aie_format.load(dst).weights.size + summary.arena_bytes


def test_concurrent_runs_from_threads(zoo):
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    sess = InferenceSession(zoo("cnn_bn"), threads=1)
    feeds = [_inputs("cnn_bn", 3 + (i % 2)) for i in range(16)]
    expected = [sess.run(None, f)[0] for f in feeds]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda f: sess.run(None, f)[0], feeds))
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)
