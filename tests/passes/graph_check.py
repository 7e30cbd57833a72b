"""What the per-pass tests share: a small ONNX model built from nodes, the
engine Graph imported from it (the type every pass takes), and the check
that a rewritten Graph still computes what onnxruntime computes for the
original model. The rewritten Graph is written as an .aie and run as is, so
only the pass under test has changed it. Outputs are compared by the one
oracle helper (tests/runtime/op_oracle.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from engine import aie_format
from engine.ir import Graph
from engine.onnx_import import import_model
from engine.session import InferenceSession
from tests.runtime.op_oracle import assert_outputs_match, reference_outputs


def model(nodes, inputs: dict, outputs: dict, inits: dict | None = None, opset: int = 17,
          cond: bool = False) -> onnx.ModelProto:
    """inputs/outputs: name -> shape (float32; a dim may be a symbolic
    string); inits: name -> array; cond: add a bool scalar input `cond`
    (for if_reading)."""
    def infos(d):
        return [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in d.items()]

    extra = [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])] if cond else []
    graph = helper.make_graph(nodes, "pass_test", infos(inputs) + extra, infos(outputs),
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def graph_of(m: onnx.ModelProto) -> Graph:
    return import_model(m, "pass_test")


def ops(graph: Graph) -> Counter:
    return Counter(n.op for n in graph.nodes)


def feeds_for(m: onnx.ModelProto, seed: int = 0, batch: int = 2, cond: bool = True) -> dict[str, np.ndarray]:
    """Seeded normal float inputs (symbolic dims become `batch`), and `cond`."""
    rng = np.random.default_rng(seed)
    out = {}
    for vi in m.graph.input:
        if vi.type.tensor_type.elem_type == TensorProto.BOOL:
            out[vi.name] = np.array(cond)
            continue
        dims = [d.dim_value if d.HasField("dim_value") else batch for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = rng.standard_normal(dims).astype(np.float32)
    return out


def assert_computes_same(m: onnx.ModelProto, graph: Graph, tmp_path, feeds=None, rtol=None, atol=None) -> None:
    """The rewritten graph, run by the engine, matches onnxruntime on the
    original model (both single-threaded); a model with a `cond` input is
    run with each value, so both If branches are checked."""
    path = tmp_path / "rewritten.aie"
    aie_format.write(path, graph)
    session = InferenceSession(path, threads=1)
    has_cond = any(vi.name == "cond" for vi in m.graph.input)
    for run_feeds in [feeds] if feeds is not None else [feeds_for(m, cond=c) for c in ((True, False) if has_cond else (True,))]:
        got = session.run(None, run_feeds)
        assert_outputs_match(got, reference_outputs(m, run_feeds, "onnxruntime"), "rewritten graph", rtol, atol)


def reader_of(name: str, kind: str, out: str = "z") -> onnx.NodeProto:
    """Something else that reads `name`: kind 'node' (a Neg) or 'if' (an If
    branch: an outer-scope read; build its model with cond=True)."""
    return helper.make_node("Neg", [name], [out]) if kind == "node" else if_reading(name, out)


def if_reading(name: str, out: str, cond: str = "cond") -> onnx.NodeProto:
    """An If node whose then-branch reads `name` from the enclosing graph
    (an outer-scope use, invisible in the node's inputs) and whose
    else-branch negates it."""
    then_g = helper.make_graph([helper.make_node("Identity", [name], ["t_out"])], "then", [],
                               [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Neg", [name], ["e_out"])], "else", [],
                               [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, None)])
    return helper.make_node("If", [cond], [out], then_branch=then_g, else_branch=else_g)
