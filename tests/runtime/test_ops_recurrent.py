"""RNN, GRU and LSTM as loops over the sequence (engine.ops.recurrent, the
RNN executor step) against onnxruntime: every direction, with and without
initial states, biases and sequence_lens, both layouts, GRU's two reset
forms, LSTM peepholes and clip, non-default activations; sequence lengths
1, 7 and 300 with a plan arena that does not grow with the length; each
ISA path of the vector library the gate epilogue runs on."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from engine import kernels
from engine.errors import KernelError
from engine.session import InferenceSession
from tests.runtime.op_oracle import assert_outputs_match, check_op, reference_outputs

F = TensorProto.FLOAT
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _model(op, S, B, I, H, D, *, bias=True, init=False, lens=None, layout=0, peep=False, attrs=None, seed=0):
    """A one-node model with every weight an initializer (as exporters write
    them); returns (model, feeds)."""
    rng = np.random.default_rng(seed)
    G = GATES[op]

    def r(*shape):
        return rng.uniform(-0.6, 0.6, shape).astype(np.float32)

    x = r(B, S, I) if layout else r(S, B, I)
    inits = {"W": r(D, G * H, I), "R": r(D, G * H, H)}
    names = ["X", "W", "R", "", "", "", "", ""]
    if bias:
        inits["B"], names[3] = r(D, 2 * G * H), "B"
    feeds = {"X": x}
    if lens is not None:
        feeds["L"], names[4] = np.asarray(lens, np.int32), "L"
    state = (B, D, H) if layout else (D, B, H)
    if init:
        feeds["h0"], names[5] = r(*state), "h0"
        if op == "LSTM":
            feeds["c0"], names[6] = r(*state), "c0"
    if peep:
        inits["P"], names[7] = r(D, 3 * H), "P"
    names = names[:8 if op == "LSTM" else 6]
    while names[-1] == "":
        names.pop()
    attrs = dict(attrs or {})
    direction = attrs.pop("direction", "bidirectional" if D == 2 else "forward")
    outs = ["Y", "Y_h", "Y_c"][:3 if op == "LSTM" else 2]
    node = helper.make_node(op, names, outs, hidden_size=H, direction=direction, layout=layout, **attrs)
    ins = [helper.make_tensor_value_info("X", F, x.shape)]
    if "L" in feeds:
        ins.append(helper.make_tensor_value_info("L", TensorProto.INT32, [B]))
    ins += [helper.make_tensor_value_info(n, F, feeds[n].shape) for n in ("h0", "c0") if n in feeds]
    outs_vi = [helper.make_tensor_value_info(o, F, None) for o in outs]
    graph = helper.make_graph([node], op.lower(), ins, outs_vi,
                              [onnx.numpy_helper.from_array(v, n) for n, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]), feeds


def _shape_outputs(model, arrays):
    # The checker wants output shapes; the oracle's answer has them.
    for vi, a in zip(model.graph.output, arrays):
        vi.CopyFrom(helper.make_tensor_value_info(vi.name, F, a.shape))


def _check(tmp_path, model, feeds, threads=1):
    want = reference_outputs(model, feeds, "onnxruntime")
    _shape_outputs(model, want)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    sess = InferenceSession(path, threads=threads)
    got = sess.run(None, feeds)
    assert_outputs_match(got, want, model.graph.node[0].op_type, 1e-4, 1e-5)
    return sess


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("init", [False, True])
def test_directions_and_initial_states(tmp_path, op, direction, init):
    D = 2 if direction == "bidirectional" else 1
    model, feeds = _model(op, 7, 3, 5, 6, D, init=init, attrs={"direction": direction})
    _check(tmp_path, model, feeds)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_sequence_lens_mask_each_row(tmp_path, op, direction):
    # rows of length 7 (full), 3, 0 and 1; padded steps: zeros in Y, state kept
    D = 2 if direction == "bidirectional" else 1
    model, feeds = _model(op, 7, 4, 5, 6, D, init=True, lens=[7, 3, 0, 1], attrs={"direction": direction})
    _check(tmp_path, model, feeds)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_layout_1_batch_first(tmp_path, op):
    # onnxruntime refuses layout=1: its layout-0 answer on transposed data is the oracle.
    model, feeds = _model(op, 5, 3, 4, 6, 2, init=True, layout=1)
    flat, _ = _model(op, 5, 3, 4, 6, 2, init=True, layout=0)  # the same draws: the same weights
    flat_feeds = {n: np.ascontiguousarray(np.swapaxes(v, 0, 1)) for n, v in feeds.items()}
    want = reference_outputs(flat, flat_feeds, "onnxruntime")
    want = [np.transpose(want[0], (2, 0, 1, 3))] + [np.swapaxes(w, 0, 1) for w in want[1:]]
    _shape_outputs(model, want)
    onnx.save(model, str(tmp_path / "m.onnx"))
    got = InferenceSession(tmp_path / "m.onnx", threads=1).run(None, feeds)
    assert_outputs_match(got, want, op, 1e-4, 1e-5)


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_reset_forms_without_bias(tmp_path, lbr):
    model, feeds = _model("GRU", 9, 2, 5, 7, 1, bias=False, attrs={"linear_before_reset": lbr})
    _check(tmp_path, model, feeds)


def test_lstm_peepholes_and_clip(tmp_path):
    model, feeds = _model("LSTM", 6, 2, 4, 5, 2, init=True, peep=True, attrs={"clip": 0.5})
    _check(tmp_path, model, feeds)


def test_non_default_activations(tmp_path):
    acts = {"activations": ["HardSigmoid", "LeakyRelu", "Relu"], "activation_alpha": [0.3, 0.05],
            "activation_beta": [0.4]}
    model, feeds = _model("LSTM", 5, 2, 3, 4, 1, attrs=acts)
    _check(tmp_path, model, feeds)


def test_an_unsupported_activation_names_itself(tmp_path):
    model, _ = _model("RNN", 3, 1, 2, 2, 1, attrs={"activations": ["Softsign"]})
    _shape_outputs(model, [np.zeros((3, 1, 1, 2)), np.zeros((1, 1, 2))])
    onnx.save(model, str(tmp_path / "m.onnx"))
    sess = InferenceSession(tmp_path / "m.onnx", threads=1)
    with pytest.raises(Exception, match=r"activation 'softsign' \(supported: "):
        sess.run(None, {"X": np.zeros((3, 1, 2), np.float32)})


def test_a_sequence_length_past_the_sequence_is_refused(tmp_path):
    model, feeds = _model("GRU", 4, 2, 3, 3, 1, lens=[4, 5])
    _shape_outputs(model, [np.zeros((4, 1, 2, 3)), np.zeros((1, 2, 3))])
    onnx.save(model, str(tmp_path / "m.onnx"))
    with pytest.raises(KernelError, match=r"sequence_lens\[1\] = 5, expected 0\.\.4"):
        InferenceSession(tmp_path / "m.onnx", threads=1).run(None, feeds)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_plan_memory_is_flat_across_sequence_lengths(tmp_path, op):
    # The recurrence is a loop over one step's buffers: only Y (an output,
    # in the caller's memory) grows with the sequence.
    arenas = []
    for S in (1, 7, 300):
        model, feeds = _model(op, S, 2, 16, 24, 2, init=True, seed=S)
        sess = _check(tmp_path, model, feeds, threads=2)
        (plan,) = sess.plans()
        arenas.append(plan.arena_bytes)
    assert arenas[0] == arenas[1] == arenas[2], f"{op} plan arena by sequence length 1/7/300: {arenas}"


@pytest.mark.parametrize("isa", kernels.available_isas())
def test_every_isa_path(tmp_path, isa):
    with kernels.use_isa(isa):
        for op in ("GRU", "LSTM"):
            model, feeds = _model(op, 20, 3, 9, 17, 2, init=True, lens=[20, 11, 2], seed=3)
            _check(tmp_path, model, feeds, threads=2)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_weights_fed_at_run_time_are_packed_per_call(tmp_path, op):
    # W, R, B as graph inputs: the kernel packs them itself (GRU: R in two parts)
    rng = np.random.default_rng(5)
    G, S, B, I, H = GATES[op], 6, 2, 5, 7
    feeds = {n: rng.uniform(-0.6, 0.6, s).astype(np.float32)
             for n, s in (("X", (S, B, I)), ("W", (2, G * H, I)), ("R", (2, G * H, H)), ("B", (2, 2 * G * H)))}
    check_op(tmp_path, op, feeds, {"hidden_size": H, "direction": "bidirectional"}, n_outputs=2, opset=22,
             oracle="onnxruntime", rtol=1e-4, atol=1e-5)

