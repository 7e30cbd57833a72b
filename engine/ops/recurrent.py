"""RNN, GRU and LSTM: one RNN executor step per direction runs the whole
sequence as a loop in C (kernels/exec/recurrent.c): weights packed once per
call, the input projection a GEMM per chunk of RNN_CHUNK steps, each step a
GEMM on the hidden state plus the fused gate epilogue. Plan memory does not
depend on the sequence length (only the Y output does)."""

from __future__ import annotations

import ctypes

import numpy as np

from engine.kernels.abi import RNN_GRU, RNN_LSTM, RNN_RNN, Op, RnnStep, Unary
from engine.lowering import LoweringContext, Value
from engine.ops.compose import wanted
from engine.ops.data import emit_copy, emit_fill
from engine.packing import _lib, gemm_workspace, pack_gemm_b

# Steps whose input projection is one GEMM: a fixed count, so the plan's
# scratch is the same for every sequence length.
RNN_CHUNK = 16

_CELLS = {"RNN": (RNN_RNN, 1, ["tanh"]), "GRU": (RNN_GRU, 3, ["sigmoid", "tanh"]),
          "LSTM": (RNN_LSTM, 4, ["sigmoid", "tanh", "tanh"])}
# ONNX activation name -> (vector-library code, default alpha, default beta);
# None: the function takes no parameter.
_ACTS = {"sigmoid": (Unary.SIGMOID, None, None), "tanh": (Unary.TANH, None, None),
         "relu": (Unary.RELU, None, None), "hardsigmoid": (Unary.HARDSIGMOID, 0.2, 0.5),
         "leakyrelu": (Unary.LEAKY_RELU, 0.01, None), "elu": (Unary.ELU, 1.0, None),
         "softplus": (Unary.SOFTPLUS, None, None)}


def rnn_scratch_bytes(cell: int, B: int, I: int, H: int, chunk: int, lbr: int, packed: int) -> int:
    fn = _lib().aie_rnn_scratch_bytes
    fn.argtypes = [ctypes.c_int64] * 7
    fn.restype = ctypes.c_size_t
    return int(fn(cell, B, I, H, chunk, lbr, packed))


def _packed(w: np.ndarray, rows=None) -> Value:
    # [N, K] weight rows -> op(B) = W^T packed for aie_sgemm_packed
    blob = pack_gemm_b(w if rows is None else w[rows[0]:rows[1]], True)
    return Value(blob.shape, np.uint8, const=blob)


def _activations(ctx: LoweringContext, defaults: list, dirs: int) -> list[list[tuple[int, float, float]]]:
    """Per direction: (code, p0, p1) for f, g, h (missing ones: identity)."""
    names = ctx.attr("activations")
    names = [n.lower() for n in names] if names is not None else defaults * dirs
    if len(names) != len(defaults) * dirs:
        raise ctx.unsupported(f"{len(names)} activations for {dirs} direction(s) (expected {len(defaults) * dirs})")
    alphas, betas = list(ctx.attr("activation_alpha") or []), list(ctx.attr("activation_beta") or [])
    acts = []
    for name in names:
        if name not in _ACTS:
            raise ctx.unsupported(f"activation {name!r} (supported: {', '.join(sorted(_ACTS))})")
        code, a, b = _ACTS[name]
        # ONNX: alpha/beta are consumed in the order of the activations that take them
        p0 = alphas.pop(0) if a is not None and alphas else (a or 0.0)
        p1 = betas.pop(0) if b is not None and betas else (b or 0.0)
        acts.append((int(code), float(p0), float(p1)))
    per = len(defaults)
    out = []
    for d in range(dirs):
        mine = acts[d * per:(d + 1) * per]
        out.append(mine + [(int(Unary.IDENTITY), 0.0, 0.0)] * (3 - per))
    return out


def _part(planner, v: Value, k: int, shape) -> Value:
    """Direction k of a [D, ...] weight."""
    v = planner.materialize(v)
    if v.buf is None:
        return Value(shape, np.float32, const=np.ascontiguousarray(v.const[k]).reshape(shape))
    return Value(shape, np.float32, buf=v.buf, offset=v.offset + k * int(np.prod(shape)) * 4)


def _view(v: Value, offset_elems: int, shape) -> Value:
    return Value(shape, np.float32, buf=v.buf, offset=v.offset + offset_elems * 4)


