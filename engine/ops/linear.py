"""Gemm and MatMul (batched, broadcasting) on the library's SGEMM, with the
bias and activation fused into its epilogue when a pass attached them
(node attributes _act, _p0, _p1 set by engine.passes.fuse_bias_activation)."""

from __future__ import annotations

import ctypes

import numpy as np

from engine.ops.common import ACT_NONE, X_MATMUL, broadcast_shape, broadcast_strides
from engine.plan import LoweringContext, Value

BIAS_NONE, BIAS_COL, BIAS_ROW = 0, 1, 2


def gemm_workspace(M: int, N: int, K: int, nthreads: int) -> int:
    from engine.kernels._lib import lib

    fn = lib().aie_sgemm_workspace_size
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int]
    return int(fn(M, N, K, max(nthreads, 1)))


def emit_matmul(ctx, out: Value, a: Value, b: Value, M, N, K, *, trans_a=0, trans_b=0, lda=None, ldb=None,
                bias: Value | None = None, bias_kind=BIAS_NONE, act=ACT_NONE, p0=0.0, p1=0.0, alpha=1.0, beta=0.0,
                batch_shape=(), a_bstrides=(), b_bstrides=()) -> None:
    lda = lda if lda is not None else (M if trans_a else K)
    ldb = ldb if ldb is not None else (K if trans_b else N)
    ws_bytes = gemm_workspace(M, N, K, ctx.planner.nthreads)
    ws = ctx.scratch(ws_bytes)
    ctx.step(X_MATMUL, [out, a, b, bias, ws],
             [M, N, K, trans_a, trans_b, lda, ldb, bias_kind, act, len(batch_shape), *batch_shape, *a_bstrides,
              *b_bstrides, ws_bytes], [alpha, beta, p0, p1])


def _epilogue(ctx):
    return ctx.attr("_act", ACT_NONE), ctx.attr("_p0", 0.0), ctx.attr("_p1", 0.0)


def lower_matmul(ctx: LoweringContext) -> None:
    a, b = ctx.input(0), ctx.input(1)
    ctx.require_dtype(a, (np.float32,))
    ctx.require_dtype(b, (np.float32,))
    if a.rank == 0 or b.rank == 0:
        raise ctx.unsupported("MatMul of a scalar")
    a_shape = (1,) + a.shape if a.rank == 1 else a.shape
    b_shape = b.shape + (1,) if b.rank == 1 else b.shape
    M, K = a_shape[-2:]
    K2, N = b_shape[-2:]
    if K != K2:
        raise ctx.unsupported(f"inner dimensions differ: {a.shape} x {b.shape}")
    try:
        batch = broadcast_shape(a_shape[:-2], b_shape[:-2])
    except ValueError as exc:
        raise ctx.unsupported(str(exc)) from None
    out_shape = list(batch) + ([M] if a.rank > 1 else []) + ([N] if b.rank > 1 else [])
    out = ctx.out(0, out_shape, np.float32)
    if out.size == 0:
        return
    bias = ctx.input(2) if ctx.attr("_bias") else None
    act, p0, p1 = _epilogue(ctx)
    if K == 0:
        from engine.ops.data import emit_fill

        emit_fill(ctx, out, 0.0)
        return
    # Fold batch dims of A into M when B is shared (the common x @ W case).
    if len(b_shape) == 2 and all(d for d in a_shape):
        emit_matmul(ctx, out, a, b, int(np.prod(a_shape[:-1])), N, K, bias=bias,
                    bias_kind=BIAS_COL if bias is not None else BIAS_NONE, act=act, p0=p0, p1=p1)
        return
    sa = [s * M * K for s in broadcast_strides(a_shape[:-2], batch)] if batch else []
    sb = [s * K * N for s in broadcast_strides(b_shape[:-2], batch)] if batch else []
    sa = [0 if a_shape[:-2] == () else s for s in sa]
    sb = [0 if b_shape[:-2] == () else s for s in sb]
    emit_matmul(ctx, out, a, b, M, N, K, bias=bias, bias_kind=BIAS_COL if bias is not None else BIAS_NONE,
                act=act, p0=p0, p1=p1, batch_shape=batch, a_bstrides=sa, b_bstrides=sb)


def lower_gemm(ctx: LoweringContext) -> None:
    a, b, c = ctx.input(0), ctx.input(1), ctx.input(2)
    for v in (a, b):
        ctx.require_dtype(v, (np.float32,))
    if a.rank != 2 or b.rank != 2:
        raise ctx.unsupported(f"Gemm needs 2-D A and B, got {a.shape} and {b.shape}")
    ta, tb = ctx.attr("transA", 0), ctx.attr("transB", 0)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    M, K = (a.shape[1], a.shape[0]) if ta else a.shape
    K2, N = (b.shape[1], b.shape[0]) if tb else b.shape
    if K != K2:
        raise ctx.unsupported(f"inner dimensions differ: A {a.shape} (transA={ta}), B {b.shape} (transB={tb})")
    out = ctx.out(0, (M, N), np.float32)
    if out.size == 0:
        return
    act, p0, p1 = _epilogue(ctx)
    bias, kind, beta_run = None, BIAS_NONE, 0.0
    if c is not None and beta != 0.0:
        ctx.require_dtype(c, (np.float32,))
        try:
            broadcast_shape(c.shape, (M, N))
        except ValueError as exc:
            raise ctx.unsupported(f"C: {exc}") from None
        cs = (1,) * (2 - c.rank) + c.shape
        if cs == (1, N) and beta == 1.0:
            bias, kind = c, BIAS_COL
        elif cs == (M, 1) and beta == 1.0 and M > 1:
            bias, kind = c, BIAS_ROW
        else:
            from engine.ops.data import emit_copy

            emit_copy(ctx, out, c, (M, N), broadcast_strides(c.shape, (M, N)))
            beta_run = beta
    if K == 0:
        raise ctx.unsupported("Gemm with K = 0")
    emit_matmul(ctx, out, a, b, M, N, K, trans_a=ta, trans_b=tb, lda=a.shape[1], ldb=b.shape[1], bias=bias,
                bias_kind=kind, act=act, p0=p0, p1=p1, alpha=alpha, beta=beta_run)


RULES = {"MatMul": {1: lower_matmul}, "Gemm": {7: lower_gemm}}
ATTRS = {"MatMul": {"_act", "_p0", "_p1", "_bias"}, "Gemm": {"transA", "transB", "alpha", "beta", "_act", "_p0", "_p1"}}
