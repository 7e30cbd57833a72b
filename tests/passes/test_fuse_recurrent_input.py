"""fuse_recurrent_input, called directly: Transpose(perm [1, 0, 2]) -> LSTM /
GRU / RNN (a batch_first export) folds into the recurrence's strides, and
the plan's arena then stays the same for sequence lengths 1, 7 and 300; a
transposed sequence with another reader (node or If branch), another
perm, or layout=1 stays as it is."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from engine import aie_format
from engine.passes.fuse_recurrent import fuse_recurrent_input
from engine.session import InferenceSession
from tests.passes.graph_check import assert_computes_same, graph_of, model, ops, reader_of
from tests.runtime.op_oracle import assert_outputs_match, reference_outputs

B, I, H = 2, 5, 6
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _rnn_model(op="LSTM", perm=(1, 0, 2), layout=0, extra=(), cond=False):
    rng = np.random.default_rng(1)
    g = GATES[op]
    inits = {"W": rng.uniform(-0.5, 0.5, (1, g * H, I)).astype(np.float32),
             "R": rng.uniform(-0.5, 0.5, (1, g * H, H)).astype(np.float32)}
    nodes = [helper.make_node("Transpose", ["x"], ["x_t"], perm=list(perm)),
             helper.make_node(op, ["x_t", "W", "R"], ["", "y_h"], hidden_size=H, layout=layout), *extra]
    outs = {"y_h": [1, "batch", H], **{n.output[0]: ["seq", "batch", I] for n in extra}}
    return model(nodes, {"x": ["batch", "seq", I] if perm == (1, 0, 2) else ["seq", "batch", I]}, outs, inits,
                 opset=17, cond=cond)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_a_batch_first_sequence_is_read_in_place_and_memory_is_flat(tmp_path, op):
    m = _rnn_model(op)
    g = fuse_recurrent_input(graph_of(m))
    assert ops(g) == {op: 1} and g.nodes[0].attrs["_x_batch_first"] == 1 and g.nodes[0].inputs[0] == "x"
    aie_format.write(tmp_path / "g.aie", g)
    sess = InferenceSession(tmp_path / "g.aie", threads=1)
    arenas = []
    for seq in (1, 7, 300):
        feeds = {"x": np.random.default_rng(seq).standard_normal((B, seq, I)).astype(np.float32)}
        assert_outputs_match(sess.run(None, feeds), reference_outputs(m, feeds, "onnxruntime"), op, 1e-4, 1e-5)
        arenas.append(sess.plans()[-1].arena_bytes)
    assert arenas[0] == arenas[1] == arenas[2], f"arena by sequence length 1/7/300: {arenas}"


@pytest.mark.parametrize("kind", ["node", "if"])
def test_a_transposed_sequence_with_another_reader_stays(tmp_path, kind):
    m = _rnn_model(extra=(reader_of("x_t", kind),), cond=kind == "if")
    g = fuse_recurrent_input(graph_of(m))
    assert ops(g)["Transpose"] == 1 and "_x_batch_first" not in g.nodes[1].attrs
    assert_computes_same(m, g, tmp_path)


def test_another_perm_stays(tmp_path):
    m = _rnn_model(perm=(0, 1, 2))
    g = fuse_recurrent_input(graph_of(m))
    assert ops(g)["Transpose"] == 1
    assert_computes_same(m, g, tmp_path)
