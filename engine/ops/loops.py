"""Loop and Scan.

A Loop without scan outputs runs as a loop in the plan: its body is lowered
once, between a conditional jump forward (i < M and cond) and a jump back,
with the iteration number, the condition and the loop-carried values in
slots of the arena that live through the whole loop; the body's results
are copied into those slots at the end of each iteration. The trip count and
the condition may be computed at run time, and the plan does not grow with
the trip count.

Scan, and a Loop with scan outputs, are still unrolled at plan time (the
iteration count fixed by the static shapes or a plan-time trip count);
docs/ARCHITECTURE.md "Recurrences and control flow as loops" has the design
for running them as loops too."""

from __future__ import annotations

import numpy as np

from engine.kernels.abi import JumpStep, Op
from engine.lowering import LoweringContext
from engine.ops.compose import Composer, const, ints
from engine.ops.data import emit_copy, emit_fill

# Plan size grows with every unrolled iteration: past this it is better to
# report the model than to build a huge plan.
MAX_UNROLL = 4096


def _run_body(ctx: LoweringContext, body, values) -> list:
    """Lower one iteration of `body` with its inputs bound to `values`."""
    planner = ctx.planner
    planner.env.append({info.name: v for info, v in zip(body.inputs, values)})
    try:
        return ctx.lower_subgraph(body)
    finally:
        planner.env.pop()


def _stack(c: Composer, parts, axis: int):
    pieces = [c.op("Unsqueeze", p, ints([axis])) for p in parts]
    return pieces[0] if len(pieces) == 1 else c.op("Concat", *pieces, axis=axis)


def lower_scan(ctx: LoweringContext) -> None:
    body = ctx.attr("body")
    m = ctx.attr("num_scan_inputs")
    n = len(ctx.inputs) - m
    states, scans = list(ctx.inputs[:n]), list(ctx.inputs[n:])
    if not scans or any(v is None for v in ctx.inputs):
        raise ctx.unsupported("absent inputs / no scan input")
    in_axes = [a % s.rank for a, s in zip(ctx.attr("scan_input_axes") or [0] * m, scans)]
    in_dirs = ctx.attr("scan_input_directions") or [0] * m
    steps = scans[0].shape[in_axes[0]]
    if any(s.shape[a] != steps for s, a in zip(scans, in_axes)):
        raise ctx.unsupported("scan inputs of different lengths")
    if not 0 < steps <= MAX_UNROLL:
        raise ctx.unsupported(f"{steps} iterations (unrolled: 1..{MAX_UNROLL})")
    k = len(body.outputs) - n
    c = Composer(ctx)
    collected = [[] for _ in range(k)]
    for t in range(steps):
        slices = [c.op("Gather", s, const(np.int64(steps - 1 - t if d else t)), axis=a)
                  for s, a, d in zip(scans, in_axes, in_dirs)]
        results = _run_body(ctx, body, states + slices)
        states = results[:n]
        for j in range(k):
            collected[j].append(results[n + j])
    out_axes = ctx.attr("scan_output_axes") or [0] * k
    out_dirs = ctx.attr("scan_output_directions") or [0] * k
    for i, s in enumerate(states):
        c.out(i, s)
    for j in range(k):
        parts = collected[j][::-1] if out_dirs[j] else collected[j]
        c.out(n + j, _stack(c, parts, out_axes[j] % (parts[0].rank + 1)))


def _jump(ctx: LoweringContext, op: int, cond=None):
    ctx.step(op, [cond] if cond is not None else [], JumpStep(target=0).words())
    return ctx.planner.steps[-1]


