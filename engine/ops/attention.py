"""Attention (opset 23+) and RotaryEmbedding, composed as in onnx.reference.

Attention: heads split (3-D inputs), KV cache concatenation, grouped-query
head repetition, scaled Q·Kᵀ on the batched SGEMM, softcap, additive bias
(mask, causal, sliding window, padding), softmax, ·V.

The causal, sliding-window and padding masks depend only on shapes, the
past length and nonpad_kv_seqlen, so they are plan-time constants; a
run-time attn_mask is added by a step. float32 only.
"""

from __future__ import annotations

import numpy as np

from engine.lowering import LoweringContext
from engine.ops.compose import Composer, const, ints, wanted

_F32 = (np.float32,)
# softmax_precision values whose result float32 arithmetic reproduces within
# the reference's tolerance: float (1) and double (11).
_PRECISIONS = (None, 1, 11)


def _heads(c: Composer, x, heads: int, what: str):
    """[B, S, heads*D] -> [B, heads, S, D]."""
    b, s, hidden = x.shape
    if heads <= 0 or hidden % heads:
        raise c.ctx.unsupported(f"{what} hidden size {hidden} is not divisible by {heads} heads")
    return c.transpose(c.reshape(x, [b, s, heads, hidden // heads]), (0, 2, 1, 3))


def _static_bias(ctx, batch: int, q_len: int, kv_len: int, past_len: int | None, nonpad):
    """Additive 0/-inf mask (float32) from is_causal, the sliding window and
    nonpad_kv_seqlen; None when none applies."""
    causal = bool(ctx.attr("is_causal", 0))
    left, right = ctx.attr("left_window_size", -1), ctx.attr("right_window_size", -1)
    if not causal and left < 0 and right < 0 and nonpad is None:
        return None
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    if past_len is None and nonpad is not None:
        offset = (nonpad.reshape(-1) - q_len).reshape(-1, 1, 1)  # per batch
    else:
        offset = past_len or 0
    allowed = np.ones(np.broadcast_shapes(np.shape(offset), (q_len, kv_len)), np.bool_)
    diff = (i + offset) - j
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    allowed = allowed.reshape(allowed.shape[0], 1, q_len, kv_len) if allowed.ndim == 3 else allowed
    if nonpad is not None:
        pad = (np.arange(kv_len) < nonpad.reshape(-1)[:, None]).reshape(batch, 1, 1, kv_len)
        allowed = allowed & pad
    return np.where(allowed, np.float32(0), np.float32(-np.inf)).astype(np.float32)


def _mask_bias(c: Composer, mask, kv_len: int):
    """attn_mask as an additive float32 bias, padded with "masked" to kv_len."""
    if mask.dtype == np.bool_:
        masked = np.bool_(False)
    else:
        c.ctx.require_dtype(mask, _F32, "attn_mask")
        masked = np.float32(-np.inf)
    width = kv_len - mask.shape[-1]
    if width < 0:
        raise c.ctx.unsupported(f"attn_mask {mask.shape} is longer than the {kv_len} keys")
    if width:
        pads = [0] * mask.rank + [0] * (mask.rank - 1) + [width]
        mask = c.op("Pad", mask, ints(pads), const(masked), mode="constant")
    if mask.dtype == np.bool_:
        mask = c.where(mask, c.scalar(0, np.float32), c.scalar(-np.inf, np.float32))
    return mask


def lower_attention(ctx: LoweringContext) -> None:
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    mask, past_k, past_v, nonpad_v = (ctx.input(i) for i in (3, 4, 5, 6))
    for t, what in ((q, "Q"), (k, "K"), (v, "V")):
        ctx.require_dtype(t, _F32, what)
    if not q.rank == k.rank == v.rank or q.rank not in (3, 4):
        raise ctx.unsupported(f"Q, K, V of ranks {q.rank}, {k.rank}, {v.rank} (all 3-D or all 4-D)")
    if (past_k is None) != (past_v is None):
        raise ctx.unsupported("past_key without past_value (or the reverse)")
    if nonpad_v is not None and past_k is not None:
        raise ctx.unsupported("nonpad_kv_seqlen together with a past cache")
    if ctx.attr("softmax_precision") not in _PRECISIONS:
        raise ctx.unsupported(f"softmax_precision={ctx.attr('softmax_precision')} (supported: float, double)")
    mode = ctx.attr("qk_matmul_output_mode", 0)
    if mode not in (0, 1, 2, 3):
        raise ctx.unsupported(f"qk_matmul_output_mode={mode}")
    nonpad = None
    if nonpad_v is not None:
        nonpad = ctx.const(6, "nonpad_kv_seqlen").astype(np.int64)
    c = Composer(ctx)
    q_heads, kv_heads = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if q.rank == 3:
        if q_heads is None or kv_heads is None:
            raise ctx.unsupported("3-D inputs need q_num_heads and kv_num_heads")
        q, k, v = _heads(c, q, q_heads, "Q"), _heads(c, k, kv_heads, "K"), _heads(c, v, kv_heads, "V")
    batch, hq, q_len, dq = q.shape
    if past_k is not None:
        k = c.op("Concat", past_k, k, axis=2)
        v = c.op("Concat", past_v, v, axis=2)
    if wanted(ctx, 1):
        c.out(1, k)
    if wanted(ctx, 2):
        c.out(2, v)
    hk, kv_len = k.shape[1], k.shape[2]
    if hq != hk:
        # Grouped-query attention: each KV head serves hq // hk query heads
        # (np.repeat on axis 1: query head h reads KV head h // reps).
        if hk == 0 or hq % hk or v.shape[1] != hk:
            raise ctx.unsupported(f"{hq} query heads over {hk} key / {v.shape[1]} value heads")
        reps = hq // hk
        k = c.reshape(c.op("Expand", c.op("Unsqueeze", k, ints([2])), ints([1, 1, reps, 1, 1])),
                      [batch, hq, kv_len, k.shape[3]])
        v = c.reshape(c.op("Expand", c.op("Unsqueeze", v, ints([2])), ints([1, 1, reps, 1, 1])),
                      [batch, hq, kv_len, v.shape[3]])
    scale = ctx.attr("scale")
    scale = 1.0 / np.sqrt(dq) if scale is None else scale
    # sqrt(scale) on each side, as the reference, keeps Q·Kᵀ in range.
    root = c.scalar(np.sqrt(scale), np.float32)
    kt = c.transpose(c.mul(k, root), (0, 1, 3, 2))
    qk = c.op("MatMul", c.mul(q, root), kt)
    softcap = ctx.attr("softcap", 0.0)
    if softcap and softcap > 0:
        cap = c.scalar(softcap, np.float32)
        qk = c.mul(c.op("Tanh", c.div(qk, cap)), cap)
    bias = None
    static = _static_bias(ctx, batch, q_len, kv_len, past_k.shape[2] if past_k is not None else None, nonpad)
    if mask is not None:
        bias = _mask_bias(c, mask, kv_len)
    if static is not None:
        bias = const(static) if bias is None else c.add(bias, const(static))
    scores = qk if bias is None else c.add(qk, bias)
    probs = c.op("Softmax", scores, axis=-1)
    if bias is not None:
        # A row masked everywhere gives 0, not 0/0 (the reference's guard).
        row_max = c.reduce("ReduceMax", bias, [bias.rank - 1])
        if row_max.const is None or np.isneginf(row_max.const).any():
            dead = c.op("Equal", row_max, c.scalar(-np.inf, np.float32))
            probs = c.where(dead, c.scalar(0, np.float32), probs)
    y = c.op("MatMul", probs, v)
    if ctx.input(0).rank == 3:
        y = c.reshape(c.transpose(y, (0, 2, 1, 3)), [batch, q_len, hq * v.shape[3]])
    c.out(0, y)
    if wanted(ctx, 3):
        c.out(3, {0: qk, 1: qk, 2: scores, 3: probs}[mode])


def lower_rotary_embedding(ctx: LoweringContext) -> None:
    """RotaryEmbedding (opset 23) as onnx.reference's rotary_embedding."""
    x, cos, sin, pos = ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3)
    for t, what in ((x, "X"), (cos, "cos_cache"), (sin, "sin_cache")):
        ctx.require_dtype(t, _F32, what)
    if x.rank not in (3, 4):
        raise ctx.unsupported(f"X of rank {x.rank} (3-D or 4-D)")
    c = Composer(ctx)
    if x.rank == 4:
        xs = c.transpose(x, (0, 2, 1, 3))  # [B, S, heads, D]
    else:
        heads = ctx.attr("num_heads", 0)
        if not heads or x.shape[2] % heads:
            raise ctx.unsupported(f"3-D X {x.shape} needs num_heads dividing its hidden size")
        xs = c.reshape(x, [x.shape[0], x.shape[1], heads, x.shape[2] // heads])
    d = xs.shape[3]
    rd = ctx.attr("rotary_embedding_dim", 0) or d
    if rd % 2 or rd > d:
        raise ctx.unsupported(f"rotary_embedding_dim {rd} for head size {d}")
    if pos is not None:
        ctx.require_dtype(pos, (np.int64,), "position_ids")
        cos, sin = c.op("Gather", cos, pos, axis=0), c.op("Gather", sin, pos, axis=0)
    want = (xs.shape[0], xs.shape[1], rd // 2)
    if cos.shape != want or sin.shape != want:
        raise ctx.unsupported(f"cos/sin caches {cos.shape} / {sin.shape}, expected {want}")
    cos, sin = c.op("Unsqueeze", cos, ints([2])), c.op("Unsqueeze", sin, ints([2]))
    interleaved = ctx.attr("interleaved", 0)
    if interleaved:
        x1 = c.op("Slice", xs, ints([0]), ints([rd]), ints([3]), ints([2]))
        x2 = c.op("Slice", xs, ints([1]), ints([rd]), ints([3]), ints([2]))
    else:
        x1 = c.op("Slice", xs, ints([0]), ints([rd // 2]), ints([3]))
        x2 = c.op("Slice", xs, ints([rd // 2]), ints([rd]), ints([3]))
    real = c.sub(c.mul(cos, x1), c.mul(sin, x2))
    imag = c.add(c.mul(sin, x1), c.mul(cos, x2))
    if interleaved:
        pair = c.op("Concat", c.op("Unsqueeze", real, ints([4])), c.op("Unsqueeze", imag, ints([4])), axis=4)
        rot = c.reshape(pair, list(xs.shape[:3]) + [rd])
    else:
        rot = c.op("Concat", real, imag, axis=3)
    if rd < d:
        rot = c.op("Concat", rot, c.op("Slice", xs, ints([rd]), ints([d]), ints([3])), axis=3)
    c.out(0, c.transpose(rot, (0, 2, 1, 3)) if x.rank == 4 else c.reshape(rot, x.shape))


RULES = {"Attention": {23: lower_attention}, "RotaryEmbedding": {23: lower_rotary_embedding}}
ATTRS = {
    "Attention": {"is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode", "scale", "softcap",
                  "softmax_precision", "left_window_size", "right_window_size"},
    "RotaryEmbedding": {"interleaved", "num_heads", "rotary_embedding_dim"},
}