def lower_recurrent(ctx: LoweringContext) -> None:
    op = ctx.node.op
    cell, G, defaults = _CELLS[op]
    x, w, r, b, lens, h0 = (ctx.input(i) for i in range(6))
    c0, peep = (ctx.input(6), ctx.input(7)) if op == "LSTM" else (None, None)
    for v in (x, w, r):
        ctx.require_dtype(v, (np.float32,))
    layout = ctx.attr("layout", 0)
    if layout not in (0, 1) or x.rank != 3 or w.rank != 3 or r.rank != 3:
        raise ctx.unsupported(f"layout={layout} with X {x.shape}, W {w.shape}, R {r.shape}")
    if ctx.attr("input_forget", 0):
        raise ctx.unsupported("input_forget=1")
    # layout 1, or a batch-first x whose Transpose fuse_recurrent_input folded in
    x_batch_first = layout or ctx.attr("_x_batch_first", 0)
    S, B, I = (x.shape[1], x.shape[0], x.shape[2]) if x_batch_first else x.shape
    D, GH, I2 = w.shape
    H = GH // G
    direction = ctx.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional") or D != (2 if direction == "bidirectional" else 1) \
            or I2 != I or GH != G * H or ctx.attr("hidden_size", H) != H or r.shape != (D, GH, H) \
            or (b is not None and b.shape != (D, 2 * GH)) or (peep is not None and peep.shape != (D, 3 * H)):
        raise ctx.unsupported(f"W {w.shape} / R {r.shape} / direction {direction!r} inconsistent with X {x.shape}")
    acts = _activations(ctx, defaults, D)
    clip = float(ctx.attr("clip", 0.0) or 0.0)
    lbr = int(ctx.attr("linear_before_reset", 0)) if op == "GRU" else 0
    if lens is not None:
        ctx.require_dtype(lens, (np.int32,), "sequence_lens")
        if lens.const is not None and np.all(lens.const == S):
            lens = None   # every row runs the full sequence: nothing to mask
    # Layout 0: Y [S, D, B, H], Y_h [D, B, H]; layout 1: Y [B, S, D, H], Y_h [B, D, H].
    state_shape = (B, D, H) if layout else (D, B, H)
    y = ctx.out(0, (B, S, D, H) if layout else (S, D, B, H), np.float32) if wanted(ctx, 0) else None
    yh = ctx.out(1, state_shape, np.float32) if wanted(ctx, 1) else ctx.temp(state_shape, np.float32)
    yc = None
    if op == "LSTM":
        yc = ctx.out(2, state_shape, np.float32) if wanted(ctx, 2) else ctx.temp(state_shape, np.float32)
    for state, init in ((yh, h0), (yc, c0)):
        if state is None:
            continue
        if init is None:
            emit_fill(ctx, state, 0.0)
        else:
            emit_copy(ctx, state, init)
    nt = ctx.planner.nthreads
    ws_bytes = max(gemm_workspace(RNN_CHUNK * B, GH, I, nt), gemm_workspace(B, GH, H, nt))
    ws = ctx.scratch(ws_bytes)
    # Constant weights (what exporters write) are packed here, once per plan;
    # computed ones by the kernel, once per call.
    packed = int(w.const is not None and r.const is not None)
    split = op == "GRU" and not lbr
    scratch = ctx.scratch(rnn_scratch_bytes(cell, B, I, H, RNN_CHUNK, lbr, packed))
    x_strides = (I, S * I) if x_batch_first else (B * I, I)
    y_strides = (D * H, S * D * H) if layout else (D * B * H, H)
    hs = D * H if layout else H
    for d in range(D):
        state_off = d * H if layout else d * B * H
        params = RnnStep(cell=cell, S=S, B=B, I=I, H=H, reverse=int(direction == "reverse" or d == 1),
                         chunk=RNN_CHUNK, lbr=lbr, act_f=acts[d][0][0], act_g=acts[d][1][0], act_h=acts[d][2][0],
                         x_step_stride=x_strides[0], x_batch_stride=x_strides[1], y_step_stride=y_strides[0],
                         y_batch_stride=y_strides[1], state_batch_stride=hs, workspace_bytes=ws_bytes,
                         packed=packed)
        floats = [clip] + [p for a in acts[d] for p in a[1:]]
        if packed:
            wd, rd = _packed(w.const[d]), _packed(r.const[d], (0, 2 * H) if split else None)
        else:
            wd, rd = _part(ctx.planner, w, d, (GH, I)), _part(ctx.planner, r, d, (GH, H))
        tensors = [_view(y, d * H if layout else d * B * H, (S, B, H)) if y is not None else None, x, wd, rd,
                   _part(ctx.planner, b, d, (2 * GH,)) if b is not None else None,
                   _view(yh, state_off, (B, H)), _view(yc, state_off, (B, H)) if yc is not None else None,
                   _part(ctx.planner, peep, d, (3 * H,)) if peep is not None else None,
                   lens, scratch, ws, _packed(r.const[d], (2 * H, 3 * H)) if packed and split else None]
        ctx.step(Op.RNN, tensors, params.words(), floats)


RULES = {"RNN": {7: lower_recurrent}, "GRU": {7: lower_recurrent}, "LSTM": {7: lower_recurrent}}
# _x_batch_first: set by engine.passes.fuse_recurrent (x is [B, S, I], outputs as layout says)
_COMMON = {"activations", "activation_alpha", "activation_beta", "clip", "direction", "hidden_size", "layout",
           "_x_batch_first"}
ATTRS = {"RNN": _COMMON, "GRU": _COMMON | {"linear_before_reset"}, "LSTM": _COMMON | {"input_forget"}}
