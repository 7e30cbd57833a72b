"""The helper the per-family op tests share: one ONNX node, run through the
engine and through onnx.reference (the oracle the ONNX node suite itself is
generated with), outputs compared. Not a conftest.py (see engine_vs_ort)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from engine.ir import NUMPY_TO_ONNX
from engine.session import InferenceSession

RTOL, ATOL = 1e-4, 1e-5


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
             opset: int = 23, constants: dict | None = None, output_names=None, rtol=RTOL, atol=ATOL,
             oracle=None):
    """Run one node through the engine and the oracle (onnx.reference, or
    `oracle(feeds) -> list of arrays` where the reference is known to be
    wrong); assert every output matches (shape, dtype, values). Returns the
    engine's outputs."""
    from onnx.reference import ReferenceEvaluator

    attrs = attrs or {}
    constants = constants or {}
    model = single_node_model(op_type, inputs, attrs, n_outputs, opset, constants=constants,
                              output_names=output_names)
    path = tmp_path / f"{op_type}.onnx"
    feeds = {n: np.asarray(v) for n, v in inputs.items() if v is not None and n not in constants}
    want = oracle(feeds) if oracle else ReferenceEvaluator(model).run(None, feeds)
    # The output types the checker requires, taken from the oracle's answer.
    del model.graph.output[:]
    model.graph.output.extend(helper.make_tensor_value_info(o, NUMPY_TO_ONNX[np.asarray(w).dtype], np.shape(w))
                              for o, w in zip([o for o in (output_names or [f"y{i}" for i in range(n_outputs)]) if o],
                                              want))
    onnx.save(model, str(path))
    got = InferenceSession(path, threads=1).run(None, feeds)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        assert g.shape == w.shape, f"{op_type} output {k}: shape {g.shape}, expected {w.shape}"
        assert g.dtype == w.dtype, f"{op_type} output {k}: dtype {g.dtype}, expected {w.dtype}"
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                       equal_nan=True, err_msg=f"{op_type} output {k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{op_type} output {k}")
    return got
