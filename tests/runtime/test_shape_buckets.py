"""Shape buckets (engine.session.ShapeBuckets): a sequence length that
changes every call runs on a few padded plans, with the outputs of the
unpadded model (bert_mini: padding with attention_mask 0 reaches no real
token)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import InvalidArgument
from engine.session import InferenceSession, ShapeBuckets
from op_oracle import assert_matches_ort

BERT = ShapeBuckets(sizes=(16, 32, 64), inputs={"input_ids": (1, 0), "attention_mask": (1, 0)},
                    outputs={"last_hidden_state": 1})
RNG = np.random.default_rng(13)


def feeds(seq: int, pad: int = 0) -> dict[str, np.ndarray]:
    mask = np.ones((2, seq), np.int64)
    mask[1, seq - pad:] = 0  # the batch's second row is padded by its sender
    return {"input_ids": RNG.integers(1, 8192, (2, seq)).astype(np.int64), "attention_mask": mask}


@pytest.fixture(scope="module")
def bert(zoo):
    path = zoo("bert_mini")
    return path, InferenceSession(path, threads=2), InferenceSession(path, threads=2, buckets=BERT)


def test_buckets_give_the_unpadded_outputs_from_one_plan_per_bucket(bert):
    path, plain, bucketed = bert
    for seq in (7, 16, 23, 33, 64, 70):  # 70: above the largest bucket, its own plan, unpadded
        f = feeds(seq, pad=3)
        got, want = bucketed.run(None, f), plain.run(None, f)
        assert [g.shape for g in got] == [(2, seq, 256), (2, 256)]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5)
    assert bucketed.plan_stats["builds"] == 4  # 16, 32, 64 and 70
    [last_hidden] = bucketed.run(["last_hidden_state"], feeds(9))
    assert last_hidden.shape == (2, 9, 256) and last_hidden.flags.c_contiguous
    assert bucketed.plan_stats["builds"] == 4


def test_a_bucketed_run_matches_onnxruntime(bert):
    path, _, bucketed = bert
    assert_matches_ort(path, feeds(11, pad=4), bucketed)


@pytest.mark.parametrize("buckets,match", [
    (ShapeBuckets((16, 8), {"input_ids": (1, 0)}, {}), r"ascending positive sizes, got \[16, 8\]"),
    (ShapeBuckets((16,), {"ids": (1, 0)}, {}), r"bucket input 'ids' axis 1: .*no such input"),
    (ShapeBuckets((16,), {"input_ids": (2, 0)}, {}), r"bucket input 'input_ids' axis 2: .*dims \['N', 'S'\]"),
    (ShapeBuckets((16,), {}, {}), "name no input"),
    (ShapeBuckets((16,), {"input_ids": (1, 0)}, {"hidden": 1}), r"bucket outputs \['hidden'\] are not outputs"),
])
def test_bad_buckets_are_one_clear_error(bert, buckets, match):
    path, plain, _ = bert
    with pytest.raises(InvalidArgument, match=match):
        InferenceSession(path, threads=1, buckets=buckets, loaded=plain._model)


def test_bucketed_inputs_must_agree_and_out_is_refused(bert):
    _, _, bucketed = bert
    f = feeds(9)
    f["attention_mask"] = np.ones((2, 10), np.int64)
    with pytest.raises(InvalidArgument, match=r"must agree in size .* \[2, 9\], \[2, 10\]"):
        bucketed.run(None, f)
    with pytest.raises(InvalidArgument, match="out= is not supported with shape buckets"):
        bucketed.run(None, feeds(9), out=[np.empty((2, 9, 256), np.float32), np.empty((2, 256), np.float32)])