def lower_loop_in_place(ctx: LoweringContext) -> None:
    """Loop without scan outputs as a real loop (see the module docstring)."""
    body = ctx.attr("body")
    m_in, cond_in = ctx.input(0), ctx.input(1)
    if m_in is None and cond_in is None:
        raise ctx.unsupported("neither a trip count nor a condition (an endless loop)")
    carried_in = list(ctx.inputs[2:])
    if any(v is None for v in carried_in):
        raise ctx.unsupported("an absent loop-carried input")
    c = Composer(ctx)
    planner = ctx.planner
    it = ctx.temp((), np.int64)
    cond = ctx.temp((), np.bool_)
    slots = [ctx.temp(v.shape, v.dtype) for v in carried_in]
    emit_fill(ctx, it, 0)
    if cond_in is not None:
        emit_copy(ctx, cond, c.op("Cast", c.reshape(cond_in, []), to=9) if cond_in.shape != () else cond_in)
    else:
        emit_fill(ctx, cond, True)
    for slot, v in zip(slots, carried_in):
        emit_copy(ctx, slot, v)
    top = len(planner.steps)
    go = cond
    if m_in is not None:
        go = c.op("And", c.op("Less", it, c.reshape(m_in, []) if m_in.shape != () else m_in), cond)
    exit_jump = _jump(ctx, Op.JUMP_IF_NOT, go)
    results = _run_body(ctx, body, [it, cond] + slots)
    if len(results) != 1 + len(slots):
        raise ctx.unsupported(f"body has {len(results)} outputs for {len(slots)} loop-carried values")
    for slot, r in zip(slots, results[1:]):
        if r.shape != slot.shape or r.dtype != slot.dtype:
            raise ctx.unsupported(f"a loop-carried value changes from {slot.dtype.name}{list(slot.shape)} to "
                                  f"{r.dtype.name}{list(r.shape)} (a loop plan needs the same shape every iteration)")
    # A result that is one of the slots itself (a value passed through) is
    # taken aside first, so no copy reads a slot another copy already wrote.
    own = {id(s.buf) for s in [it, cond] + slots}
    staged = [ctx.temp(r.shape, r.dtype) if r.buf is not None and id(r.buf) in own else None for r in results]
    for tmp, r in zip(staged, results):
        if tmp is not None:
            emit_copy(ctx, tmp, r)
    results = [tmp if tmp is not None else r for tmp, r in zip(staged, results)]
    cond_out = results[0]
    emit_copy(ctx, cond, c.op("Cast", c.reshape(cond_out, []), to=9) if cond_out.shape != () or
              cond_out.dtype != np.bool_ else cond_out)
    for slot, r in zip(slots, results[1:]):
        emit_copy(ctx, slot, r)
    emit_copy(ctx, it, c.add(it, const(np.int64(1))))
    back = _jump(ctx, Op.JUMP)
    back.ints[:] = JumpStep(target=top).words()
    end = len(planner.steps)
    exit_jump.ints[:] = JumpStep(target=end).words()
    # Lifetimes are step ranges; with a jump back, whatever the body reads
    # from before the loop (and the slots) is read again by every
    # iteration: it lives until the loop ends. Values the body creates are
    # written before they are read within one iteration.
    for st in planner.steps[top:end]:
        for t in st.tensors:
            if t is not None and t.buf is not None and 0 <= t.buf.first < top:
                t.buf.last = max(t.buf.last, end - 1)
    for i, slot in enumerate(slots):
        ctx.set_out(i, slot)


def lower_loop(ctx: LoweringContext) -> None:
    body = ctx.attr("body")
    if len(body.outputs) == 1 + len(ctx.inputs[2:]):
        return lower_loop_in_place(ctx)
    trip = ctx.const(0, "M") if ctx.input(0) is not None else None
    cond = ctx.const(1, "cond") if ctx.input(1) is not None else None
    limit = int(trip.reshape(-1)[0]) if trip is not None else None
    keep_going = bool(cond.reshape(-1)[0]) if cond is not None else True
    if limit is None and cond is None:
        raise ctx.unsupported("neither a trip count nor a condition (an endless loop)")
    carried = list(ctx.inputs[2:])
    n = len(carried)
    k = len(body.outputs) - 1 - n
    c = Composer(ctx)
    collected = [[] for _ in range(k)]
    t = 0
    while keep_going and (limit is None or t < limit):
        if t >= MAX_UNROLL:
            raise ctx.unsupported(f"more than {MAX_UNROLL} iterations to unroll")
        results = _run_body(ctx, body, [const(np.int64(t)), const(np.bool_(keep_going))] + carried)
        cond_out = results[0]
        if cond_out.const is None:
            raise ctx.unsupported("a loop condition computed at run time (only plan-time conditions unroll)")
        keep_going = bool(cond_out.const.reshape(-1)[0])
        carried = results[1:1 + n]
        for j in range(k):
            collected[j].append(results[1 + n + j])
        t += 1
    for i, v in enumerate(carried):
        c.out(i, v)
    for j in range(k):
        if not collected[j]:
            raise ctx.unsupported("scan outputs of a loop that runs zero times")
        c.out(n + j, _stack(c, collected[j], 0))


RULES = {"Scan": {9: lower_scan}, "Loop": {1: lower_loop}}
ATTRS = {"Scan": {"body", "num_scan_inputs", "scan_input_axes", "scan_input_directions", "scan_output_axes",
                  "scan_output_directions"},
         "Loop": {"body"}}
