"""Gemm and MatMul (batched, broadcasting) on the library's SGEMM, with the
bias and activation fused into its epilogue when a pass attached them
(node attributes _act, _p0, _p1 set by engine.passes.fuse_bias_activation).

A node marked `_precision: "bf16"` (engine.passes.precision) runs on
aie_gemm_bf16 (GEMM_BF16_PACKED) when its B is a constant: B in bf16, packed
once, A rounded to bf16 while the kernel packs it, sums and epilogue in fp32.
Its B may then be stored packed only (input 3, `_packed_bf16`; `_b_shape`
keeps B's shape): that layout is the same on every ISA level."""

from __future__ import annotations

import numpy as np

from engine.kernels.abi import GemmBf16PackedStep, GemmPackedStep, MatmulStep, Op, Unary
from engine.kernels.gemm_lowp import pack_b_bf16, workspace_bf16
from engine.lowering import LoweringContext, Value
from engine.ops.common import broadcast_shape, broadcast_strides
from engine.ops.data import emit_copy, emit_fill
from engine.packing import gemm_workspace, host_isa, pack_gemm_b

BIAS_NONE, BIAS_COL, BIAS_ROW = 0, 1, 2


def _packed_b(ctx, b: Value, trans_b: int) -> Value | None:
    """B packed for aie_sgemm_packed: the converter's (input 3, packed for
    _packed_isa) when it matches this host, else packed now when B is a
    constant; None when B is computed at run time."""
    packed = ctx.input(3)
    if packed is not None and ctx.attr("_packed_isa") == host_isa():
        return packed
    if b.const is not None and b.rank == 2:
        blob = pack_gemm_b(b.const, bool(trans_b))
        return Value(blob.shape, np.uint8, const=blob)
    return None


def _bf16_packed(ctx, b: Value, trans_b: int) -> Value | None:
    """B in aie_gemm_bf16's layout for a node marked bf16: the converter's
    (input 3 with `_packed_bf16`), else packed now from a constant B; None
    for an fp32 node or a B computed at run time."""
    if ctx.attr("_precision", "fp32") != "bf16":
        return None
    packed = ctx.input(3)
    if packed is not None and ctx.attr("_packed_bf16"):
        return packed
    if b.const is not None and b.rank == 2:
        blob = pack_b_bf16(b.const, trans_b=bool(trans_b)).buffer
        return Value(blob.shape, np.uint8, const=blob)
    return None


def _b_operand(ctx) -> Value:
    """Input 1, or a stand-in with its shape when the converter kept only the
    bf16-packed copy of a constant B."""
    b = ctx.input(1)
    if b is None and ctx.attr("_b_shape") is not None:
        return Value(ctx.attr("_b_shape"), np.float32)
    if b is None:
        raise ctx.unsupported("input B is missing")
    return b


def _no_fp32_b(ctx, why: str):
    return ctx.unsupported(f"B is stored in bf16 only and this node cannot run in bf16 ({why}); "
                           "convert the model again with --precision fp32")


def emit_gemm_bf16(ctx, out: Value, a: Value, packed: Value, M, N, K, *, lda, bias: Value | None = None,
                   bias_kind=BIAS_NONE, act=Unary.IDENTITY, p0=0.0, p1=0.0) -> None:
    # Enough scratch for the plan's threads and for one (a run may get fewer).
    ws_bytes = max(workspace_bf16(M, N, K, n) for n in {1, max(int(ctx.planner.nthreads), 1)})
    params = GemmBf16PackedStep(M=M, N=N, K=K, lda=lda, bias_kind=bias_kind, act=act, workspace_bytes=ws_bytes)
    ctx.step(Op.GEMM_BF16_PACKED, [out, a, packed, bias, ctx.scratch(ws_bytes)], params.words(), [p0, p1])


def emit_gemm_packed(ctx, out: Value, a: Value, packed: Value, M, N, K, *, trans_a=0, lda=None,
                     bias: Value | None = None, bias_kind=BIAS_NONE, act=Unary.IDENTITY, p0=0.0, p1=0.0, alpha=1.0,
                     beta=0.0) -> None:
    lda = lda if lda is not None else (M if trans_a else K)
    ws_bytes = gemm_workspace(M, N, K, ctx.planner.nthreads)
    params = GemmPackedStep(M=M, N=N, K=K, trans_a=trans_a, lda=lda, bias_kind=bias_kind, act=act,
                            workspace_bytes=ws_bytes)
    ctx.step(Op.GEMM_PACKED, [out, a, packed, bias, ctx.scratch(ws_bytes)], params.words(), [alpha, beta, p0, p1])


def emit_matmul(ctx, out: Value, a: Value, b: Value, M, N, K, *, trans_a=0, trans_b=0, lda=None, ldb=None,
                bias: Value | None = None, bias_kind=BIAS_NONE, act=Unary.IDENTITY, p0=0.0, p1=0.0, alpha=1.0, beta=0.0,
                batch_shape=(), a_bstrides=(), b_bstrides=()) -> None:
    lda = lda if lda is not None else (M if trans_a else K)
    ldb = ldb if ldb is not None else (K if trans_b else N)
    ws_bytes = gemm_workspace(M, N, K, ctx.planner.nthreads)
    ws = ctx.scratch(ws_bytes)
    params = MatmulStep(M=M, N=N, K=K, trans_a=trans_a, trans_b=trans_b, lda=lda, ldb=ldb, bias_kind=bias_kind,
                        act=act, workspace_bytes=ws_bytes, batch_rank=len(batch_shape))
    ctx.step(Op.MATMUL, [out, a, b, bias, ws], params.words(batch_shape, a_bstrides, b_bstrides),
             [alpha, beta, p0, p1])


