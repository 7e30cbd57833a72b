"""Stateful sequence ops composed at plan time.

LinearAttention is unrolled over its state update (its plan grows with the
sequence length). CausalConvWithState is a depthwise 1-D convolution over
[state, input]. RNN, GRU and LSTM run as loops in C (engine.ops.recurrent)."""

from __future__ import annotations

import numpy as np

from engine.lowering import LoweringContext
from engine.ops.compose import Composer, const, ints, wanted

def _slice(c: Composer, v, start: int, stop: int, axis: int):
    return c.op("Slice", v, ints([start]), ints([stop]), ints([axis]))


def lower_causal_conv_with_state(ctx: LoweringContext) -> None:
    x, w, b, past = ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3)
    ctx.require_dtype(x, (np.float32,))
    act = ctx.attr("activation", "none")
    if act not in ("none", "silu", "swish"):
        raise ctx.unsupported(f"activation={act!r} (supported: none, silu, swish)")
    if x.rank != 3 or w.rank != 3 or w.shape[:2] != (x.shape[1], 1):
        raise ctx.unsupported(f"input {x.shape} with weight {w.shape} (needs [B, C, L] and [C, 1, k])")
    bsz, ch, _ = x.shape
    k = w.shape[2]
    c = Composer(ctx)
    state = past if past is not None else const(np.zeros((bsz, ch, k - 1), np.float32))
    if state.shape != (bsz, ch, k - 1):
        raise ctx.unsupported(f"past_state {state.shape}, expected {(bsz, ch, k - 1)}")
    padded = c.op("Concat", state, x, axis=2) if k > 1 else x
    y = c.op("Conv", padded, w, b, group=ch, kernel_shape=[k])
    c.out(0, c.mul(y, c.op("Sigmoid", y)) if act != "none" else y)
    if wanted(ctx, 1):
        n = padded.shape[2]
        c.out(1, _slice(c, padded, n - (k - 1), n, 2))


def _heads_4d(c: Composer, v, heads: int):
    """[B, T, heads*D] -> [B, heads, T, D]."""
    b, t, hd = v.shape
    if hd % heads:
        raise c.ctx.unsupported(f"last dim {hd} not divisible by {heads} heads")
    return c.transpose(c.reshape(v, [b, t, heads, hd // heads]), (0, 2, 1, 3))


def lower_linear_attention(ctx: LoweringContext) -> None:
    q, k, v, past, decay, beta = (ctx.input(i) for i in range(6))
    for t, what in ((q, "query"), (k, "key"), (v, "value")):
        ctx.require_dtype(t, (np.float32,), what)
        if t.rank != 3:
            raise ctx.unsupported(f"{what} of rank {t.rank} (needs [B, T, H*D])")
    rule = ctx.attr("update_rule", "gated_delta")
    hq, hk = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if rule not in ("linear", "gated", "delta", "gated_delta") or not hq or not hk or hq % hk:
        raise ctx.unsupported(f"update_rule={rule!r}, q_num_heads={hq}, kv_num_heads={hk}")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if (decay is not None) != gating or (beta is not None) != delta:
        raise ctx.unsupported(f"update_rule {rule!r} with decay {'given' if decay else 'absent'}, "
                              f"beta {'given' if beta else 'absent'}")
    c = Composer(ctx)
    bsz, steps = q.shape[:2]
    q4, k4, v4 = _heads_4d(c, q, hq), _heads_4d(c, k, hk), _heads_4d(c, v, hk)
    dk, dv = q4.shape[3], v4.shape[3]
    if decay is not None:
        if decay.rank != 3 or decay.shape[2] not in (hk, hk * dk):
            raise ctx.unsupported(f"decay of shape {decay.shape}")
        decay = c.op("Exp", _heads_4d(c, decay, hk))  # [B, Hk, T, 1 or dk]
    if beta is not None:
        if beta.rank != 3 or beta.shape[2] not in (hk, 1):
            raise ctx.unsupported(f"beta of shape {beta.shape}")
        beta = _heads_4d(c, beta, beta.shape[2])  # [B, Hk or 1, T, 1]
    if past is not None and past.shape != (bsz, hk, dk, dv):
        raise ctx.unsupported(f"past_state {past.shape}, expected {(bsz, hk, dk, dv)}")
    state = past if past is not None else const(np.zeros((bsz, hk, dk, dv), np.float32))
    scale = ctx.attr("scale", 0.0) or 1.0 / np.sqrt(dk)
    reps = hq // hk
    outs = []
    for t in range(steps):
        kt = _slice(c, k4, t, t + 1, 2)  # [B, Hk, 1, dk]
        vt = _slice(c, v4, t, t + 1, 2)  # [B, Hk, 1, dv]
        if decay is not None:
            g = c.transpose(_slice(c, decay, t, t + 1, 2), (0, 1, 3, 2))  # [B, Hk, 1 or dk, 1]
            state = c.mul(state, g)
        if beta is not None:
            retrieved = c.op("MatMul", kt, state)  # [B, Hk, 1, dv]
            vt = c.mul(_slice(c, beta, t, t + 1, 2), c.sub(vt, retrieved))
        state = c.add(state, c.mul(c.transpose(kt, (0, 1, 3, 2)), vt))
        read = state
        if reps > 1:
            read = c.reshape(c.op("Expand", c.op("Unsqueeze", state, ints([2])), ints([1, 1, reps, 1, 1])),
                             [bsz, hq, dk, dv])
        outs.append(c.mul(c.op("MatMul", _slice(c, q4, t, t + 1, 2), read), c.scalar(scale, np.float32)))
    y = outs[0] if steps == 1 else c.op("Concat", *outs, axis=2)  # [B, Hq, T, dv]
    c.out(0, c.reshape(c.transpose(y, (0, 2, 1, 3)), [bsz, steps, hq * dv]))
    if wanted(ctx, 1):
        c.out(1, state)


RULES = {"CausalConvWithState": {27: lower_causal_conv_with_state}, "LinearAttention": {27: lower_linear_attention}}
ATTRS = {"CausalConvWithState": {"activation"},
         "LinearAttention": {"chunk_size", "kv_num_heads", "q_num_heads", "scale", "update_rule"}}
