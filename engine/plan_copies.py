"""Copies of copies: a COPY step that reads a buffer which another COPY step
filled (a Split piece then copied into a Concat slab; an NHWC -> NCHW
transpose a graph's Reshape + Transpose then turns back to channel-last, as
the detector's heads do) reads the first copy's source instead, with the two
index maps composed; the first copy goes when nothing else reads its
buffer. A BINARY step reads a copy's source the same way (the detector's
Slices before its Mul), and a BINARY whose output only a copy reads computes
straight into the copy's destination in the copy's order (that Mul, then
the Transpose NMS wants).

Lowering emits each node's copies on their own; only the whole step list
shows that two of them chain. The composition is found numerically: the
source offset of every element the second copy reads, through the first
copy's map, must be one strided pattern (checked element by element), so a
chain whose maps do not compose (a gather-like order) is left as it was.

Safety: only buffers no other kind of step touches take part (an in-place
step, a multi-output op writing it, is then ruled out), the first copy's
source must not be written between the two copies, and plans with jumps (a
Loop's body re-runs its steps) are left alone."""

from __future__ import annotations

import math

import numpy as np

from engine.kernels.abi import BinaryStep, CopyStep, Op
from engine.lowering import LOC_ARENA, Step, Value
from engine.ops.common import collapse, contiguous_strides

_JUMPS = (Op.JUMP, Op.JUMP_IF_NOT)


def copy_map(st: Step) -> tuple[list[int], list[int], list[int]]:
    """(shape, dst strides, src strides) in elements of a COPY step."""
    p = CopyStep.from_words(st.ints)
    r, tail = p.rank, st.ints[len(CopyStep._fields_):]
    return list(tail[:r]), list(tail[r:2 * r]), list(tail[2 * r:3 * r])


def _grid(shape, strides, base: int = 0) -> np.ndarray:
    """base + sum_j i_j * strides[j] over `shape` (int64)."""
    out = np.full([1] * len(shape), base, np.int64)
    for d, (n, s) in enumerate(zip(shape, strides)):
        ax = [1] * len(shape)
        ax[d] = n
        out = out + (np.arange(n, dtype=np.int64) * s).reshape(ax)
    return np.broadcast_to(out, shape)


