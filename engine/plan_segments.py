"""Plans for graphs whose shapes depend on values: a chain of static
segments, each planned per concrete shape.

Planning walks the nodes as engine.plan does. A segment ends
- after a data-dependent node (NonZero, Unique, NonMaxSuppression, Compress
  with a computed condition): its kernel writes into outputs sized for the
  most its input allows and stores the count it produced; or
- before a node whose lowering needs the value of a tensor computed at run
  time (TopK's K, a Reshape target computed from data);
- around an If or Loop whose subgraph holds such shapes itself: it runs on
  the host (HostSegment), its subgraph a plan of its own.
A run executes segment 0, cuts the bounded outputs to their counts (views,
no copy), then looks up the next segment's plan for the shapes (and the
values a lowering asked for) it now has, building it on first use. Later
segments are cached per (start node, input shapes, needed values) in a
bounded LRU of their own; segment 0 is the plan the session caches for the
graph's input shapes.

Bounded outputs with a capacity (a Loop's scan outputs: the iteration count
is known only after the run) have room for that many; a run that counts
more is planned again with room for max(count, twice the capacity) and run
again. The room is kept per node for later plans of this graph, so a
session re-runs a segment at most log2(largest count / 16) times. When the
segment receives an upper bound of the count as an input (a `for` loop's
trip count, BoundedOutputs.trip), it is read first and the segment planned
with room for it before its one run.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from engine.errors import InvalidArgument, UnsupportedOperatorError
from engine.ir import Graph, TensorInfo, node_reads, outer_reads
from engine.plan import (BLOB_WEIGHTS, LOC_BLOB, LOC_INPUT, Buffer, ExecPlan, NeedsValue, PlanCache, Planner,
                         RunsOnHost, Value, trim_bounded)
from engine.plan_run import BoundRun

# A segment's outputs small enough to key later plans by value stay
# plan-time constants for the next segment (shape arithmetic crossing a cut).
MAX_CONST_CARRY = 4096
SEGMENT_CACHE_SIZE = 16  # later segments' plans per segmented plan
# A segment re-run with the room its count asked for counts the same again;
# one that does not (a random op deciding a loop's length) is reported
# after this many re-runs within one call.
MAX_REGROW = 4


def define_initializers(planner: Planner, graph: Graph, weights: np.ndarray | None) -> None:
    base = weights.ctypes.data if weights is not None and weights.size else None
    for name, arr in graph.initializers.items():
        v = Value(arr.shape, arr.dtype, const=arr)
        if base is not None and arr.nbytes:
            # Initializers are views into the weights blob: address them in place.
            v.buf = Buffer(LOC_BLOB, arr.nbytes, index=BLOB_WEIGHTS, offset=arr.ctypes.data - base)
        planner.define(name, v)


class Segment:
    """One static piece: its plan, the names its inputs carry (in order),
    the names its outputs define, which of those are plan-time constants,
    and the data-dependent node's cut, if it ends with one."""

    def __init__(self, plan: ExecPlan, inputs: list[str], outputs: list[str], consts: set[str], end: int,
                 bounded=None, bounded_names=(), start: int = 0):
        self.plan, self.inputs, self.outputs, self.consts, self.end = plan, inputs, outputs, consts, end
        self.bounded, self.bounded_names, self.start = bounded, list(bounded_names), start


def plan_segment(graph: Graph, start: int, env: dict[str, np.ndarray], inputs: list[str], consts: set[str],
                 *, nthreads: int, weights: np.ndarray | None, capacities: dict | None = None) -> Segment:
    """Plan nodes[start:] up to the next cut, reading `inputs` (in this
    order) from the run; names in `consts` are plan-time values too.
    Raises NeedsValue for an input whose value a lowering needs."""
    planner = Planner(graph.opset, nthreads=nthreads, capacities=capacities)
    define_initializers(planner, graph, weights)
    for i, name in enumerate(inputs):
        arr = env[name]
        v = Value(arr.shape, arr.dtype, buf=Buffer(LOC_INPUT, arr.nbytes, index=i), origin=name)
        if name in consts:
            v.const = arr.copy()
        planner.define(name, v)
    end = planner.lower_segment(graph.nodes, start)
    return finish_segment(planner, graph, start, end, inputs)


