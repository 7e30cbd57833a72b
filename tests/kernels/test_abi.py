"""The op vocabulary has one definition (kernels/include/aie_ops.def): the
committed Python module generated from it must be current, and must agree
with what the C compiler made of it (values, names, struct layouts)."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.kernels import abi
from engine.kernels._lib import lib

ROOT = Path(__file__).resolve().parents[2]
ENUMS = [(abi.DType, "AIE_DT_"), (abi.Loc, "AIE_LOC_"), (abi.Op, "AIE_X_"), (abi.Unary, "AIE_U_"),
         (abi.Binary, "AIE_B_"), (abi.Reduce, "AIE_R_"), (abi.ScatterReduction, "AIE_SR_")]


@pytest.fixture(scope="module")
def c_abi():
    h = lib()
    h.aie_abi_value.argtypes, h.aie_abi_value.restype = [ctypes.c_char_p], ctypes.c_int64
    h.aie_abi_sizeof.argtypes, h.aie_abi_sizeof.restype = [ctypes.c_char_p], ctypes.c_int64
    h.aie_abi_offsetof.argtypes, h.aie_abi_offsetof.restype = [ctypes.c_char_p, ctypes.c_char_p], ctypes.c_int64
    h.aie_abi_unary_flags.argtypes, h.aie_abi_unary_flags.restype = [ctypes.c_int64], ctypes.c_int
    h.aie_exec_op_name.argtypes, h.aie_exec_op_name.restype = [ctypes.c_int64], ctypes.c_char_p
    return h


def test_committed_module_is_current(tmp_path):
    out = tmp_path / "abi.py"
    subprocess.run([sys.executable, str(ROOT / "kernels" / "gen_abi.py"), str(out)], check=True)
    committed = ROOT / "engine" / "kernels" / "abi.py"
    assert out.read_text() == committed.read_text(), (
        "engine/kernels/abi.py is stale: run `make -C kernels abi` and commit the result")


@pytest.mark.parametrize("enum_cls,prefix", ENUMS, ids=[p for _, p in ENUMS])
def test_enum_values_match_c(c_abi, enum_cls, prefix):
    for member in enum_cls:
        assert c_abi.aie_abi_value(f"{prefix}{member.name}".encode()) == member.value, member


def test_counts_and_constants_match_c(c_abi):
    assert c_abi.aie_abi_value(b"AIE_MAX_DIMS") == abi.MAX_DIMS
    assert c_abi.aie_abi_value(b"AIE_X_COUNT") == max(abi.Op) + 1
    assert c_abi.aie_abi_value(b"AIE_U_COUNT") == max(abi.Unary) + 1
    assert c_abi.aie_abi_value(b"AIE_X_NO_SUCH_OP") == -(1 << 63)


def test_op_names_match_c_name_table(c_abi):
    for op in abi.Op:
        assert c_abi.aie_exec_op_name(op).decode() == abi.OP_NAMES[op], op
    assert c_abi.aie_exec_op_name(max(abi.Op) + 1) == b"?"


def test_unary_flags_match_c(c_abi):
    vec, epi = c_abi.aie_abi_value(b"AIE_UF_VEC"), c_abi.aie_abi_value(b"AIE_UF_EPI")
    for u in abi.Unary:
        flags = c_abi.aie_abi_unary_flags(u)
        assert bool(flags & vec) == (u in abi.UNARY_VECTOR), u
        assert bool(flags & epi) == (u in abi.UNARY_EPILOGUE), u


@pytest.mark.parametrize("c_name", list(abi.STRUCTS))
def test_struct_layout_matches_c(c_abi, c_name):
    cls = abi.STRUCTS[c_name]
    tail = getattr(cls, "TAIL", None)
    # A flexible array member adds no size in C; offsetof gives where it starts.
    assert c_abi.aie_abi_sizeof(c_name.encode()) == ctypes.sizeof(cls), c_name
    for field, _ in cls._fields_:
        assert c_abi.aie_abi_offsetof(c_name.encode(), field.encode()) == getattr(cls, field).offset, field
    if tail:
        assert c_abi.aie_abi_offsetof(c_name.encode(), tail.encode()) == ctypes.sizeof(cls)


def test_epilogue_codes_stored_in_aie_files_keep_their_values():
    # engine.passes.fusion stores these codes in converted .aie files (node
    # attribute _act): renumbering them would change what old files compute.
    assert {u.name: int(u) for u in sorted(abi.UNARY_EPILOGUE)} == {
        "IDENTITY": 0, "RELU": 1, "CLIP": 2, "GELU": 3, "GELU_TANH": 4, "SIGMOID": 5, "SILU": 6, "HARDSWISH": 7,
        "HARDSIGMOID": 8, "LEAKY_RELU": 9, "TANH": 10}


def test_step_params_round_trip_through_words():
    p = abi.MatmulStep(M=3, N=4, K=5, trans_b=1, act=abi.Unary.GELU, workspace_bytes=64, batch_rank=2)
    words = p.words() + [7, 8, 1, 2, 3, 4]
    assert len(p.words()) == ctypes.sizeof(abi.MatmulStep) // 8
    q = abi.MatmulStep.from_words(words)
    assert (q.M, q.N, q.K, q.trans_b, q.act, q.workspace_bytes, q.batch_rank) == (3, 4, 5, 1, 3, 64, 2)
    conv = abi.ConvStep(conv=abi.Conv2dParams(N=1, H=8, W=8, C=3, K=16, R=3, S=3, groups=1), act=1)
    assert abi.ConvStep.from_words(conv.words()).conv.K == 16


def test_every_opcode_names_an_int64_parameter_struct():
    # The executor reads every step's words through this struct; a missing
    # entry would mean a step decoded by hand-computed offsets again.
    assert set(abi.OP_PARAMS) == set(abi.Op)
    assert all(issubclass(cls, abi.Int64Struct) for cls in abi.OP_PARAMS.values())


def test_tail_words_follow_the_head():
    p = abi.CopyStep(esize=4, rank=2)
    assert p.words([3, 5], [5, 1], [1, 3]) == [4, 2, 3, 5, 5, 1, 1, 3]


def _run_one_step(c_abi, op, words, out):
    """aie_exec_run on a plan of one step writing outputs[0]; (rc, error)."""
    step = abi.StepRecord(op=op, t0=0, nt=1, i0=0, ni=len(words), f0=0, nf=0, threads=1)
    tensor = abi.TensorRecord(kind=abi.Loc.OUTPUT, index=0, offset=0)
    iparams = (ctypes.c_int64 * max(len(words), 1))(*words)
    fparams = (ctypes.c_double * 1)()
    step_tensors = (ctypes.c_int64 * 1)(0)
    plan = abi.ExecPlan(n_steps=1, steps=ctypes.addressof(step), n_tensors=1, tensors=ctypes.addressof(tensor),
                        step_tensors=ctypes.addressof(step_tensors), iparams=ctypes.addressof(iparams),
                        fparams=ctypes.addressof(fparams))
    outputs = (ctypes.c_void_p * 1)(out.ctypes.data)
    c_abi.aie_exec_run.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int]
    c_abi.aie_exec_run.restype = ctypes.c_int
    c_abi.aie_last_error.restype = ctypes.c_char_p
    rc = c_abi.aie_exec_run(ctypes.addressof(plan), None, None, None, outputs, 1)
    return rc, c_abi.aie_last_error().decode() if rc else ""


def test_executor_rejects_a_step_shorter_than_its_struct(c_abi):
    out = np.zeros(3, np.int32)
    words = abi.FillStep(esize=4, n=3, value=7).words()
    assert _run_one_step(c_abi, abi.Op.FILL, words, out) == (0, "")
    assert out.tolist() == [7, 7, 7]
    rc, err = _run_one_step(c_abi, abi.Op.FILL, words[:2], out)
    assert rc != 0 and "step 0 (fill): 2 parameter words, its struct has 3" in err, err
