"""The converter's performance passes keep answers exact: NHWC layout of
conv/pool chains, residual/SiLU/GELU/scale fusion, weight pre-packing (and
re-packing when the packed ISA is not the host's), per-step thread caps and
the hugepage-backed plan arena."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from engine.session import InferenceSession
from models import zoo as model_zoo
from tests.runtime.op_oracle import assert_matches_ort


def _inputs(name, batch):
    return model_zoo.random_inputs(name, batch=batch, seed=batch, seq=32)


def test_resnet_runs_as_one_nhwc_chain_with_fused_residuals(zoo):
    sess = InferenceSession(zoo("resnet18"), threads=1)
    ops = Counter(n.op for n in sess.graph.nodes)
    # One transpose in (the image), one out (after the global pool, a view);
    # every Add + Relu of a block rides in its Conv's epilogue.
    assert ops["Transpose"] == 2 and ops["Add"] == 0 and ops["Relu"] == 0, ops
    convs = [n for n in sess.graph.nodes if n.op == "Conv"]
    assert all(n.attrs.get("_nhwc") and n.attrs.get("_packed_isa") is not None for n in convs)
    assert sum(1 for n in convs if len(n.inputs) > 4 and n.inputs[4]) == 8  # 8 basic blocks


def test_detector_silu_and_bert_gelu_scale_are_fused(zoo):
    det = Counter(n.op for n in InferenceSession(zoo("detector"), threads=1).graph.nodes)
    assert det["Sigmoid"] == 1 and det["Mul"] == 1, det  # only the head's decode remains
    bert = Counter(n.op for n in InferenceSession(zoo("bert_mini"), threads=1).graph.nodes)
    assert bert["Erf"] == 0 and bert["Div"] == 0 and bert["Tanh"] == 0, bert


@pytest.mark.parametrize("batch", [3, 4])
def test_conv_batches_whose_last_tile_is_short(zoo, batch):
    # Batches 3/4 of cnn_bn and the detector hit the library's short last
    # im2col tile (see kernels/exec/conv.c); the answer must still be exact.
    for name in ("cnn_bn", "detector"):
        path = zoo(name)
        assert_matches_ort(path, _inputs(name, batch), InferenceSession(path, threads=1))


def test_packed_weights_for_another_isa_are_repacked(zoo, tmp_path):
    from engine import aie_format
    from engine.convert import convert_file

    dst = tmp_path / "cnn.aie"
    convert_file(zoo("cnn_bn"), dst)
    model = aie_format.load(dst)
    for node in model.graph.nodes:
        if "_packed_isa" in node.attrs:
            node.attrs["_packed_isa"] = 99  # as if converted on another CPU
    other = tmp_path / "other.aie"
    aie_format.write(other, model.graph, {k: v for k, v in model.meta.items() if k != "graph"})
    sess = InferenceSession(other, threads=1)
    assert {n.attrs.get("_packed_isa") for n in sess.graph.nodes} >= {99}
    want = InferenceSession(dst, threads=1).run(None, _inputs("cnn_bn", 2))[0]
    np.testing.assert_array_equal(sess.run(None, _inputs("cnn_bn", 2))[0], want)


def test_small_steps_stay_on_one_thread_and_big_arenas_record_their_backing(zoo):
    sess = InferenceSession(zoo("resnet18"), threads=2)
    sess.run(None, _inputs("resnet18", 1))
    plan = sess.plans()[0]
    caps = plan.steps[:, 7]
    assert (caps == 1).any() and (caps == 0).any()  # tiny steps capped, convs free to split
    # hugetlb when 2 MiB pages are reserved, else THP/normal with the reason
    assert plan.arena_backing.split()[0] in ("hugetlb-2M", "thp", "normal", "numpy"), plan.arena_backing
