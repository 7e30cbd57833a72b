"""FusedAttention: what engine.passes.fuse_attention makes of
MatMul(Q, Kt) [* alpha] [+ mask] -> Softmax(last axis) -> MatMul(·, V).

Inputs q [B, H, M, dk], kt [B, H, dk, L], v [B, H, L, dv], optional float32
mask broadcasting to [B, H, M, L]; attribute alpha. One AIE_X_ATTENTION step
(kernels/exec/attention_fused.c) when the shapes are exactly that; the
unfused arithmetic, composed, otherwise, so the fusion never changes what a
model computes. A node marked `_precision: bf16` (engine.passes.precision)
runs AIE_X_ATTENTION_BF16 instead: the two products on the bf16 GEMM, one
task per head up to BF16_TILE_ROWS query rows so Kt and V are packed once."""

from __future__ import annotations

import ctypes

import numpy as np

from engine.kernels._lib import lib
from engine.kernels.abi import AttentionStep, Op
from engine.lowering import LoweringContext
from engine.ops.common import broadcast_strides
from engine.ops.compose import Composer

_F32 = (np.float32,)
TILE_ROWS = 64  # query rows per score tile: a [64, L] tile stays in L2 for L up to a few thousand
# bf16: each task packs its head's Kt and V, so a tile takes a whole head up
# to this many rows (a [256, L] fp32 score tile is still L2-sized for L <= 1024)
BF16_TILE_ROWS = 256


def attention_workspace(tile: int, length: int, dk: int, dv: int, workers: int, bf16: bool = False) -> int:
    fn = lib().aie_attention_bf16_workspace if bf16 else lib().aie_attention_workspace
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_int64] * 5
    return int(fn(tile, length, dk, dv, workers))


def _fusable(q, kt, v, mask) -> bool:
    if not (q.rank == kt.rank == v.rank == 4) or not (q.shape[:2] == kt.shape[:2] == v.shape[:2]):
        return False
    if q.shape[3] != kt.shape[2] or kt.shape[3] != v.shape[2] or 0 in q.shape + kt.shape + v.shape:
        return False
    if mask is None:
        return True
    full = q.shape[:3] + (kt.shape[3],)
    try:
        return mask.dtype == np.float32 and mask.rank <= 4 and tuple(np.broadcast_shapes(mask.shape, full)) == full
    except ValueError:
        return False


def lower_fused_attention(ctx: LoweringContext) -> None:
    q, kt, v, mask = ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3)
    for t, what in ((q, "Q"), (kt, "K"), (v, "V")):
        ctx.require_dtype(t, _F32, what)
    alpha = ctx.attr("alpha", 1.0)
    if not _fusable(q, kt, v, mask):
        c = Composer(ctx)
        scores = c.mul(c.op("MatMul", q, kt), c.scalar(alpha, np.float32))
        if mask is not None:
            scores = c.add(scores, mask)
        c.out(0, c.op("MatMul", c.op("Softmax", scores, axis=-1), v))
        return
    B, H, M, dk = q.shape
    L, dv = kt.shape[3], v.shape[3]
    out = ctx.out(0, (B, H, M, dv), np.float32)
    strides = broadcast_strides(mask.shape, (B, H, M, L)) if mask is not None else [0, 0, 0, 0]
    bf16 = ctx.attr("_precision") == "bf16"
    tile = min(M, BF16_TILE_ROWS if bf16 else TILE_ROWS)
    ws_bytes = attention_workspace(tile, L, dk, dv, max(ctx.planner.nthreads, 1), bf16)
    ws = ctx.scratch(ws_bytes)
    sb, sh, sm, sl = strides
    params = AttentionStep(B=B, H=H, M=M, L=L, dk=dk, dv=dv, mask_stride_b=sb, mask_stride_h=sh, mask_stride_m=sm,
                           mask_stride_l=sl, workspace_bytes=ws_bytes, tile=tile)
    ctx.step(Op.ATTENTION_BF16 if bf16 else Op.ATTENTION, [out, q, kt, v, mask, ws], params.words(), [alpha])


RULES = {"FusedAttention": {1: lower_fused_attention}}
ATTRS = {"FusedAttention": {"alpha", "_precision"}}