def finish_segment(planner: Planner, graph: Graph, start: int, end: int, inputs: list[str]) -> Segment:
    nodes = graph.nodes
    later: set[str] = {t.name for t in graph.outputs}
    for node in nodes[end:]:
        later.update(node_reads(node))
    bounded = planner.bounded
    cut = nodes[end - 1] if bounded is not None else None
    produced = []
    for node in nodes[start:end]:
        if node is cut:
            continue
        produced += [n for n in node.outputs if n and n in later]
    values = [planner.lookup(n) for n in produced]
    consts = {n for n, v in zip(produced, values) if v.const is not None and v.size <= MAX_CONST_CARRY}
    bounded_names: list[str] = []
    if bounded is not None:
        bounded_names = [n if n in later else "" for n in cut.outputs] + [""] * (len(bounded.values) - len(cut.outputs))
        values += [v for v in bounded.values if v is not None] + [bounded.count]
    plan = planner.finish(values)
    return Segment(plan, inputs, produced, consts, end, bounded, bounded_names, start)


def plan_graph(graph: Graph, feeds: dict[str, np.ndarray], *, nthreads: int = 1, value_inputs: frozenset = frozenset(),
               weights: np.ndarray | None = None, capacities: dict | None = None):
    """The plan for these feeds' shapes: an ExecPlan when the whole graph is
    static for them, else a SegmentedPlan. Raises NeedsValue for a graph
    input whose value shapes the plan (the session keys plans by it).
    capacities: the room bounded nodes get (a SegmentedPlan re-planning
    its first segment)."""
    capacities = {} if capacities is None else capacities
    planner = Planner(graph.opset, nthreads=nthreads, capacities=capacities)
    planner.model_inputs = {t.name: feeds[t.name].shape for t in graph.inputs}
    define_initializers(planner, graph, weights)
    for i, t in enumerate(graph.inputs):
        arr = feeds[t.name]
        v = Value(arr.shape, arr.dtype, buf=Buffer(LOC_INPUT, arr.nbytes, index=i), origin=t.name)
        if t.name in value_inputs:
            v.const = arr.copy()
        planner.define(t.name, v)
    try:
        end = planner.lower_segment(graph.nodes, 0)
    except RunsOnHost:
        first = HostSegment(graph, 0)
    else:
        if end == len(graph.nodes) and planner.bounded is None:
            return planner.finish([planner.lookup(t.name) for t in graph.outputs])
        first = finish_segment(planner, graph, 0, end, [t.name for t in graph.inputs])
    return SegmentedPlan(graph, first, nthreads=nthreads, weights=weights, value_inputs=value_inputs,
                         capacities=capacities)


# Bindings prepared once (IOBinding, a server's bound run) need output
# shapes known before the run; a segmented plan knows them only after it.
OUT_REFUSED = ("a prepared output binding needs output shapes known before the run; this model's output shapes "
               "depend on its input values (a data-dependent op such as NonZero or NMS, a Loop whose iteration "
               "count is computed at run time, an If whose branches give different shapes): pass out= to run() "
               "instead, checked against the shapes each run produces")


def fill_out(out: list, produced: list[np.ndarray], names: list[str]) -> list[np.ndarray]:
    """A segmented plan's outputs copied into the caller's arrays (None:
    the produced array is returned). Output shapes are known only after the
    run: every given array is checked before any is written, and a mismatch
    names the output, the given shape and the produced one."""
    for o, a, name in zip(out, produced, names):
        if o is not None and (o.shape != a.shape or o.dtype != a.dtype):
            raise InvalidArgument(f"out array for output {name!r} is {o.dtype} {list(o.shape)}; this run produced "
                                  f"{a.dtype} {list(a.shape)} (its output shapes depend on the input values)")
    result = []
    for o, a in zip(out, produced):
        if o is None:
            result.append(a)
        else:
            np.copyto(o, a)
            result.append(o)
    return result


def _trip_count(inputs: list[np.ndarray], where: tuple) -> int:
    """The int64 a bounded Loop's trip count is, read from a segment input
    (BoundedOutputs.trip) before the segment runs; negative runs no iteration."""
    index, offset = where
    raw = inputs[index].reshape(-1).view(np.uint8)
    return max(int(raw[offset:offset + 8].view(np.int64)[0]), 0)


class HostSegment:
    """An If or Loop whose subgraphs hold shapes only a run tells (a
    run-time-length Loop, an If whose branches differ in shape, a
    data-dependent op): the host takes the branch or iterates, running the
    subgraph as a plan of its own (a segmented one where it needs to be),
    planned per shape and cached. The price is a host round trip per branch
    or iteration instead of a jump in the step list."""

    bounded = None
    consts: frozenset = frozenset()

    def __init__(self, graph: Graph, start: int):
        self.node, self.start, self.end = graph.nodes[start], start, start + 1
        self.plan = Planner(graph.opset).finish([])   # no steps: what SegmentedPlan reads of a segment
        self.outputs = [n for n in self.node.outputs if n]
        self.runners: dict[str, SubgraphRunner] = {}


