"""Scan and Loop, unrolled at plan time: the iteration count is fixed by
the static shapes (Scan) or by a trip count and condition known when the
plan is built (Loop), so each iteration's body becomes ordinary steps. A
Loop whose condition is computed from run-time data cannot be unrolled and
is reported unsupported; so is one longer than MAX_UNROLL iterations."""

from __future__ import annotations

import numpy as np

from engine.lowering import LoweringContext
from engine.ops.compose import Composer, const, ints

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


def lower_loop(ctx: LoweringContext) -> None:
    body = ctx.attr("body")
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
