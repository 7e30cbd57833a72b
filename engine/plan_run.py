"""A packed plan ready to run: ExecPlan (the C tables, the arenas its
concurrent runs use, one aie_exec_run call per inference, per-step
profiling), BoundRun (one run's arguments, for callers that run plans on
their own thread) and PlanCache (plans per input signature, bounded)."""

from __future__ import annotations

import ctypes
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from engine.arena import PLAN_ARENAS, ArenaPolicy
from engine.errors import KernelError
from engine.kernels._lib import lib
from engine.kernels.abi import ExecPlan as _CPlan
from engine.kernels.abi import StepRecord


@dataclass
class ExecPlan:
    """A packed plan plus the arenas its concurrent runs use."""

    steps: np.ndarray
    tensors: np.ndarray
    step_tensors: np.ndarray
    iparams: np.ndarray
    fparams: np.ndarray
    consts: np.ndarray
    arena_bytes: int
    outputs: list  # (shape, dtype, const array or None)
    _free: list = field(default_factory=list)
    _keep: list = field(default_factory=list)  # owners of the arena blocks
    _lock: threading.Lock = field(default_factory=threading.Lock)
    arenas_created: int = 0  # arenas this plan holds: mapped for it, or taken from a donor
    arenas_taken: int = 0  # of those, taken over from an evicted plan (ArenaDonors)
    arena_backing: str = "numpy"
    # Set by the session that owns the plan: how its arenas are backed, and
    # the model and input shapes, named when engine.arena.size refuses one.
    arena_policy: ArenaPolicy = field(default_factory=ArenaPolicy)
    label: str = "plan"
    # Set by the PlanCache holding the plan: arenas of plans it evicted,
    # which a new plan takes instead of mapping (and prefaulting) its own.
    donors: "ArenaDonors | None" = None

    def __post_init__(self):
        self.cplan = _CPlan(len(self.steps), self.steps.ctypes.data, len(self.tensors), self.tensors.ctypes.data,
                            self.step_tensors.ctypes.data, self.iparams.ctypes.data, self.fparams.ctypes.data)
        # Per-run ctypes objects prepared once: a small model's whole
        # inference is ~10 us, so the Python side must stay in that range.
        self._cplan_ref = ctypes.byref(self.cplan)
        self._call = _exec_fn()
        self._out_type = ctypes.c_void_p * max(len(self.outputs), 1)
        self._blobs: dict = {}
        # run()'s free (arena, input pointers, output pointers) triples: one
        # per concurrent run, so filling the pointer arrays needs no lock.
        self._slots: list = []
        self._n_outputs = len(self.outputs)
        self._const_outputs = any(const is not None for _, _, const in self.outputs)
        self._out_alloc = [(shape, dtype) for shape, dtype, _ in self.outputs]

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    def acquire_arena(self) -> int:
        """Address of a free arena block for one run. Each concurrent run
        needs its own; blocks are kept and reused, so their number is
        bounded by the peak concurrency and steady state allocates nothing."""
        try:
            return self._free.pop()  # atomic under the GIL: no lock on the hot path
        except IndexError:
            pass
        with self._lock:
            address = self._new_arena()
            self.arenas_created += 1
            return address

    def _new_arena(self) -> int:
        if self.donors is not None:
            taken = self.donors.take(self.arena_bytes)
            if taken is not None:
                donor, addresses = taken
                # The donor (and its place in the PLAN_ARENAS ledger) lives
                # as long as this plan uses its arenas.
                self._keep.append(donor)
                self.arenas_taken += 1
                self.arena_backing = donor.arena_backing
                self._free.extend(addresses[1:])
                return addresses[0]
        # From the process's plan-arena ledger (engine.arena.PLAN_ARENAS):
        # large ones from the kernels' allocator (2 MiB hugepages when the
        # policy asks and the pool has them, else THP/normal pages; prefaulted
        # either way, so the first run takes no page faults), small ones as
        # numpy buffers; the backing it got and why is kept in arena_backing.
        address, keep, self.arena_backing = PLAN_ARENAS.allocate(self, self.arena_bytes, self.arena_policy,
                                                                  self.label)
        self._keep.append(keep)
        return address

    def release_arena(self, address: int) -> None:
        self._free.append(address)

    def has_idle_arena(self) -> bool:
        return bool(self._free or self._slots)

    def take_idle_arenas(self) -> list[int]:
        """The arenas no run holds (free, or parked in a run() slot), taken
        away from this plan: for ArenaDonors, once the plan is evicted."""
        addresses = []
        while self._slots:
            addresses.append(self._slots.pop()[0])
        while self._free:
            addresses.append(self._free.pop())
        return addresses

    def bind(self, weights_ptr: int, inputs: list[np.ndarray],
             into: dict[int, np.ndarray] | None = None) -> "BoundRun":
        """Everything one run needs, with an arena taken from the pool: for
        run() below and for callers that run plans on their own thread
        (engine.server.runner). release() gives the arena back. `into`
        {output index: array}: outputs written there where the array is
        exactly the output (shape, dtype, C-contiguous, writable)."""
        outs = self.new_outputs()
        for k, o in (into or {}).items():
            shape, dtype, const = self.outputs[k]
            if (o.shape == tuple(shape) and o.dtype == dtype and o.flags.c_contiguous and o.flags.writeable):
                if const is not None:
                    np.copyto(o, const)
                outs[k] = o
        in_ptrs = (ctypes.c_void_p * max(len(inputs), 1))(*[address_of(a) for a in inputs])
        out_ptrs = self._out_type(*[address_of(o) for o in outs])
        blobs = self.blobs_for(weights_ptr)
        arena = self.acquire_arena()
        return BoundRun(self, outs, (self._cplan_ref, arena, blobs, in_ptrs, out_ptrs), inputs)

    def blobs_for(self, weights_ptr: int):
        blobs = self._blobs.get(weights_ptr)
        if blobs is None:
            blobs = self._blobs[weights_ptr] = (ctypes.c_void_p * 2)(weights_ptr, self.consts.ctypes.data)
        return blobs

    def new_outputs(self) -> list[np.ndarray]:
        return [np.empty(shape, dtype) if const is None else const.copy() for shape, dtype, const in self.outputs]

    def run(self, weights_ptr: int, inputs: list[np.ndarray], nthreads: int,
            out: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """One inference: outputs into `out` (C-contiguous arrays of the
        outputs' shapes and dtypes, checked by the caller) or new arrays.
        The per-call Python work is a few microseconds: pointers written
        into arrays prepared once per concurrent run, one foreign call."""
        try:
            slot = self._slots.pop()  # atomic under the GIL
        except IndexError:
            slot = self._new_slot(len(inputs))
        arena, in_ptrs, out_ptrs = slot
        for i, a in enumerate(inputs):
            in_ptrs[i] = address_of(a)
        if out is None:
            if self._const_outputs:
                out = self.new_outputs()
            else:
                out = [np.empty(shape, dtype) for shape, dtype in self._out_alloc]
        elif self._const_outputs:
            for o, (_, _, const) in zip(out, self.outputs):
                if const is not None:
                    np.copyto(o, const)
        for i, o in enumerate(out):
            out_ptrs[i] = address_of(o)
        try:
            rc = self._call(self._cplan_ref, arena, self.blobs_for(weights_ptr), in_ptrs, out_ptrs, nthreads)
        finally:
            self._slots.append(slot)
        if rc != 0:
            raise KernelError(f"inference failed: {lib().aie_last_error().decode()}")
        return out

    def _new_slot(self, n_inputs: int) -> tuple:
        return (self.acquire_arena(), (ctypes.c_void_p * max(n_inputs, 1))(), self._out_type())

    def profile(self, weights_ptr: int, inputs: list[np.ndarray], nthreads: int, repeats: int = 5) -> list[dict]:
        """Per-step times: each step runs as a one-step plan sharing this
        plan's tables and one arena (so the normal run path has no timing
        code at all). Returns, in step order, {index, op, op_name, ints,
        threads, ns} with ns the best of `repeats` whole-plan passes; a
        pass includes one ctypes call per step (~1-3 us, listed as such by
        benchmarks/profile_model.py). Plans with jumps (If) are timed
        whole-step by whole-step too, which is only right for the branch
        the inputs take."""
        outs = [np.empty(shape, dtype) if const is None else const.copy() for shape, dtype, const in self.outputs]
        in_ptrs = (ctypes.c_void_p * max(len(inputs), 1))(*[a.ctypes.data for a in inputs])
        out_ptrs = self._out_type(*[o.ctypes.data for o in outs])
        blobs = (ctypes.c_void_p * 2)(weights_ptr, self.consts.ctypes.data)
        rec = self.steps.itemsize * self.steps.shape[1]
        one = [_CPlan(1, self.steps.ctypes.data + i * rec, len(self.tensors), self.tensors.ctypes.data,
                      self.step_tensors.ctypes.data, self.iparams.ctypes.data, self.fparams.ctypes.data)
               for i in range(self.n_steps)]
        best = [float("inf")] * self.n_steps
        arena = self.acquire_arena()
        try:
            for _ in range(max(repeats, 1)):
                for i, cp in enumerate(one):
                    t = time.perf_counter_ns()
                    rc = self._call(ctypes.byref(cp), arena, blobs, in_ptrs, out_ptrs, nthreads)
                    dt = time.perf_counter_ns() - t
                    if rc != 0:
                        raise KernelError(f"step {i} failed: {lib().aie_last_error().decode()}")
                    best[i] = min(best[i], dt)
        finally:
            self.release_arena(arena)
        name_fn = lib().aie_exec_op_name
        name_fn.restype = ctypes.c_char_p
        name_fn.argtypes = [ctypes.c_int64]
        rows = []
        for i, words in enumerate(self.steps.tolist()):
            rec = StepRecord.from_words(words)
            rows.append({"index": i, "op": rec.op, "op_name": name_fn(rec.op).decode(),
                         "ints": self.iparams[rec.i0:rec.i0 + rec.ni].tolist(), "threads": rec.threads, "ns": best[i]})
        return rows


class BoundRun:
    """One run's arguments for aie_exec_run (plan, arena, blobs, input and
    output pointer arrays) and the objects they point into, kept alive
    together until release()."""

    __slots__ = ("plan", "outs", "args", "inputs", "_released")

    def __init__(self, plan: ExecPlan, outs: list[np.ndarray], args: tuple, inputs: list[np.ndarray]):
        self.plan, self.outs, self.args, self.inputs = plan, outs, args, inputs
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.plan.release_arena(self.args[1])


def address_of(a: np.ndarray) -> int:
    """The data address of a C-contiguous array. Through the buffer protocol
    when the array is writable and not empty: a third of the cost of
    `a.ctypes.data`, which builds a helper object per call."""
    if a.flags.writeable and a.nbytes:
        return ctypes.addressof(_CHAR.from_buffer(a))
    return a.ctypes.data


_CHAR = ctypes.c_char
_EXEC_FN = None


def _exec_fn():
    global _EXEC_FN
    if _EXEC_FN is None:
        fn = lib().aie_exec_run
        fn.argtypes = [ctypes.POINTER(_CPlan), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.c_int]
        fn.restype = ctypes.c_int
        _EXEC_FN = fn
    return _EXEC_FN


class ArenaDonors:
    """Plans a PlanCache evicted, kept (at most `capacity`) for their idle
    arenas: a model whose shapes change every call then builds plans
    without mapping a new arena each time. A plan takes a donor whose
    arenas are at least its size and at most twice it (plus one hugepage),
    so reuse never holds much more memory than a fresh arena would."""

    def __init__(self, capacity: int = 2):
        self.capacity = capacity
        self._plans: list = []
        self._lock = threading.Lock()
        self.reused = 0

    def offer(self, plan) -> None:
        if not isinstance(plan, ExecPlan) or not plan.has_idle_arena():
            return
        plan.donors = None  # no cycle donors -> plan -> donors: arenas go with the session, not the cyclic GC
        with self._lock:
            self._plans.append(plan)
            del self._plans[:-self.capacity]

    def take(self, nbytes: int):
        """(donor plan, its idle arena addresses) or None."""
        with self._lock:
            for i, plan in enumerate(self._plans):
                if nbytes <= plan.arena_bytes <= 2 * nbytes + (2 << 20) and plan.has_idle_arena():
                    del self._plans[i]
                    addresses = plan.take_idle_arenas()
                    self.reused += 1
                    return plan, addresses
            # None fits: drop them, so their arenas leave the PLAN_ARENAS
            # ledger before a new one is mapped (engine.arena.size holds
            # as it did without donors).
            self._plans.clear()
        return None


class PlanCache:
    """Bounded LRU of plans per input signature (shapes, plus values of inputs
    a lowering needed at plan time). Evicted plans lend their idle arenas
    to the next plans built (ArenaDonors), else free them."""

    def __init__(self, capacity: int, on_evict=None):
        self.capacity = max(1, int(capacity))
        self._on_evict = on_evict
        self._plans: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        # plans built (put) and dropped for room: a workload whose shapes
        # outrun the capacity shows as evictions growing with builds
        self.builds = 0
        self.evictions = 0
        self.donors = ArenaDonors()

    def get(self, key):
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
            return plan

    def put(self, key, plan) -> None:
        with self._lock:
            if isinstance(plan, ExecPlan):
                plan.donors = self.donors
            self._plans[key] = plan
            self._plans.move_to_end(key)
            self.builds += 1
            while len(self._plans) > self.capacity:
                old, evicted = self._plans.popitem(last=False)
                self.evictions += 1
                if self._on_evict is not None:
                    self._on_evict(old)
                self.donors.offer(evicted)

    def __len__(self) -> int:
        return len(self._plans)

    def plans(self) -> list:
        with self._lock:
            return list(self._plans.values())
