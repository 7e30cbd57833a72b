"""fuse_attention: bert_mini's per-head attention (MatMul(Q, Kt), the
1/sqrt(d) scale already folded into the GEMM's alpha, Add(mask), Softmax,
MatMul(·, V)) becomes one FusedAttention node per layer and matches
onnxruntime; small graphs check the variants and that inexact chains stay."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.session import InferenceSession
from models import zoo as model_zoo
from tests.runtime.op_oracle import assert_matches_ort

H, M, L, DK, DV = 3, 70, 90, 16, 24  # M > one 64-row score tile, with a partial last tile


@pytest.mark.parametrize("threads", [1, 2])
def test_bert_mini_attention_fuses_per_layer(zoo, threads):
    from models.bert_mini import LAYERS

    path = zoo("bert_mini")
    sess = InferenceSession(path, threads=threads)
    ops = Counter(n.op for n in sess.graph.nodes)
    assert ops["FusedAttention"] == LAYERS == 4 and ops["Softmax"] == 0, ops
    steps = Counter(st["op_name"] for st in sess.profile(model_zoo.random_inputs("bert_mini", batch=1, seq=128, seed=1), 1))
    assert steps["attention"] == LAYERS and steps["softmax"] == 0, steps  # the fused step, not the composed fallback
    for batch, seq in ((1, 128), (7, 128), (7, 100)):
        assert_matches_ort(path, model_zoo.random_inputs("bert_mini", batch=batch, seq=seq, seed=batch), sess)


def _model(path, *, mask_shape=("batch", 1, M, L), softmax_axis=-1, scale="div", leak=False):
    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array(np.array(np.sqrt(DK), np.float32), "c")]
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["qk"])]
    if scale:
        nodes.append(helper.make_node("Div" if scale == "div" else "Mul", ["qk", "c"], ["s"]))
    cur = "s" if scale else "qk"
    ins = [helper.make_tensor_value_info("q", TensorProto.FLOAT, ["batch", H, M, DK]),
           helper.make_tensor_value_info("kt", TensorProto.FLOAT, ["batch", H, DK, L]),
           helper.make_tensor_value_info("v", TensorProto.FLOAT, ["batch", H, L, DV])]
    if mask_shape == "const":
        inits.append(numpy_helper.from_array(rng.uniform(-3, 0, (M, L)).astype(np.float32), "mask"))
    if mask_shape is not None:
        if mask_shape != "const":
            ins.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, list(mask_shape)))
        nodes.append(helper.make_node("Add", [cur, "mask"], ["sm"]))
        cur = "sm"
    nodes += [helper.make_node("Softmax", [cur], ["p"], axis=softmax_axis),
              helper.make_node("MatMul", ["p", "v"], ["Y"])]
    outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", H, M, DV])]
    if leak:  # the probabilities are also a graph output: the chain must stay
        outs.append(helper.make_tensor_value_info("p", TensorProto.FLOAT, ["batch", H, M, L]))
    graph = helper.make_graph(nodes, "attn", ins, outs, initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _feeds(path, batch):
    rng = np.random.default_rng(batch)
    model = onnx.load(str(path))
    feeds = {}
    for t in model.graph.input:
        shape = [batch if d.dim_param else d.dim_value for d in t.type.tensor_type.shape.dim]
        feeds[t.name] = rng.standard_normal(shape, dtype=np.float32) * (4.0 if t.name == "mask" else 1.0)
    return feeds


@pytest.mark.parametrize("variant", [dict(), dict(scale="mul"), dict(scale=None), dict(mask_shape=None),
                                     dict(mask_shape="const"), dict(mask_shape=("batch", 1, 1, L)),
                                     dict(mask_shape=(1, H, M, L))])
@pytest.mark.op_test("FusedAttention")
def test_exact_attention_fuses(tmp_path, variant):
    path = _model(tmp_path / "m.onnx", **variant)
    for threads in (1, 2):
        sess = InferenceSession(path, threads=threads)
        assert Counter(n.op for n in sess.graph.nodes) == Counter({"FusedAttention": 1})
        steps = Counter(st["op_name"] for st in sess.profile(_feeds(path, 2), 1))
        assert steps["attention"] == 1 and steps["softmax"] == 0, steps
        for batch in (1, 7):
            assert_matches_ort(path, _feeds(path, batch), sess)


@pytest.mark.parametrize("variant", [dict(softmax_axis=2), dict(leak=True)])
def test_inexact_attention_stays(tmp_path, variant):
    path = _model(tmp_path / "m.onnx", **variant)
    sess = InferenceSession(path, threads=2)
    ops = Counter(n.op for n in sess.graph.nodes)
    assert ops["FusedAttention"] == 0 and ops["Softmax"] == 1, ops
    assert_matches_ort(path, _feeds(path, 7), sess)
