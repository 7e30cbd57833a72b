"""Against onnx.reference: RNN, GRU (the RNN step, engine.ops.recurrent),
CausalConvWithState, LinearAttention (engine.ops.recurrent_unrolled), Einsum
(engine.ops.einsum), LpPool (engine.ops.lp_pool)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.op_oracle import check_op

RNG = np.random.default_rng(7)


def _r(*shape, scale=0.5):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op,gates", [("RNN", 1), ("GRU", 3)])
def test_rnn_gru_with_bias_and_initial_state(tmp_path, op, gates, direction):
    S, B, I, H = 4, 2, 3, 5
    D = 2 if direction == "bidirectional" else 1
    check_op(tmp_path, op, {"X": _r(S, B, I), "W": _r(D, gates * H, I), "R": _r(D, gates * H, H),
                            "B": _r(D, 2 * gates * H), "sequence_lens": None, "initial_h": _r(D, B, H)},
             {"hidden_size": H, "direction": direction}, n_outputs=2, opset=14)


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_linear_before_reset_batch_major(tmp_path, lbr):
    S, B, I, H = 3, 2, 4, 3
    check_op(tmp_path, "GRU", {"X": _r(B, S, I), "W": _r(1, 3 * H, I), "R": _r(1, 3 * H, H), "B": _r(1, 6 * H)},
             {"hidden_size": H, "linear_before_reset": lbr, "layout": 1}, n_outputs=2, opset=14)


@pytest.mark.parametrize("equation,shapes", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 2)]),
    ("i,i", [(6,), (6,)]),
    ("ij,j,k->ik", [(3, 4), (4,), (2,)]),
    ("bii->bi", [(2, 3, 3)]),
    ("ijk->kj", [(2, 3, 4)]),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_einsum(tmp_path, equation, shapes, dtype):
    inputs = {f"x{i}": RNG.standard_normal(s).astype(dtype) for i, s in enumerate(shapes)}
    check_op(tmp_path, "Einsum", inputs, {"equation": equation}, opset=12)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool_2d_with_padding(tmp_path, p):
    check_op(tmp_path, "LpPool", {"x": _r(1, 2, 5, 6)}, {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "p": p,
                                                         "strides": [2, 1]}, opset=18, atol=1e-4)


@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize("with_state", [False, True])
def test_causal_conv_with_state(tmp_path, activation, with_state):
    B, C, L, k = 2, 3, 5, 4
    check_op(tmp_path, "CausalConvWithState",
             {"input": _r(B, C, L), "weight": _r(C, 1, k), "bias": _r(C),
              "past_state": _r(B, C, k - 1) if with_state else None},
             {"activation": activation}, n_outputs=2, opset=27)


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention_update_rules_with_grouped_heads(tmp_path, rule):
    B, T, hq, hk, dk, dv = 2, 3, 4, 2, 3, 5
    inputs = {"query": _r(B, T, hq * dk), "key": _r(B, T, hk * dk), "value": _r(B, T, hk * dv),
              "past_state": _r(B, hk, dk, dv),
              "decay": -np.abs(_r(B, T, hk)) if "gated" in rule else None,
              "beta": np.abs(_r(B, T, hk)) if "delta" in rule else None}
    check_op(tmp_path, "LinearAttention", inputs, {"q_num_heads": hq, "kv_num_heads": hk, "update_rule": rule},
             n_outputs=2, opset=27)