def _epilogue(ctx):
    return ctx.attr("_act", Unary.IDENTITY), ctx.attr("_p0", 0.0), ctx.attr("_p1", 0.0)


def lower_matmul(ctx: LoweringContext) -> None:
    a, b = ctx.input(0), _b_operand(ctx)
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
    alpha = ctx.attr("_alpha", 1.0)
    if K == 0:
        emit_fill(ctx, out, 0.0)
        return
    if ctx.input(1) is None and not (len(b_shape) == 2 and all(d for d in a_shape)):
        raise _no_fp32_b(ctx, "an empty batch dimension")
    # Fold batch dims of A into M when B is shared (the common x @ W case).
    if len(b_shape) == 2 and all(d for d in a_shape):
        bf16 = _bf16_packed(ctx, b, 0) if b.rank == 2 and alpha == 1.0 else None
        if bf16 is not None:
            emit_gemm_bf16(ctx, out, a, bf16, int(np.prod(a_shape[:-1])), N, K, lda=K, bias=bias,
                           bias_kind=BIAS_COL if bias is not None else BIAS_NONE, act=act, p0=p0, p1=p1)
            return
        if ctx.input(1) is None:
            raise _no_fp32_b(ctx, f"alpha {alpha}")
        packed = _packed_b(ctx, b, 0) if b.rank == 2 else None
        if packed is not None:
            emit_gemm_packed(ctx, out, a, packed, int(np.prod(a_shape[:-1])), N, K, bias=bias,
                             bias_kind=BIAS_COL if bias is not None else BIAS_NONE, act=act, p0=p0, p1=p1,
                             alpha=alpha)
            return
        emit_matmul(ctx, out, a, b, int(np.prod(a_shape[:-1])), N, K, bias=bias,
                    bias_kind=BIAS_COL if bias is not None else BIAS_NONE, act=act, p0=p0, p1=p1, alpha=alpha)
        return
    sa = [s * M * K for s in broadcast_strides(a_shape[:-2], batch)] if batch else []
    sb = [s * K * N for s in broadcast_strides(b_shape[:-2], batch)] if batch else []
    sa = [0 if a_shape[:-2] == () else s for s in sa]
    sb = [0 if b_shape[:-2] == () else s for s in sb]
    emit_matmul(ctx, out, a, b, M, N, K, bias=bias, bias_kind=BIAS_COL if bias is not None else BIAS_NONE,
                act=act, p0=p0, p1=p1, alpha=alpha, batch_shape=batch, a_bstrides=sa, b_bstrides=sb)


def lower_gemm(ctx: LoweringContext) -> None:
    a, b, c = ctx.input(0), _b_operand(ctx), ctx.input(2)
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
            emit_copy(ctx, out, c, (M, N), broadcast_strides(c.shape, (M, N)))
            beta_run = beta
    if K == 0:
        raise ctx.unsupported("Gemm with K = 0")
    bf16 = _bf16_packed(ctx, b, tb) if not ta and alpha == 1.0 and beta_run == 0.0 else None
    if bf16 is not None:
        emit_gemm_bf16(ctx, out, a, bf16, M, N, K, lda=a.shape[1], bias=bias, bias_kind=kind, act=act, p0=p0,
                       p1=p1)
        return
    if ctx.input(1) is None:
        raise _no_fp32_b(ctx, f"transA {ta}, alpha {alpha}, C not a bias")
    packed = _packed_b(ctx, b, tb)
    if packed is not None:
        emit_gemm_packed(ctx, out, a, packed, M, N, K, trans_a=ta, lda=a.shape[1], bias=bias, bias_kind=kind,
                         act=act, p0=p0, p1=p1, alpha=alpha, beta=beta_run)
        return
    emit_matmul(ctx, out, a, b, M, N, K, trans_a=ta, trans_b=tb, lda=a.shape[1], ldb=b.shape[1], bias=bias,
                bias_kind=kind, act=act, p0=p0, p1=p1, alpha=alpha, beta=beta_run)


RULES = {"MatMul": {1: lower_matmul}, "Gemm": {7: lower_gemm}}
# _packed_isa: input 3 holds B packed by the converter for that aie_isa;
# _packed_bf16: input 3 holds B packed for aie_gemm_bf16 (any level);
# _b_shape: B's shape when only the packed copy is stored.
_LOWP = {"_packed_bf16", "_b_shape"}
ATTRS = {"MatMul": {"_act", "_p0", "_p1", "_bias", "_packed_isa", "_alpha"} | _LOWP,
         "Gemm": {"transA", "transB", "alpha", "beta", "_act", "_p0", "_p1", "_packed_isa"} | _LOWP}
