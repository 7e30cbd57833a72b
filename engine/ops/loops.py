"""Loop and Scan.

A Loop without scan outputs runs as a loop in the plan: its body is lowered
once, between a conditional jump forward (i < M and cond) and a jump back,
with the iteration number, the condition and the loop-carried values in
slots of the arena that live through the whole loop; the body's results
are copied into those slots at the end of each iteration. The trip count and
the condition may be computed at run time, and the plan does not grow with
the trip count.

Scan runs the same way: each iteration gathers its slice of every scan
input at the run-time index, and COPY_AT writes its per-step outputs into
the stacked outputs, which are allocated once, N long.

A Loop with scan outputs runs in place too. When its trip count is known at
plan time and its condition stays true (a `for` loop) the stacked outputs
are trip count long. Otherwise their length is known only after the run:
they are bounded outputs (BoundedOutputs) with room for a capacity of
iterations, the iteration count is the produced count, and the plan is cut
after the node as after the data-dependent ops. A `for` loop's run-time
trip count is read before the run, which gets room for it first (the plan
is cut before the loop when this segment computes the count). A while
loop that iterates past the capacity keeps going without storing (COPY_AT at the last slot) and is
planned again with room for twice as many or the count, whichever is more,
and run again (engine.plan_segments). A Loop whose body needs
plan-time values per iteration (or a bounded one inside a subgraph) is
unrolled at plan time, which needs a plan-time trip count and condition;
else, at the top level, it runs on the host (engine.plan_segments HostSegment)."""

from __future__ import annotations

import numpy as np

from engine.kernels.abi import CopyAtStep, JumpStep, Op
from engine.errors import UnsupportedOperatorError
from engine.lowering import LOC_INPUT, LoweringContext, RuntimeValueNeeded, Value
from engine.ops.compose import Composer, const, ints
from engine.ops.data import emit_copy, emit_fill

# Plan size grows with every unrolled iteration: past this it is better to
# report the model than to build a huge plan.
MAX_UNROLL = 4096
# Iterations a Loop's scan outputs have room for before a run has told how
# many it makes (a plan-time trip count lowers it).
INITIAL_CAPACITY = 16


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


def _scan_operands(ctx: LoweringContext):
    """body, state count, states, scan inputs, their axes and directions, steps."""
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
    return body, n, states, scans, in_axes, in_dirs, steps


def lower_scan_unrolled(ctx: LoweringContext) -> None:
    body, n, states, scans, in_axes, in_dirs, steps = _scan_operands(ctx)
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


