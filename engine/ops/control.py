"""If: a condition known at plan time inlines one branch; a run-time
condition becomes a forward conditional jump over the flat step list, both
branches writing the If outputs (same shapes required: memory is static)."""

from __future__ import annotations

import numpy as np

from engine.kernels.abi import JumpStep, Op
from engine.lowering import LoweringContext
from engine.ops.data import emit_copy


def lower_if(ctx: LoweringContext) -> None:
    cond = ctx.input(0)
    ctx.require_dtype(cond, (np.bool_,), "condition")
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
    for o, r in zip(outs, else_results):
        if r.shape != o.shape or r.dtype != o.dtype:
            raise ctx.unsupported(f"branches produce different shapes ({o.shape} vs {r.shape}) for a run-time "
                                  "condition; static memory plans need equal shapes")
        emit_copy(ctx, o, r)
    jump_end.ints[:] = JumpStep(target=len(planner.steps)).words()


RULES = {"If": {1: lower_if}}
ATTRS = {"If": {"then_branch", "else_branch"}}