class SubgraphRunner:
    """A subgraph as a graph of its own: its declared inputs, then the
    outer-scope values it reads, as inputs; outer initializers as its own."""

    def __init__(self, sub: Graph, outer: Graph, env: dict):
        declared = {t.name for t in sub.inputs}
        reads = list(dict.fromkeys(n for n in outer_reads(sub) if n not in declared and n not in sub.initializers))
        self.outer = [n for n in reads if n in env or n not in outer.initializers]
        inits = {n: outer.initializers[n] for n in reads if n not in self.outer}
        infos = list(sub.inputs) + [TensorInfo(n, env[n].dtype, env[n].shape) for n in self.outer]
        self.graph = Graph(sub.name, sub.nodes, infos, sub.outputs, {**inits, **sub.initializers}, outer.opset)
        self.plans = PlanCache(SEGMENT_CACHE_SIZE)
        self.value_inputs: frozenset = frozenset()

    def run(self, owner: "SegmentedPlan", declared: list[np.ndarray], env: dict, weights_ptr: int,
            nthreads: int) -> list[np.ndarray]:
        arrays = [np.ascontiguousarray(a) for a in list(declared) + [env[n] for n in self.outer]]
        feeds = {t.name: a for t, a in zip(self.graph.inputs, arrays)}
        while True:
            key = (tuple((a.shape, a.dtype.str) for a in arrays),
                   tuple(feeds[n].tobytes() for n in sorted(self.value_inputs)))
            plan = self.plans.get(key)
            if plan is not None:
                break
            try:
                plan = plan_graph(self.graph, feeds, nthreads=nthreads, value_inputs=self.value_inputs)
            except NeedsValue as need:
                if need.name in self.value_inputs or feeds[need.name].size > MAX_CONST_CARRY:
                    raise UnsupportedOperatorError(
                        f"tensor {need.name!r} determines shapes in a subgraph run on the host and has "
                        f"{feeds[need.name].size} elements (at most {MAX_CONST_CARRY} supported)") from None
                self.value_inputs = self.value_inputs | {need.name}
                continue
            owner._configure(plan)
            self.plans.put(key, plan)
            break
        return plan.run(weights_ptr, arrays, nthreads)


def _check_room(bounded, trips: int) -> None:
    """A trip count whose scan outputs could not be held in this machine's
    memory is refused in one line before anything is planned for it."""
    nbytes = sum(int(np.prod(shape, dtype=np.float64)) * v.dtype.itemsize
                 for v, shape in zip(bounded.values, bounded.shape_of(trips)) if v is not None)
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if nbytes > memory:
        names = ", ".join(repr(n) for n in bounded.key if n)
        raise InvalidArgument(f"the Loop producing {names} has a trip count of {trips}: its outputs would take "
                              f"{nbytes} bytes, more than this machine's {memory} bytes of memory")


