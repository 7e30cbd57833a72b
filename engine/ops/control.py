"""If: a condition known at plan time inlines one branch; a run-time
condition becomes a forward conditional jump over the flat step list, both
branches writing the If outputs. Branches of different output shapes (at
the graph's top level) write into outputs with room for the larger and
make the If a bounded node: the taken branch is the produced count (1 then,
0 else), and the planner plans what follows for that branch's shapes
(engine.plan_segments)."""

from __future__ import annotations

import numpy as np

from engine.kernels.abi import JumpStep, Op
from engine.lowering import LoweringContext, Value, align
from engine.ops.compose import Composer
from engine.ops.data import emit_copy


def lower_if(ctx: LoweringContext) -> None:
    cond = ctx.input(0)
    ctx.require_dtype(cond, (np.bool_,), "condition")
    if cond.size != 1:
        raise ctx.unsupported(f"condition of shape {list(cond.shape)}; expected one value")
    then_g, else_g = ctx.attr("then_branch"), ctx.attr("else_branch")
    if cond.const is not None:
        results = ctx.lower_subgraph(then_g if bool(cond.const.reshape(-1)[0]) else else_g)
        for i, r in enumerate(results):
            ctx.set_out(i, r)
        return
    planner = ctx.planner
    ctx.step(Op.JUMP_IF_NOT, [cond], JumpStep(target=0).words())
    jump_else = planner.steps[-1]
    then_results = ctx.lower_subgraph(then_g)
    outs = [ctx.out(i, r.shape, r.dtype) for i, r in enumerate(then_results)]
    for o, r in zip(outs, then_results):
        emit_copy(ctx, o, r)
    ctx.step(Op.JUMP, [], JumpStep(target=0).words())
    jump_end = planner.steps[-1]
    jump_else.ints[:] = JumpStep(target=len(planner.steps)).words()
    else_results = ctx.lower_subgraph(else_g)
    if len(else_results) != len(outs):
        raise ctx.unsupported(f"then branch has {len(outs)} outputs, else branch {len(else_results)}")
    reshaped = False
    for o, r in zip(outs, else_results):
        if r.dtype != o.dtype:
            raise ctx.unsupported(f"branches produce different types ({o.dtype.name} vs {r.dtype.name})")
        if r.shape != o.shape:
            if planner.owners:
                raise ctx.nested(f"branches produce different shapes ({list(o.shape)} vs {list(r.shape)}) for a "
                                 "run-time condition")
            # room for the larger branch: the buffer is sized when offsets are assigned
            o.buf.nbytes = align(max(o.nbytes, r.nbytes, 1))
            reshaped = True
            r_in_o = Value(r.shape, r.dtype, buf=o.buf, offset=o.offset)
            if r.size:
                emit_copy(ctx, r_in_o, r)
        else:
            emit_copy(ctx, o, r)
    jump_end.ints[:] = JumpStep(target=len(planner.steps)).words()
    if reshaped:
        _branch_taken_as_count(ctx, cond, outs, [r.shape for r in then_results], [r.shape for r in else_results])


def _branch_taken_as_count(ctx: LoweringContext, cond: Value, outs: list, then_shapes: list, else_shapes: list):
    """The If's outputs as bounded outputs whose count is the branch taken."""
    c = Composer(ctx)
    count = c.reshape(c.op("Cast", cond, to=7), [1])   # 7: int64
    flat = [Value((max(int(np.prod(a, dtype=np.int64)), int(np.prod(b, dtype=np.int64))),), o.dtype, buf=o.buf,
                  offset=o.offset) for o, a, b in zip(outs, then_shapes, else_shapes)]
    ctx.bounded(flat, count, lambda taken: then_shapes if taken else else_shapes)


RULES = {"If": {1: lower_if}}
ATTRS = {"If": {"then_branch", "else_branch"}}