def _refine(sh1, sh2) -> list[int] | None:
    """The coarsest shape both row-major shapes of one element count split
    into (their suffix products merged), or None when they cross."""
    cuts = sorted({int(np.prod(sh[d:], dtype=np.int64)) for sh in (sh1, sh2) for d in range(len(sh) + 1)})
    if any(b % a for a, b in zip(cuts, cuts[1:])):
        return None
    return [b // a for a, b in zip(cuts, cuts[1:])][::-1]


def _strides_on(shape, fine, strides) -> list[int]:
    """Strides over `fine` (a refinement of the row-major `shape`) of a map
    with `strides` over `shape`: a fine dim of linear stride p lies in the
    dim d of `shape` with P_d <= p < P_d * shape[d] and steps p / P_d of it."""
    lin = contiguous_strides(shape)
    out = []
    for p in contiguous_strides(fine):
        d = next(d for d in range(len(shape)) if lin[d] <= p < lin[d] * shape[d] or (shape[d] == 1 and lin[d] == p))
        out.append(strides[d] * (p // lin[d]))
    return out


def compose(first: Step, second: Step) -> tuple[list[int], list[int], int, list[int]] | None:
    """The second copy as one read of the first copy's source view: (shape,
    dst strides, offset and strides into that view, in elements), or None
    when the two maps do not compose into one strided pattern."""
    esize = CopyStep.from_words(first.ints).esize
    if CopyStep.from_words(second.ints).esize != esize:
        return None
    sh1, dst1, src1 = copy_map(first)
    sh2, dst2, src2 = copy_map(second)
    if second.tensors[1].offset == 0 and src2 == contiguous_strides(sh2) and dst1 == contiguous_strides(sh1) \
            and first.tensors[0].offset == 0 and math.prod(sh2) == math.prod(sh1):
        # the whole buffer in order (a flatten into a Concat): split both
        # shapes to one refinement, where each side is strided per dim
        fine = _refine(sh1, sh2)
        if fine is not None:
            return fine, _strides_on(sh2, fine, dst2), 0, _strides_on(sh1, fine, src1)
    read = compose_read(first, sh2, src2, second.tensors[1].offset)
    return None if read is None else (sh2, dst2, *read)


def compose_read(first: Step, shape, strides, offset: int) -> tuple[int, list[int]] | None:
    """A read of the first copy's output over `shape` with element `strides`
    from byte `offset`, as (offset, strides) in elements of the first copy's
    source view; None when it is not one strided pattern there."""
    esize = CopyStep.from_words(first.ints).esize
    sh1, dst1, src1 = copy_map(first)
    if first.tensors[0].offset != 0 or dst1 != contiguous_strides(sh1):
        return None  # the buffer is not the first copy's output laid out in order
    off2, rem = divmod(offset, esize)
    return None if rem else through_map(sh1, src1, shape, strides, off2)


def through_map(sh1, src1, shape, strides, off2: int) -> tuple[int, list[int]] | None:
    """A read over `shape` with `strides` from element `off2` of a row-major
    [sh1] buffer whose element i came from offset sum(i_d * src1[d]) of a
    source: (offset, strides) of that read in the source, or None when it is
    not one strided pattern there (checked element by element)."""
    n1 = math.prod(sh1)
    read = _grid(shape, strides, off2)
    if read.size == 0 or read.min() < 0 or read.max() >= n1:
        return None  # it reads what the first copy did not write
    through = np.ascontiguousarray(_grid(sh1, src1)).reshape(-1)[read]
    base = int(through.reshape(-1)[0])
    out = []
    for d, n in enumerate(shape):
        at = [0] * len(shape)
        at[d] = 1 if n > 1 else 0
        out.append(int(through[tuple(at)]) - base if n > 1 else 0)
    if not np.array_equal(through, _grid(shape, out, base)):
        return None
    return base, out


def _reads(st: Step, buf, esize: int) -> list[int] | None:
    """The operand positions at which `st` reads `buf` as a strided view it
    can be pointed elsewhere through (a COPY's source, a BINARY's operands of
    the same element size); None when it touches `buf` any other way."""
    if st.op not in (Op.COPY, Op.BINARY) or st.tensors[0].buf is buf:
        return None
    at = [k for k, t in enumerate(st.tensors) if k and t is not None and t.buf is buf]
    return at if all(st.tensors[k].dtype.itemsize == esize for k in at) else None


def _binary_map(st: Step) -> tuple[BinaryStep, list[int], list[list[int]]]:
    p = BinaryStep.from_words(st.ints)
    r, tail = p.rank, st.ints[len(BinaryStep._fields_):]
    return p, list(tail[:r]), [list(tail[r:2 * r]), list(tail[2 * r:3 * r])]


def _redirect(first: Step, st: Step, at: list[int]) -> Step | None:
    """st with its reads at positions `at` of the first copy's output taken
    from the first copy's source instead, or None when a map does not
    compose."""
    view = first.tensors[1]
    esize = CopyStep.from_words(first.ints).esize
    tensors = list(st.tensors)
    if st.op == Op.COPY:
        got = compose(first, st)
        if got is None:
            return None
        shape, dst, base, strides = got
        cshape, (cdst, csrc) = collapse(shape, dst, strides)
        tensors[1] = Value(view.shape, view.dtype, buf=view.buf, offset=view.offset + base * esize)
        return Step(st.op, tensors, CopyStep(esize=esize, rank=len(cshape)).words(cshape, cdst, csrc), st.floats)
    p, shape, strides = _binary_map(st)
    for k in at:
        got = compose_read(first, shape, strides[k - 1], st.tensors[k].offset)
        if got is None:
            return None
        base, strides[k - 1] = got
        tensors[k] = Value(view.shape, st.tensors[k].dtype, buf=view.buf, offset=view.offset + base * esize)
    cshape, (sa, sb) = collapse(shape, *strides)
    return Step(st.op, tensors, BinaryStep(op=p.op, dtype=p.dtype, rank=len(cshape)).words(cshape, sa, sb),
                st.floats)


def _users(steps: list[Step]) -> dict[int, list[int]]:
    """id(buffer) -> the indices of the steps that read or write it."""
    users: dict[int, list[int]] = {}
    for i, st in enumerate(steps):
        for t in {id(t.buf): t for t in st.tensors if t is not None}.values():
            users.setdefault(id(t.buf), []).append(i)
    return users


def fold_copy_chains(steps: list[Step]) -> list[Step]:
    """The step list with chained copies composed (module doc). Buffers'
    lifetimes (first, last) are kept in step indices of the returned list."""
    if not steps or any(st.op in _JUMPS for st in steps):
        return steps
    users = _users(steps)
    dropped: set[int] = set()
    for i, first in enumerate(steps):
        if first.op != Op.COPY or i in dropped:
            continue
        mid, src = first.tensors[0].buf, first.tensors[1].buf
        esize = CopyStep.from_words(first.ints).esize
        if mid.kind != LOC_ARENA or mid is src:
            continue
        readers = [j for j in users[id(mid)] if j != i]
        reads = [_reads(steps[j], mid, esize) for j in readers]
        if not readers or min(readers) < i or any(r is None for r in reads):
            continue  # another kind of step reads or writes it
        last = max(readers)
        if any(j not in dropped and _reads(steps[j], src, esize) is None for j in users[id(src)] if i < j <= last):
            continue  # the source may change before the last read
        new = [_redirect(first, steps[j], at) for j, at in zip(readers, reads)]
        if any(st is None for st in new):
            continue
        for j, st in zip(readers, new):
            steps[j] = st
        dropped.add(i)
        users[id(mid)] = []
        users[id(src)] = sorted((set(users[id(src)]) | set(readers)) - {i})
        src.last = max(src.last, last)
    if not dropped:
        return steps
    return _renumber(steps, dropped)


def fold_binary_into_copy(steps: list[Step]) -> list[Step]:
    """A BINARY step whose output only one COPY reads (the detector's Mul,
    then the Transpose NMS wants) computes straight into the copy's
    destination, in the copy's order: the operands are read through the
    composed strides and the copy goes. Buffers' lifetimes as in
    fold_copy_chains."""
    if not steps or any(st.op in _JUMPS for st in steps):
        return steps
    users = _users(steps)
    dropped: set[int] = set()
    for i, st in enumerate(steps):
        if st.op != Op.BINARY or st.tensors[0].offset != 0 or st.tensors[0].buf.kind != LOC_ARENA:
            continue
        mid = st.tensors[0].buf
        readers = [j for j in users[id(mid)] if j != i]
        if len(readers) != 1 or readers[0] < i or steps[readers[0]].op != Op.COPY:
            continue
        j = readers[0]
        cp = steps[j]
        p, shape1, strides = _binary_map(st)
        esize = st.tensors[0].dtype.itemsize
        sh2, dst2, src2 = copy_map(cp)
        off2, rem = divmod(cp.tensors[1].offset, esize)
        if (rem or cp.tensors[1].buf is not mid or cp.tensors[0].buf is mid or dst2 != contiguous_strides(sh2)
                or CopyStep.from_words(cp.ints).esize != esize):
            continue
        operands = [t.buf for t in st.tensors[1:3]]
        if cp.tensors[0].buf in operands:
            continue  # it would write what it reads, in another order
        if any(k not in dropped and (steps[k].op not in (Op.COPY, Op.BINARY) or steps[k].tensors[0].buf is b)
               for b in operands for k in users[id(b)] if i < k < j):
            continue  # an operand may change before the copy (only copies and binaries surely leave inputs alone)
        maps = [through_map(shape1, s, sh2, src2, off2) for s in strides]
        if any(m is None for m in maps):
            continue
        tensors = [cp.tensors[0]]
        for t, (base, _) in zip(st.tensors[1:3], maps):
            tensors.append(Value(t.shape, t.dtype, buf=t.buf, offset=t.offset + base * t.dtype.itemsize))
        cshape, (sa, sb) = collapse(sh2, *[m[1] for m in maps])
        steps[j] = Step(Op.BINARY, tensors, BinaryStep(op=p.op, dtype=p.dtype, rank=len(cshape)).words(cshape, sa, sb),
                        st.floats)
        dropped.add(i)
        for b in operands:
            b.last = max(b.last, j)
            users[id(b)] = sorted(set(users[id(b)]) - {i} | {j})
        users[id(mid)] = []
    if not dropped:
        return steps
    return _renumber(steps, dropped)


def _renumber(steps: list[Step], dropped: set[int]) -> list[Step]:
    """steps without `dropped`, each buffer's [first, last] moved onto the
    kept steps (a range that held only dropped steps ends up empty)."""
    kept_before = np.cumsum([0] + [0 if i in dropped else 1 for i in range(len(steps))])
    seen = {}
    for st in steps:
        for t in st.tensors:
            if t is not None and t.buf is not None:
                seen[id(t.buf)] = t.buf
    for b in seen.values():
        if b.first >= 0:
            b.first, b.last = int(kept_before[b.first]), int(kept_before[b.last + 1]) - 1
    return [st for i, st in enumerate(steps) if i not in dropped]