class SegmentedPlan:
    """Runs a graph as segments (see the module docstring). Duck-types the
    parts of ExecPlan a session and server use: run, bind, arena_bytes."""

    def __init__(self, graph: Graph, first: Segment, *, nthreads: int, weights: np.ndarray | None,
                 value_inputs: frozenset = frozenset(), capacities: dict | None = None):
        self.graph, self.first, self.nthreads, self.weights = graph, first, nthreads, weights
        self.value_inputs = value_inputs   # graph inputs segment 0 was planned with the values of
        # room per bounded node with a capacity (a Loop's scan outputs), grown by runs
        self.capacities: dict[tuple, int] = {} if capacities is None else capacities
        self.cache = PlanCache(SEGMENT_CACHE_SIZE)
        self.value_names: dict[int, set[str]] = {}  # start -> inputs whose values key its plans
        self.label = "plan"
        self.arena_policy = first.plan.arena_policy
        self._empty: ExecPlan | None = None
        self._later_names: dict[int, frozenset] = {}
        self._learn = threading.Lock()   # see _regrow
        self.segment_runs = 0   # segment plans run (a debug stat: a re-run for more room shows here)

    @property
    def builds(self) -> int:
        """Plans built for the segments after a cut."""
        return self.cache.builds

    @property
    def arena_bytes(self) -> int:
        """The largest arena among the segments planned so far."""
        return max([self.first.plan.arena_bytes] + [s.plan.arena_bytes for s in self.cache.plans()])

    def plans(self) -> list[ExecPlan]:
        return [self.first.plan] + [s.plan for s in self.cache.plans()]

    def _configure(self, plan: ExecPlan) -> None:
        plan.arena_policy, plan.label = self.arena_policy, self.label

    def _later(self, start: int) -> frozenset:
        """Names read by nodes[start:] or returned: computed once per cut."""
        later = self._later_names.get(start)
        if later is None:
            names = {t.name for t in self.graph.outputs}
            for node in self.graph.nodes[start:]:
                names.update(node_reads(node))
            later = self._later_names[start] = frozenset(names)
        return later

    def _segment(self, start: int, env: dict, consts: set[str]) -> Segment:
        later = self._later(start)
        inputs = sorted(n for n in env if n in later)
        while True:
            values = self.value_names.get(start, set())
            capacities = self.capacities   # one set for the key and the plan (see _regrow)
            key = (start, tuple((n, env[n].shape, env[n].dtype.str) for n in inputs),
                   tuple(env[n].tobytes() for n in inputs if n in consts or n in values),
                   tuple(sorted(capacities.items())))
            seg = self.cache.get(key)
            if seg is not None:
                return seg
            try:
                seg = plan_segment(self.graph, start, env, inputs, (consts & set(inputs)) | values,
                                   nthreads=self.nthreads, weights=self.weights, capacities=dict(capacities))
            except RunsOnHost:
                seg = HostSegment(self.graph, start)
            except NeedsValue as need:
                if need.name in values or env[need.name].size > MAX_CONST_CARRY:
                    raise UnsupportedOperatorError(
                        f"tensor {need.name!r} determines shapes after a cut in the plan and has "
                        f"{env[need.name].size} elements (at most {MAX_CONST_CARRY} supported)") from None
                self.value_names[start] = values | {need.name}
                continue
            self._configure(seg.plan)
            self.cache.put(key, seg)
            return seg

    def evaluate(self, weights_ptr: int, inputs: list[np.ndarray], nthreads: int) -> dict[str, np.ndarray]:
        """Run every segment; returns the graph's output arrays by name."""
        env = {t.name: a for t, a in zip(self.graph.inputs, inputs)}
        consts: set[str] = set()
        seg = self.first
        self._configure(seg.plan)
        n_nodes = len(self.graph.nodes)
        regrown = 0
        while True:
            if isinstance(seg, HostSegment):
                env.update(self._run_host(seg, env, weights_ptr, nthreads))
                consts = consts - set(seg.outputs)
                if seg.end >= n_nodes:
                    return env
                seg, regrown = self._segment(seg.end, env, consts), 0
                continue
            bounded = seg.bounded
            seg_inputs = [env[n] for n in seg.inputs]
            if bounded is not None and bounded.trip is not None:
                trips = _trip_count(seg_inputs, bounded.trip)
                if trips > bounded.capacity:
                    _check_room(bounded, trips)
                    # a trip count known before the loop starts: room for it first, one run
                    seg = self._regrow(seg, trips, env, consts)
                    continue
            arrays = seg.plan.run(weights_ptr, seg_inputs, nthreads)
            self.segment_runs += 1
            k = len(seg.outputs)
            if bounded is not None and bounded.capacity is not None and int(arrays[-1][0]) > bounded.capacity:
                # room for fewer than it counted: plan it with more and run it again
                regrown += 1
                if regrown > MAX_REGROW:
                    raise UnsupportedOperatorError(
                        f"a loop's iteration count changes from one run of the same inputs to the next "
                        f"({int(arrays[-1][0])} past the {bounded.capacity} planned for)")
                seg = self._regrow(seg, int(arrays[-1][0]), env, consts)
                continue
            env.update(zip(seg.outputs, arrays[:k]))
            consts = (consts - set(seg.outputs)) | seg.consts
            if bounded is not None:
                live = [n for n, v in zip(seg.bounded_names, bounded.values) if v is not None]
                trimmed = trim_bounded(bounded, arrays[k:-1], int(arrays[-1][0]))
                env.update((n, a) for n, a in zip(live, trimmed) if n)
            if seg.end >= n_nodes:
                return env
            seg, regrown = self._segment(seg.end, env, consts), 0

    def _run_host(self, seg: HostSegment, env: dict, weights_ptr: int, nthreads: int) -> dict:
        """The outputs of seg's If or Loop, by name (see HostSegment)."""
        node = seg.node

        def value(name: str) -> np.ndarray:
            return env[name] if name in env else self.graph.initializers[name]

        def runner(attr: str) -> SubgraphRunner:
            r = seg.runners.get(attr)
            if r is None:
                r = seg.runners[attr] = SubgraphRunner(node.attrs[attr], self.graph, env)
            return r

        if node.op == "If":
            branch = "then_branch" if bool(value(node.inputs[0]).reshape(-1)[0]) else "else_branch"
            results = runner(branch).run(self, [], env, weights_ptr, nthreads)
        else:
            results = self._run_host_loop(node, value, runner("body"), env, weights_ptr, nthreads)
        return {n: a for n, a in zip(node.outputs, results) if n}

    def _run_host_loop(self, node, value, body: SubgraphRunner, env: dict, weights_ptr: int,
                       nthreads: int) -> list[np.ndarray]:
        names = node.inputs + [""] * (2 - len(node.inputs))
        trips = int(value(names[0]).reshape(-1)[0]) if names[0] else None
        go = bool(value(names[1]).reshape(-1)[0]) if names[1] else True
        carried = [value(n) for n in node.inputs[2:]]
        n, infos = len(carried), body.graph.outputs
        per_iteration: list[list[np.ndarray]] = [[] for _ in infos[1 + n:]]
        i = 0
        while go and (trips is None or i < trips):
            results = body.run(self, [np.array(i, np.int64), np.array(go)] + carried, env, weights_ptr, nthreads)
            go, carried = bool(results[0].reshape(-1)[0]), list(results[1:1 + n])
            for collected, r in zip(per_iteration, results[1 + n:]):
                collected.append(r)
            i += 1
        stacked = []
        for info, collected in zip(infos[1 + n:], per_iteration):
            if not collected:   # no iteration: the declared per-iteration shape where it is static
                dims = info.shape if info.shape and all(isinstance(d, int) and d >= 0 for d in info.shape) else ()
                stacked.append(np.zeros((0, *dims), info.dtype))
            elif any(c.shape != collected[0].shape for c in collected):
                raise InvalidArgument(f"Loop (node {node.name!r}): scan output {info.name!r} changes shape between "
                                      f"iterations ({list(collected[0].shape)}, then "
                                      f"{next(list(c.shape) for c in collected if c.shape != collected[0].shape)})")
            else:
                stacked.append(np.stack(collected))
        return [np.array(c) for c in carried] + stacked

    def _regrow(self, seg: Segment, count: int, env: dict, consts: set[str]) -> Segment:
        """seg planned again with room for `count` in its bounded outputs.
        Runs of one session on several threads learn here together: the
        capacities are replaced, never changed in place (a run planning a
        segment reads one consistent set), and one thread at a time grows
        them, so a room another thread has just grown is taken, not doubled."""
        key = seg.bounded.key
        with self._learn:
            room = self.capacities.get(key, 0)
            if room < count:
                self.capacities = {**self.capacities, key: max(count, 2 * seg.bounded.capacity)}
            if seg.start > 0:
                return self._segment(seg.start, env, consts)
            first = self.first
            if first.bounded is None or first.bounded.capacity < count:
                feeds = {t.name: env[t.name] for t in self.graph.inputs}
                again = plan_graph(self.graph, feeds, nthreads=self.nthreads, value_inputs=self.value_inputs,
                                   weights=self.weights, capacities=dict(self.capacities))
                first = self.first = again.first
                self._configure(first.plan)
            return first

    def run(self, weights_ptr: int, inputs: list[np.ndarray], nthreads: int, out=None) -> list[np.ndarray]:
        """out: None, or one entry per graph output, an array to copy that
        output into or None (see fill_out)."""
        env = self.evaluate(weights_ptr, inputs, nthreads)
        graph_inputs = {t.name for t in self.graph.inputs}
        outs = []
        for t in self.graph.outputs:
            a = env[t.name] if t.name in env else self.graph.initializers[t.name]
            # a graph input or an initializer returned as an output: the caller gets its own copy
            outs.append(np.array(a) if t.name in graph_inputs or t.name not in env else a)
        return outs if out is None else fill_out(out, outs, [t.name for t in self.graph.outputs])

    def bind(self, weights_ptr: int, inputs: list[np.ndarray]) -> BoundRun:
        """For servers that run plans on a C thread: the segments run here,
        on the caller's thread; the bound run is an empty plan whose outputs
        are already filled."""
        outs = self.run(weights_ptr, inputs, self.nthreads)
        if self._empty is None:
            self._empty = Planner(self.graph.opset).finish([])
            self._configure(self._empty)
        empty = self._empty
        bound = empty.bind(weights_ptr, [])
        return BoundRun(empty, outs, bound.args, inputs)

    def profile(self, weights_ptr: int, inputs: list[np.ndarray], nthreads: int, repeats: int = 5) -> list[dict]:
        """Segment 0's steps (the segments after a cut depend on the data)."""
        return self.first.plan.profile(weights_ptr, inputs, nthreads, repeats)
