"""The executor's COPY step with a strided destination (a Concat slab, a
Split piece): rows walked by an odometer from each task's first row, so a
task split anywhere in a rank-3 walk must still land every row. Compared
element for element with numpy's strided assignment."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from engine.kernels import abi
from engine.kernels._lib import lib


def run_copy(dst: np.ndarray, src: np.ndarray, shape, dst_strides, src_strides, threads: int) -> None:
    """One COPY step (element strides) through aie_exec_run: dst <- src."""
    h = lib()
    words = abi.CopyStep(esize=src.itemsize, rank=len(shape)).words(list(shape), list(dst_strides),
                                                                    list(src_strides))
    step = abi.StepRecord(op=abi.Op.COPY, t0=0, nt=2, i0=0, ni=len(words), f0=0, nf=0, threads=threads)
    tensors = (abi.TensorRecord * 2)(abi.TensorRecord(kind=abi.Loc.OUTPUT, index=0, offset=0),
                                     abi.TensorRecord(kind=abi.Loc.INPUT, index=0, offset=0))
    iparams = (ctypes.c_int64 * len(words))(*words)
    fparams = (ctypes.c_double * 1)()
    step_tensors = (ctypes.c_int64 * 2)(0, 1)
    plan = abi.ExecPlan(n_steps=1, steps=ctypes.addressof(step), n_tensors=2, tensors=ctypes.addressof(tensors),
                        step_tensors=ctypes.addressof(step_tensors), iparams=ctypes.addressof(iparams),
                        fparams=ctypes.addressof(fparams))
    h.aie_exec_run.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int]
    h.aie_exec_run.restype = ctypes.c_int
    h.aie_last_error.restype = ctypes.c_char_p
    inputs = (ctypes.c_void_p * 1)(src.ctypes.data)
    outputs = (ctypes.c_void_p * 1)(dst.ctypes.data)
    rc = h.aie_exec_run(ctypes.addressof(plan), None, None, inputs, outputs, threads)
    assert rc == 0, h.aie_last_error().decode()


@pytest.mark.parametrize("dtype", (np.float32, np.int64, np.float16, np.uint8))
@pytest.mark.parametrize("threads", (1, 2))
@pytest.mark.parametrize("shape", [(6401, 16), (7, 13, 5), (37, 41, 29), (3, 1, 2049), (5, 9, 3, 7)])
def test_copy_into_a_strided_slab(dtype, threads, shape):
    """src [*shape] into the middle of dst [..., last + 9]: what a Concat along
    the innermost axis writes; outer dims of odd sizes so that the walk
    carries across every dim, and the sizes exceed one task's share."""
    rng = np.random.default_rng(sum(shape))
    src = np.asarray(rng.integers(-100, 100, shape), dtype)
    dst = np.zeros((*shape[:-1], shape[-1] + 9), dtype)
    view = dst[..., 4:4 + shape[-1]]
    run_copy(dst[..., 4:], src, shape, [s // dst.itemsize for s in view.strides],
             [s // src.itemsize for s in src.strides], threads)
    want = np.zeros_like(dst)
    want[..., 4:4 + shape[-1]] = src
    assert np.array_equal(dst, want)


@pytest.mark.parametrize("threads", (1, 2))
def test_copy_strided_on_both_sides(threads):
    """A transposed source into a slab (neither side contiguous): the same
    odometer, element loop along the row."""
    src = np.arange(5 * 7 * 11, dtype=np.float32).reshape(5, 7, 11)
    view_src = src.transpose(2, 0, 1)                 # [11, 5, 7], strides (1, 77, 11)
    dst = np.zeros((11, 5, 10), np.float32)
    run_copy(dst[..., 2:], src, view_src.shape, [s // 4 for s in dst[..., 2:9].strides],
             [s // 4 for s in view_src.strides], threads)
    want = np.zeros_like(dst)
    want[..., 2:9] = view_src
    assert np.array_equal(dst, want)
