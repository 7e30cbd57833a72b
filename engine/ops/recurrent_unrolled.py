"""Recurrent and stateful sequence ops composed at plan time.

RNN and GRU are unrolled over the (static) sequence: the input projection of
every step is one GEMM, then each step is a small GEMM on the hidden state
plus element-wise gate math (the ONNX equations, default activations).
LinearAttention is unrolled the same way over its state update.
CausalConvWithState is a depthwise 1-D convolution over [state, input].
Plans grow with the sequence length; LSTM has a fused executor step
(engine.ops.recurrent) instead."""

from __future__ import annotations

import numpy as np

from engine.lowering import LoweringContext
from engine.ops.compose import Composer, const, ints, wanted

_DEFAULT_ACTS = {"RNN": ["tanh"], "GRU": ["sigmoid", "tanh"]}
_GATES = {"RNN": 1, "GRU": 3}


def _check(ctx: LoweringContext, x, seq_len: int) -> None:
    op = ctx.node.op
    acts = ctx.attr("activations")
    default = _DEFAULT_ACTS[op]
    if acts is not None and [a.lower() for a in acts] != default * (len(acts) // len(default)):
        raise ctx.unsupported(f"activations {acts} (only the defaults {default})")
    if ctx.attr("clip") is not None:
        raise ctx.unsupported("clip")
    if ctx.input(4) is not None:
        lens = ctx.const(4, "sequence_lens")
        if not np.all(lens == seq_len):
            raise ctx.unsupported("sequence_lens shorter than the sequence")


def _slice(c: Composer, v, start: int, stop: int, axis: int):
    return c.op("Slice", v, ints([start]), ints([stop]), ints([axis]))


def lower_rnn_gru(ctx: LoweringContext) -> None:
    op = ctx.node.op
    x, w, r, b, h0 = (ctx.input(i) for i in (0, 1, 2, 3, 5))
    for v in (x, w, r):
        ctx.require_dtype(v, (np.float32,))
    layout = ctx.attr("layout", 0)
    if layout not in (0, 1) or x.rank != 3:
        raise ctx.unsupported(f"layout={layout} / input of rank {x.rank}")
    c = Composer(ctx)
    if layout:
        x = c.transpose(x, (1, 0, 2))
        if h0 is not None:
            h0 = c.transpose(h0, (1, 0, 2))
    S, B, I = x.shape
    _check(ctx, x, S)
    G = _GATES[op]
    D, GH, I2 = w.shape
    H = GH // G
    direction = ctx.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional") or D != (2 if direction == "bidirectional" else 1) \
            or I2 != I or GH != G * H or ctx.attr("hidden_size", H) != H or r.shape != (D, GH, H):
        raise ctx.unsupported(f"W {w.shape} / R {r.shape} / direction {direction!r} inconsistent with X {x.shape}")
    lbr = ctx.attr("linear_before_reset", 0) if op == "GRU" else 0
    zero_state = const(np.zeros((B, H), np.float32))
    per_dir_y, per_dir_h = [], []
    for d in range(D):
        wd = c.op("Gather", w, const(np.int64(d)), axis=0)
        rt = c.transpose(c.op("Gather", r, const(np.int64(d)), axis=0), (1, 0))  # [H, G*H]
        xw = c.op("MatMul", x, c.transpose(wd, (1, 0)))  # [S, B, G*H]
        rb = None
        if b is not None:
            bd = c.op("Gather", b, const(np.int64(d)), axis=0)
            wb, rb = _slice(c, bd, 0, GH, 0), _slice(c, bd, GH, 2 * GH, 0)
            if op == "RNN":
                xw, rb = c.add(xw, c.add(wb, rb)), None
            else:
                xw = c.add(xw, wb)
        h = zero_state if h0 is None else c.op("Gather", h0, const(np.int64(d)), axis=0)
        steps = range(S - 1, -1, -1) if direction == "reverse" or d == 1 else range(S)
        ys = {}
        for t in steps:
            xt = c.op("Gather", xw, const(np.int64(t)), axis=0)  # [B, G*H]
            if op == "RNN":
                h = c.op("Tanh", c.add(xt, c.op("MatMul", h, rt)))
            else:
                h = _gru_step(c, xt, h, rt, rb, H, lbr)
            ys[t] = h
        per_dir_y.append([ys[t] for t in range(S)])
        per_dir_h.append(h)
    if wanted(ctx, 0):
        # Y [S, D, B, H]: each step's state as [1, 1, B, H] pieces.
        rows = [c.op("Concat", *[c.op("Unsqueeze", per_dir_y[d][t], ints([0, 1])) for d in range(D)], axis=1)
                for t in range(S)]
        y = rows[0] if S == 1 else c.op("Concat", *rows, axis=0)
        c.out(0, c.transpose(y, (2, 0, 1, 3)) if layout else y)
    if wanted(ctx, 1):
        yh = c.op("Concat", *[c.op("Unsqueeze", hd, ints([0])) for hd in per_dir_h], axis=0)
        c.out(1, c.transpose(yh, (1, 0, 2)) if layout else yh)


def _gru_step(c: Composer, xt, h, rt, rb, H: int, lbr: int):
    """One GRU step (gate order z, r, h) from xt = X W^T + Wb."""
    hr = c.op("MatMul", h, rt)  # [B, 3H] = H R^T
    if rb is not None:
        hr = c.add(hr, rb)
    z = c.op("Sigmoid", c.add(_slice(c, xt, 0, H, 1), _slice(c, hr, 0, H, 1)))
    rg = c.op("Sigmoid", c.add(_slice(c, xt, H, 2 * H, 1), _slice(c, hr, H, 2 * H, 1)))
    if lbr:
        cand = c.mul(rg, _slice(c, hr, 2 * H, 3 * H, 1))
    else:
        rh = _slice(c, rt, 2 * H, 3 * H, 1)  # [H, H]
        cand = c.op("MatMul", c.mul(rg, h), rh)
        if rb is not None:
            cand = c.add(cand, _slice(c, rb, 2 * H, 3 * H, 0))
    hh = c.op("Tanh", c.add(_slice(c, xt, 2 * H, 3 * H, 1), cand))
    # H = (1 - z) * hh + z * h = hh + z * (h - hh)
    return c.add(hh, c.mul(z, c.sub(h, hh)))


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


RULES = {"RNN": {7: lower_rnn_gru}, "GRU": {7: lower_rnn_gru},
         "CausalConvWithState": {27: lower_causal_conv_with_state}, "LinearAttention": {27: lower_linear_attention}}
_COMMON = {"activations", "activation_alpha", "activation_beta", "clip", "direction", "hidden_size", "layout"}
ATTRS = {"RNN": _COMMON, "GRU": _COMMON | {"linear_before_reset"}, "CausalConvWithState": {"activation"},
         "LinearAttention": {"chunk_size", "kv_num_heads", "q_num_heads", "scale", "update_rule"}}
