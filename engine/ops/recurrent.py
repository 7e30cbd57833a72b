"""LSTM (ONNX gate order i, o, f, c; default activations, no peepholes):
one executor step per direction runs the whole sequence."""

from __future__ import annotations

import numpy as np

from engine.kernels.abi import LstmStep, Op
from engine.lowering import LoweringContext, Value
from engine.ops.data import emit_copy, emit_fill
from engine.ops.linear import gemm_workspace


def lower_lstm(ctx: LoweringContext) -> None:
    x, w, r, b = ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3)
    for v in (x, w, r):
        ctx.require_dtype(v, (np.float32,))
    seq_lens, h0, c0, peep = (ctx.input(i) for i in (4, 5, 6, 7))
    acts = ctx.attr("activations")
    if acts is not None and [a.lower() for a in acts] != ["sigmoid", "tanh", "tanh"] * (len(acts) // 3):
        raise ctx.unsupported(f"activations {acts} (only the default Sigmoid, Tanh, Tanh)")
    if ctx.attr("clip") is not None or ctx.attr("input_forget", 0) or ctx.attr("layout", 0) or peep is not None:
        raise ctx.unsupported("clip / input_forget / layout=1 / peepholes")
    if seq_lens is not None:
        lens = ctx.const(4, "sequence_lens")
        if not np.all(lens == x.shape[0]):
            raise ctx.unsupported("sequence_lens shorter than the sequence")
    direction = ctx.attr("direction", "forward")
    S, B, I = x.shape
    D, H4, _ = w.shape
    H = H4 // 4
    if ctx.attr("hidden_size", H) != H or D != (2 if direction == "bidirectional" else 1):
        raise ctx.unsupported(f"hidden_size / direction inconsistent with W {w.shape}")
    y = ctx.out(0, (S, D, B, H), np.float32) if len(ctx.node.outputs) > 0 and ctx.node.outputs[0] else None
    yh = ctx.out(1, (D, B, H), np.float32) if len(ctx.node.outputs) > 1 and ctx.node.outputs[1] else \
        ctx.temp((D, B, H), np.float32)
    yc = ctx.out(2, (D, B, H), np.float32) if len(ctx.node.outputs) > 2 and ctx.node.outputs[2] else \
        ctx.temp((D, B, H), np.float32)
    for state, init in ((yh, h0), (yc, c0)):
        if init is None:
            emit_fill(ctx, state, 0.0)
        else:
            emit_copy(ctx, state, init)
    gates = ctx.temp((B, 4 * H), np.float32)
    ws_bytes = gemm_workspace(B, 4 * H, max(I, H), ctx.planner.nthreads)
    ws = ctx.scratch(ws_bytes)
    for d in range(D):
        rev = 1 if direction == "reverse" or d == 1 else 0
        def part(v, k, shape):
            return Value(shape, np.float32, buf=v.buf, offset=v.offset + k * int(np.prod(shape)) * 4, const=None) \
                if v.buf is not None else Value(shape, np.float32, const=v.const[k])
        wd, rd = part(ctx.planner.materialize(w), d, (4 * H, I)), part(ctx.planner.materialize(r), d, (4 * H, H))
        bd = part(ctx.planner.materialize(b), d, (8 * H,)) if b is not None else None
        hd, cd = part(yh, d, (B, H)), part(yc, d, (B, H))
        yd = Value((S, B, H), np.float32, buf=y.buf, offset=y.offset + d * B * H * 4) if y is not None else None
        params = LstmStep(S=S, B=B, I=I, H=H, reverse=rev, y_step_stride=D * B * H, y_batch_stride=H,
                          workspace_bytes=ws_bytes)
        ctx.step(Op.LSTM, [yd, x, wd, rd, bd, hd, cd, gates, ws], params.words())


RULES = {"LSTM": {7: lower_lstm}}
ATTRS = {"LSTM": {"activations", "activation_alpha", "activation_beta", "clip", "direction", "hidden_size",
                  "input_forget", "layout"}}
