"""Attention and RotaryEmbedding (engine.ops.attention) against onnx.reference
on seeded random inputs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.op_oracle import check_op

RNG = np.random.default_rng(23)


def _r(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2)])
def test_attention_4d_causal_and_grouped_query(tmp_path, causal, heads):
    hq, hk = heads
    check_op(tmp_path, "Attention", {"Q": _r(2, hq, 5, 8), "K": _r(2, hk, 7, 8), "V": _r(2, hk, 7, 6)},
             {"is_causal": causal})


def test_attention_3d_with_float_mask_past_cache_and_all_outputs(tmp_path):
    b, q, kv, past, hq, hk, d = 2, 3, 4, 2, 4, 2, 8
    mask = np.where(RNG.random((q, kv + past)) < 0.2, -np.inf, RNG.standard_normal((q, kv + past))).astype(np.float32)
    check_op(tmp_path, "Attention",
             {"Q": _r(b, q, hq * d), "K": _r(b, kv, hk * d), "V": _r(b, kv, hk * d), "attn_mask": mask,
              "past_key": _r(b, hk, past, d), "past_value": _r(b, hk, past, d)},
             {"q_num_heads": hq, "kv_num_heads": hk, "scale": 0.3, "qk_matmul_output_mode": 2},
             n_outputs=4)


@pytest.mark.parametrize("mode", [0, 1, 3])
def test_attention_bool_mask_softcap_and_fully_masked_row(tmp_path, mode):
    mask = RNG.random((2, 1, 4, 6)) < 0.7
    mask[0, 0, 1, :] = False  # a row masked everywhere must give zeros, not NaN
    check_op(tmp_path, "Attention", {"Q": _r(2, 3, 4, 5), "K": _r(2, 3, 6, 5), "V": _r(2, 3, 6, 5), "attn_mask": mask},
             {"softcap": 2.5, "qk_matmul_output_mode": mode}, n_outputs=4, output_names=["y", "", "", "qk"])


def test_attention_padding_mask_from_nonpad_lengths(tmp_path):
    check_op(tmp_path, "Attention",
             {"Q": _r(2, 2, 3, 4), "K": _r(2, 2, 6, 4), "V": _r(2, 2, 6, 4), "attn_mask": None,
              "past_key": None, "past_value": None, "nonpad_kv_seqlen": np.array([4, 6], np.int64)},
             {"is_causal": 1}, opset=24)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_4d_partial_with_positions(tmp_path, interleaved):
    b, h, s, d, rd, maxpos = 2, 3, 5, 8, 4, 11
    check_op(tmp_path, "RotaryEmbedding",
             {"X": _r(b, h, s, d), "cos_cache": _r(maxpos, rd // 2), "sin_cache": _r(maxpos, rd // 2),
              "position_ids": RNG.integers(0, maxpos, (b, s)).astype(np.int64)},
             {"interleaved": interleaved, "rotary_embedding_dim": rd})


def test_rotary_embedding_3d_without_positions(tmp_path):
    b, s, heads, d = 2, 4, 2, 6
    check_op(tmp_path, "RotaryEmbedding",
             {"X": _r(b, s, heads * d), "cos_cache": _r(b, s, d // 2), "sin_cache": _r(b, s, d // 2)},
             {"num_heads": heads})


def test_attention_half_precision_is_cleanly_unsupported(tmp_path):
    from engine.errors import UnsupportedOperatorError

    q = _r(1, 2, 3, 4).astype(np.float16)
    with pytest.raises(UnsupportedOperatorError, match="Q dtype float16"):
        check_op(tmp_path, "Attention", {"Q": q, "K": q, "V": q})