def _in_place_loop(ctx: LoweringContext, c: Composer, trip, cond_in, carried_in: list, bind, split,
                   stacked: list, clamp: bool = False) -> tuple[list, object]:
    """The loop skeleton shared by Loop and Scan (see the module docstring).
    trip: the trip count (a Value, or None); cond_in: the first condition
    (or None: true); bind(it, cond, slots) -> the body's input Values;
    split(results) -> (condition Value or None, carried results, per-iteration
    results); stacked: for each per-iteration result, (output Value
    [outer, n, inner], axis, reverse) it is copied into at the iteration's
    index; clamp: iterations past n write the last slot (bounded outputs,
    whose run is repeated with more room). Returns the slots (the
    loop-carried values after the loop) and the iteration counter (the
    number of iterations after it)."""
    planner = ctx.planner
    it = ctx.temp((), np.int64)
    cond = ctx.temp((), np.bool_)
    slots = [ctx.temp(v.shape, v.dtype) for v in carried_in]
    emit_fill(ctx, it, 0)
    if cond_in is not None:
        emit_copy(ctx, cond, c.reshape(cond_in, []) if cond_in.shape != () else cond_in)
    else:
        emit_fill(ctx, cond, True)
    for slot, v in zip(slots, carried_in):
        emit_copy(ctx, slot, v)
    top = len(planner.steps)
    go = cond
    if trip is not None:
        go = c.op("And", c.op("Less", it, c.reshape(trip, []) if trip.shape != () else trip), cond)
    exit_jump = _jump(ctx, Op.JUMP_IF_NOT, go)
    cond_out, carried, per_iter = split(_run_body(ctx, ctx.attr("body"), bind(it, cond, slots)))
    for slot, r in zip(slots, carried):
        if r.shape != slot.shape or r.dtype != slot.dtype:
            raise ctx.unsupported(f"a loop-carried value changes from {slot.dtype.name}{list(slot.shape)} to "
                                  f"{r.dtype.name}{list(r.shape)} (a loop plan needs the same shape every iteration)")
    for (out, axis, rev), r in zip(stacked, per_iter):
        n = out.shape[axis]
        idx = c.sub(const(np.int64(n - 1)), it) if rev else it
        if clamp:
            idx = c.op("Min", idx, const(np.int64(n - 1)))
        outer = int(np.prod(out.shape[:axis], dtype=np.int64))
        params = CopyAtStep(outer=outer, n=n, inner_bytes=r.nbytes // max(outer, 1))
        ctx.step(Op.COPY_AT, [out, r, idx], params.words())
    # A result that is one of the slots itself (a value passed through) is
    # taken aside first, so no copy reads a slot another copy already wrote.
    own = {id(v.buf) for v in [it, cond] + slots}
    results = ([cond_out] if cond_out is not None else []) + list(carried)
    staged = [ctx.temp(r.shape, r.dtype) if r.buf is not None and id(r.buf) in own else None for r in results]
    for tmp, r in zip(staged, results):
        if tmp is not None:
            emit_copy(ctx, tmp, r)
    results = [tmp if tmp is not None else r for tmp, r in zip(staged, results)]
    if cond_out is not None:
        emit_copy(ctx, cond, c.reshape(results[0], []) if results[0].shape != () else results[0])
        results = results[1:]
    for slot, r in zip(slots, results):
        emit_copy(ctx, slot, r)
    emit_copy(ctx, it, c.add(it, const(np.int64(1))))
    back = _jump(ctx, Op.JUMP)
    back.ints[:] = JumpStep(target=top).words()
    end = len(planner.steps)
    exit_jump.ints[:] = JumpStep(target=end).words()
    # Lifetimes are step ranges; with a jump back, whatever the body reads
    # from before the loop (the slots, outer values, the stacked outputs) is
    # touched again by every iteration: it lives until the loop ends. Values
    # the body creates are written before they are read within an iteration.
    for st in planner.steps[top:end]:
        for t in st.tensors:
            if t is not None and t.buf is not None and 0 <= t.buf.first < top:
                t.buf.last = max(t.buf.last, end - 1)
    for out, _, _ in stacked:   # created inside (their shapes come from the body): they span the loop too
        out.buf.first, out.buf.last = min(out.buf.first, top), max(out.buf.last, end - 1)
    return slots, it


def lower_loop_in_place(ctx: LoweringContext) -> None:
    """Loop without scan outputs as a real loop."""
    m_in, cond_in = ctx.input(0), ctx.input(1)
    if m_in is None and cond_in is None:
        raise ctx.unsupported("neither a trip count nor a condition (an endless loop)")
    carried_in = list(ctx.inputs[2:])
    if any(v is None for v in carried_in):
        raise ctx.unsupported("an absent loop-carried input")
    n = len(carried_in)

    def split(results):
        if len(results) != 1 + n:
            raise ctx.unsupported(f"body has {len(results)} outputs for {n} loop-carried values")
        return results[0], results[1:], []

    slots, _ = _in_place_loop(ctx, Composer(ctx), m_in, cond_in, carried_in,
                              lambda it, cond, sl: [it, cond] + sl, split, [])
    for i, slot in enumerate(slots):
        ctx.set_out(i, slot)


def lower_scan_in_place(ctx: LoweringContext) -> None:
    """Scan as a real loop: each iteration gathers its slice of every scan
    input at the run-time index and copies its per-step outputs into the
    stacked outputs (COPY_AT)."""
    body, n, states, scans, in_axes, in_dirs, steps = _scan_operands(ctx)
    k = len(body.outputs) - n
    out_axes = ctx.attr("scan_output_axes") or [0] * k
    out_dirs = ctx.attr("scan_output_directions") or [0] * k
    c = Composer(ctx)
    stacked = []

    def bind(it, cond, slots):
        slices = []
        for s, a, d in zip(scans, in_axes, in_dirs):
            idx = c.sub(const(np.int64(steps - 1)), it) if d else it
            slices.append(c.op("Gather", s, idx, axis=a))
        return slots + slices

    def split(results):
        # The stacked outputs' shapes are known once the body has been lowered.
        for j, r in enumerate(results[n:]):
            axis = out_axes[j] % (r.rank + 1)
            shape = (*r.shape[:axis], steps, *r.shape[axis:])
            stacked.append((ctx.out(n + j, shape, r.dtype), axis, out_dirs[j]))
        return None, results[:n], results[n:]

    slots, _ = _in_place_loop(ctx, c, const(np.int64(steps)), None, states, bind, split, stacked)
    for i, slot in enumerate(slots):
        ctx.set_out(i, slot)


def _condition_stays_true(body, cond_in) -> bool:
    """The body passes its condition through unchanged (or makes it a
    constant true) and the loop starts true: then a Loop with a plan-time
    trip count runs exactly that many iterations (a `for` loop)."""
    if cond_in is not None and (cond_in.const is None or not bool(np.asarray(cond_in.const).reshape(-1)[0])):
        return False
    return _body_keeps_condition(body)


def _body_keeps_condition(body) -> bool:
    """The body's condition output is its condition input or a constant true."""
    out, c_in = body.outputs[0].name, body.inputs[1].name
    if out == c_in:
        return True
    prod = next((n for n in body.nodes if out in n.outputs), None)
    if prod is not None and prod.op == "Identity" and prod.inputs == [c_in]:
        return True
    if out in body.initializers:
        return bool(np.asarray(body.initializers[out]).reshape(-1)[0])
    value = prod.attrs.get("value") if prod is not None and prod.op == "Constant" else None
    return isinstance(value, np.ndarray) and value.size == 1 and bool(value.reshape(-1)[0])


def lower_for_loop_in_place(ctx: LoweringContext, trips: int) -> None:
    """A Loop with scan outputs, a plan-time trip count and a condition that
    stays true: the in-place loop, scan outputs stacked [trips, ...] by COPY_AT."""
    carried_in = list(ctx.inputs[2:])
    n = len(carried_in)
    stacked = []

    def split(results):
        for j, r in enumerate(results[1 + n:]):
            stacked.append((ctx.out(n + j, (trips, *r.shape), r.dtype), 0, 0))
        return None, results[1:1 + n], results[1 + n:]

    slots, _ = _in_place_loop(ctx, Composer(ctx), const(np.int64(trips)), None, carried_in,
                              lambda it, cond, sl: [it, cond] + sl, split, stacked)
    for i, slot in enumerate(slots):
        ctx.set_out(i, slot)


def lower_while_loop_in_place(ctx: LoweringContext) -> None:
    """A Loop with scan outputs whose iteration count only a run tells (a
    trip count or condition computed at run time): the in-place loop with
    the scan outputs as bounded outputs (see the module docstring)."""
    m_in, cond_in = ctx.input(0), ctx.input(1)
    if m_in is None and cond_in is None:
        raise ctx.unsupported("neither a trip count nor a condition (an endless loop)")
    carried_in = list(ctx.inputs[2:])
    n = len(carried_in)
    cap = ctx.planner.capacities.get(ctx.capacity_key(), INITIAL_CAPACITY)
    trip = None
    if m_in is not None and m_in.const is not None:
        # the trip count bounds the iterations: a `for` loop (condition
        # kept) makes exactly that many, a while loop at most that many
        m = int(np.asarray(m_in.const).reshape(-1)[0])
        cap = m if _body_keeps_condition(ctx.attr("body")) else min(cap, m)
    elif m_in is not None and m_in.buf is not None and m_in.buf.kind == LOC_INPUT \
            and _body_keeps_condition(ctx.attr("body")):
        # A `for` loop whose trip count the segment receives: the run reads
        # it before starting and gets room for it (engine.plan_segments).
        # A while loop's trip count is often a huge "no limit": its room is learned.
        trip = (m_in.buf.index, m_in.offset)
    cap = max(cap, 1)
    stacked = []

    def split(results):
        if len(results) < 1 + n:
            raise ctx.unsupported(f"body has {len(results)} outputs for {n} loop-carried values")
        for r in results[1 + n:]:
            stacked.append((ctx.temp((cap, *r.shape), r.dtype), 0, 0))
        return results[0], results[1:1 + n], results[1 + n:]

    slots, it = _in_place_loop(ctx, Composer(ctx), m_in, cond_in, carried_in,
                               lambda it, cond, sl: [it, cond] + sl, split, stacked, clamp=True)
    fixed = [s.shape for s in slots]
    per_iter = [out.shape[1:] for out, _, _ in stacked]
    count = Value((1,), np.int64, buf=it.buf, offset=it.offset)
    ctx.bounded(slots + [out for out, _, _ in stacked], count,
                lambda k: fixed + [(k, *shape) for shape in per_iter], capacity=cap, trip=trip)


def _in_place_or_unrolled(ctx: LoweringContext, in_place, unrolled) -> None:
    """The in-place loop, else (a body needing per-iteration plan-time
    values, e.g. a Slice at the iteration number) the unrolled one when
    that can be built: the in-place attempt's steps are dropped. When
    neither can, the error says why for both."""
    planner = ctx.planner
    n_steps, outputs = len(planner.steps), list(ctx.outputs)
    try:
        return in_place(ctx)
    except UnsupportedOperatorError as exc:
        del planner.steps[n_steps:]
        ctx.outputs[:] = outputs
        why_not_in_place = exc.message
    try:
        return unrolled(ctx)
    except RuntimeValueNeeded:
        raise   # the planner cuts the plan before the node and tries again with the value known
    except UnsupportedOperatorError as exc:
        if exc.message == why_not_in_place:   # the body fails the same way both times: say it once
            raise
        raise UnsupportedOperatorError(f"{exc.message}; as a loop in the plan: {why_not_in_place}",
                                       where=exc.where, hint=exc.hint) from None


def lower_scan(ctx: LoweringContext) -> None:
    return _in_place_or_unrolled(ctx, lower_scan_in_place, lower_scan_unrolled)


def lower_loop(ctx: LoweringContext) -> None:
    body = ctx.attr("body")
    if len(body.outputs) == 1 + len(ctx.inputs[2:]):
        return _in_place_or_unrolled(ctx, lower_loop_in_place, lower_loop_unrolled)
    m_in = ctx.input(0)
    if any(v is None for v in ctx.inputs[2:]):
        return lower_loop_unrolled(ctx)
    if m_in is not None and m_in.const is not None and _condition_stays_true(body, ctx.input(1)):
        trips = max(int(np.asarray(m_in.const).reshape(-1)[0]), 0)
        return _in_place_or_unrolled(ctx, lambda cx: lower_for_loop_in_place(cx, trips), lower_loop_unrolled)
    if m_in is not None and m_in.const is None and m_in.buf.kind != LOC_INPUT and not ctx.planner.owners \
            and _body_keeps_condition(body):
        # A `for` loop whose trip count this segment computes: the plan is
        # cut before the loop, so its segment receives the count as an input
        # and the run sizes the scan outputs from it before starting.
        raise RuntimeValueNeeded(ctx.unsupported("trip count computed at run time").message)
    return _in_place_or_unrolled(ctx, lower_while_loop_in_place, lower_loop_unrolled)


def lower_loop_unrolled(ctx: LoweringContext) -> None:
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
