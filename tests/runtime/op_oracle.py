"""The one oracle helper of the tests: run a model through the engine and
through a reference, compare every output.

The reference is onnxruntime for whole models and graphs; where it cannot
load or run one (an op or opset it lacks), onnx.reference, the evaluator the
ONNX node suite itself is generated with, and single-op tests use that one
first (check_op says why). Outputs are compared in float64 with a tolerance chosen by
dtype (TOLERANCES), integers and bools exactly. check_op builds the
single-node model an op test needs; assert_matches_ort checks a session
against onnxruntime on a model file. Every correct-answer test of the engine
uses these; tests/runtime/test_op_coverage.py reads the op names that
check_op calls name."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from engine.ir import NUMPY_TO_ONNX
from engine.session import InferenceSession

# (rtol, atol) by output dtype: about 2^10 ulps of relative error, since a
# kernel may sum in another order (blocked, vectorised) than the reference.
TOLERANCES = {np.dtype(np.float16): (1e-2, 1e-3), np.dtype(np.float32): (1e-4, 1e-5),
              np.dtype(np.float64): (1e-9, 1e-12)}
RTOL, ATOL = TOLERANCES[np.dtype(np.float32)]


def assert_outputs_match(got: list, want: list, what: str, rtol: float | None = None,
                         atol: float | None = None) -> None:
    """Same count, shapes and dtypes; floats within the dtype's tolerance (or
    the given one), compared in float64; everything else exactly."""
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{what} output {k}: shape {g.shape}, expected {w.shape}"
        assert g.dtype == w.dtype, f"{what} output {k}: dtype {g.dtype}, expected {w.dtype}"
        if w.dtype.kind in "fc":
            r, a = TOLERANCES.get(w.dtype, (RTOL, ATOL))
            np.testing.assert_allclose(g.astype(np.complex128 if w.dtype.kind == "c" else np.float64),
                                       w.astype(np.complex128 if w.dtype.kind == "c" else np.float64),
                                       rtol=r if rtol is None else rtol, atol=a if atol is None else atol,
                                       equal_nan=True, err_msg=f"{what} output {k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{what} output {k}")


def reference_outputs(model: onnx.ModelProto, feeds: dict, oracle: str = "auto") -> list[np.ndarray]:
    """The reference's outputs: oracle 'onnxruntime', 'onnx.reference', or
    'auto' (onnxruntime, else onnx.reference where onnxruntime refuses the
    model). Single-threaded, so the answer does not depend on the host."""
    if oracle in ("auto", "onnxruntime"):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        try:
            sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
            return sess.run(None, feeds)
        except (ort.capi.onnxruntime_pybind11_state.Fail, ort.capi.onnxruntime_pybind11_state.NotImplemented,
                ort.capi.onnxruntime_pybind11_state.InvalidGraph):
            if oracle == "onnxruntime":
                raise
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, feeds)


def single_node_model(op_type: str, inputs: dict, attrs: dict, n_outputs: int, opset: int, *,
                      constants: dict | None = None, output_names=None) -> onnx.ModelProto:
    """inputs: name -> array (graph inputs; None for an absent optional input);
    constants: name -> array (initializers, known at conversion time)."""
    constants = constants or {}
    names = list(inputs)
    outs = output_names or [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, [n if (inputs[n] is not None or n in constants) else "" for n in names],
                            outs, **attrs)
    graph_inputs = [helper.make_tensor_value_info(n, NUMPY_TO_ONNX[np.asarray(v).dtype], np.shape(v))
                    for n, v in inputs.items() if v is not None and n not in constants]
    graph_outputs = [helper.make_empty_tensor_value_info(o) for o in outs if o]
    inits = [onnx.numpy_helper.from_array(np.asarray(v), n) for n, v in constants.items()]
    graph = helper.make_graph([node], f"{op_type}_test", graph_inputs, graph_outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def check_op(tmp_path, op_type: str, inputs: dict, attrs: dict | None = None, *, n_outputs: int = 1,
             opset: int = 23, constants: dict | None = None, output_names=None, rtol=None, atol=None,
             oracle="onnx.reference"):
    """Run one node through the engine and the oracle; assert every output
    matches (shape, dtype, values). oracle: a name for reference_outputs,
    or `oracle(feeds) -> list of arrays` where the references are known to
    be wrong. Returns the engine's outputs.

    Single ops default to onnx.reference, the spec's own evaluator:
    onnxruntime (1.32) differs from it (and from the node suite) on some
    corners these tests pin, e.g. GridSample cubic with border padding,
    Attention's softcap with a fully masked row, MaxUnpool with output_shape."""
    attrs = attrs or {}
    constants = constants or {}
    model = single_node_model(op_type, inputs, attrs, n_outputs, opset, constants=constants,
                              output_names=output_names)
    path = tmp_path / f"{op_type}.onnx"
    feeds = {n: np.asarray(v) for n, v in inputs.items() if v is not None and n not in constants}
    want = oracle(feeds) if callable(oracle) else reference_outputs(model, feeds, oracle)
    # The output types the checker requires, taken from the oracle's answer.
    del model.graph.output[:]
    model.graph.output.extend(helper.make_tensor_value_info(o, NUMPY_TO_ONNX[np.asarray(w).dtype], np.shape(w))
                              for o, w in zip([o for o in (output_names or [f"y{i}" for i in range(n_outputs)]) if o],
                                              want))
    onnx.save(model, str(path))
    got = InferenceSession(path, threads=1).run(None, feeds)
    assert_outputs_match(got, want, op_type, rtol, atol)
    return got


# onnxruntime's answers by (model bytes, feeds): the zoo tests check the same
# model on the same seeded inputs through several engine paths (.onnx/.aie,
# 1/2 threads), and single-threaded onnxruntime on ResNet-18 at batch 64 takes
# seconds. Keyed by content, so a rewritten model file is never answered from
# the cache; bounded, the outputs being kept.
_ORT_ANSWERS: OrderedDict[bytes, list] = OrderedDict()
_ORT_ANSWERS_MAX = 64


def _ort_answer(model_path, feeds: dict) -> list:
    key = hashlib.sha256(Path(model_path).read_bytes())
    for name in sorted(feeds):
        v = np.ascontiguousarray(feeds[name])
        key.update(f"{name}|{v.dtype.str}|{v.shape}|".encode())
        key.update(v.tobytes())
    digest = key.digest()
    if digest in _ORT_ANSWERS:
        _ORT_ANSWERS.move_to_end(digest)
    else:
        _ORT_ANSWERS[digest] = reference_outputs(onnx.load(str(model_path)), feeds, "onnxruntime")
        if len(_ORT_ANSWERS) > _ORT_ANSWERS_MAX:
            _ORT_ANSWERS.popitem(last=False)
    return _ORT_ANSWERS[digest]


def assert_matches_ort(model_path, feeds: dict, session) -> None:
    """Run feeds through the engine session and onnxruntime; compare."""
    assert_outputs_match(session.run(None, feeds), _ort_answer(model_path, feeds), str(model_path))
