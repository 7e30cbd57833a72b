"""Packing a planned step list into the tables the C executor reads
(aie_exec_plan, kernels/include/aie_ops.def): arena offsets for every
intermediate tensor (reusing memory between tensors whose lifetimes do not
overlap), the plan-constant blob, and each step's thread cap."""

from __future__ import annotations

import numpy as np

from engine.kernels.abi import ConvStep, GemmPackedStep, MatmulStep, Op, StepRecord, TensorRecord
from engine.lowering import ALIGN, LOC_ARENA, Buffer, Step
from engine.plan_run import ExecPlan


def assign_offsets(buffers: list[Buffer]) -> int:
    """Greedy by size (largest first), lowest offset whose interval is free
    for the buffer's lifetime. Returns the arena size in bytes."""
    placed: list[Buffer] = []
    peak = 0
    for b in sorted(buffers, key=lambda b: (-b.nbytes, b.first)):
        live = sorted((p for p in placed if not (p.last < b.first or b.last < p.first)), key=lambda p: p.offset)
        off = 0
        for p in live:
            if off + b.nbytes <= p.offset:
                break
            off = max(off, p.offset + p.nbytes)
        b.offset = off
        placed.append(b)
        peak = max(peak, off + b.nbytes)
    return peak


# Below these sizes a step runs on the calling thread alone (step record word
# AIE_STEP_THREADS = 1): waking the pool costs ~5-20 us on this class of
# machine (more when the other core is busy), which is what a 2 MFLOP GEMM or
# a 256 KiB element-wise pass takes on one core, so splitting smaller steps
# makes 2 threads slower than 1. Re-measured (bench_models.py, 2 threads,
# batch 1 and 64, five models): 2 MFLOP / 256 KiB beat 10 MFLOP / 1 MiB and
# 50 MFLOP / 4 MiB on every cell but one (digits batch 64); higher bars only
# looked better while onnxruntime's spinning workers held the second CPU.
PARALLEL_MIN_FLOPS = 2_000_000
PARALLEL_MIN_BYTES = 256 << 10
_COMPUTE_OPS = {Op.MATMUL, Op.CONV, Op.CONV_TRANSPOSE, Op.GEMM_PACKED}


def step_work(st: Step) -> tuple[int, int]:
    """(flops, bytes touched) estimate of a step, from its operands."""
    nbytes = sum(t.nbytes for t in st.tensors if t is not None)
    if st.op in (Op.MATMUL, Op.GEMM_PACKED):
        p = (MatmulStep if st.op == Op.MATMUL else GemmPackedStep).from_words(st.ints)
        batch = 1
        if st.op == Op.MATMUL and p.batch_rank:
            n = len(MatmulStep._fields_)
            batch = int(np.prod(st.ints[n:n + p.batch_rank], dtype=np.int64))
        return 2 * p.M * p.N * p.K * batch, nbytes
    if st.op in (Op.CONV, Op.CONV_TRANSPOSE):
        c = ConvStep.from_words(st.ints).conv
        groups = max(c.groups, 1)
        out = st.tensors[0].size
        taps = c.R * c.S * (c.C // groups) if st.op == Op.CONV else c.R * c.S * (c.K // groups)
        return 2 * (out if st.op == Op.CONV else c.N * c.H * c.W * c.C) * taps, nbytes
    return 0, nbytes


def step_threads(st: Step) -> int:
    """1 for steps too small to split; 0 (the run's thread count) otherwise."""
    flops, nbytes = step_work(st)
    if st.op in _COMPUTE_OPS:
        # Few flops over many bytes (a GEMV over a weight matrix) is
        # bandwidth-bound: two cores' caches and load ports still pay.
        return 0 if flops >= PARALLEL_MIN_FLOPS or nbytes >= 2 * PARALLEL_MIN_BYTES else 1
    return 0 if nbytes >= PARALLEL_MIN_BYTES else 1


_STEP_WORDS = len(StepRecord._fields_)
_TENSOR_WORDS = len(TensorRecord._fields_)


def pack_plan(planner, out_specs) -> ExecPlan:
    buffers: dict[int, Buffer] = {}
    for st in planner.steps:
        for t in st.tensors:
            if t is not None and t.buf.kind == LOC_ARENA:
                buffers[id(t.buf)] = t.buf
    arena_bytes = assign_offsets(list(buffers.values()))

    # plan-constant blob
    blob_size = 0
    for buf, data in planner.plan_consts:
        buf.offset = blob_size
        blob_size += buf.nbytes
    consts = np.zeros(max(blob_size, ALIGN) + ALIGN, np.uint8)
    base = (-consts.ctypes.data) % ALIGN
    consts = consts[base:base + max(blob_size, ALIGN)]
    for buf, data in planner.plan_consts:
        consts[buf.offset:buf.offset + data.nbytes] = np.frombuffer(data.tobytes(), np.uint8)

    tensor_ids: dict[tuple, int] = {}
    tensors, step_tensors, iparams, fparams, steps = [], [], [], [], []
    for st in planner.steps:
        t0 = len(step_tensors)
        for t in st.tensors:
            if t is None:
                step_tensors.append(-1)
                continue
            b = t.buf
            key = (b.kind, b.index, b.offset + t.offset)
            if key not in tensor_ids:
                tensor_ids[key] = len(tensors)
                tensors.append(key)
            step_tensors.append(tensor_ids[key])
        steps.append(StepRecord(op=st.op, t0=t0, nt=len(st.tensors), i0=len(iparams), ni=len(st.ints),
                                f0=len(fparams), nf=len(st.floats), threads=step_threads(st)).words())
        iparams.extend(st.ints)
        fparams.extend(st.floats)
    return ExecPlan(
        steps=np.array(steps, np.int64).reshape(-1, _STEP_WORDS),
        tensors=np.array(tensors, np.int64).reshape(-1, _TENSOR_WORDS),
        step_tensors=np.array(step_tensors + [0], np.int64),
        iparams=np.array(iparams + [0], np.int64),
        fparams=np.array(fparams + [0.0], np.float64),
        consts=consts,
        arena_bytes=arena_bytes,
        outputs=out_specs,
    )
