"""ONNX model -> engine.ir.Graph.

Loads with the onnx package (external data resolved relative to the model
file), runs the checker and shape inference, resolves the default-domain
opset (11-21 supported) and converts attributes to plain Python values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from engine.errors import ConversionError, UnsupportedOperatorError
from engine.ir import ONNX_TO_NUMPY, Graph, Node, TensorInfo

# 11-21 is the supported range; older and newer default-domain opsets are
# accepted too because every op resolves to the highest rule <= the model's
# opset and an op without such a rule fails cleanly (the ONNX node suite in
# tests/runtime checks the answers at every opset it ships).
MIN_OPSET, MAX_OPSET = 7, onnx.defs.onnx_opset_version()


def load_model(path: str | Path) -> onnx.ModelProto:
    path = Path(path)
    if not path.exists():
        raise ConversionError("file not found", where=str(path))
    try:
        model = onnx.load(str(path), load_external_data=True)
    except Exception as exc:  # onnx raises DecodeError, OSError, ValueError...
        raise ConversionError(f"cannot parse ONNX model: {exc}", where=str(path)) from None
    return model


def import_model(model: onnx.ModelProto, where: str = "<model>") -> Graph:
    opset = default_opset(model, where)
    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        raise ConversionError(f"invalid ONNX model: {exc}", where=where) from None
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:
        # Shape inference is an optimisation aid only; the planner derives
        # every shape itself from the concrete inputs.
        pass
    return import_graph(model.graph, opset, where)


def default_opset(model: onnx.ModelProto, where: str) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            version = int(imp.version)
            break
    else:
        raise ConversionError("model imports no default-domain opset", where=where)
    if not MIN_OPSET <= version <= MAX_OPSET:
        raise UnsupportedOperatorError(
            f"opset {version} is not supported", where=where,
            hint=f"supported default-domain opsets: {MIN_OPSET}..{MAX_OPSET}; re-export or convert with onnx.version_converter",
        )
    return version


def tensor_info(vi: onnx.ValueInfoProto, where: str) -> TensorInfo:
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise UnsupportedOperatorError(f"value {vi.name!r} is not a tensor (sequences/maps are not supported)", where=where)
    elem = tt.elem_type
    if elem not in ONNX_TO_NUMPY:
        raise UnsupportedOperatorError(
            f"value {vi.name!r} has element type {onnx.TensorProto.DataType.Name(elem) if elem else 'UNDEFINED'}",
            where=where, hint="supported: float, double, float16, int8-64, uint8-64, bool")
    shape = None
    if tt.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
    return TensorInfo(vi.name, ONNX_TO_NUMPY[elem], shape)


def to_array(tensor: onnx.TensorProto, where: str) -> np.ndarray:
    if tensor.data_type not in ONNX_TO_NUMPY:
        raise UnsupportedOperatorError(
            f"constant {tensor.name!r} has element type {onnx.TensorProto.DataType.Name(tensor.data_type)}", where=where)
    try:
        return np.asarray(numpy_helper.to_array(tensor), order="C")
    except Exception as exc:
        raise ConversionError(f"cannot read constant {tensor.name!r}: {exc}", where=where) from None


def attribute_value(attr: onnx.AttributeProto, opset: int, where: str) -> Any:
    A = onnx.AttributeProto
    if attr.type == A.FLOAT:
        return float(attr.f)
    if attr.type == A.INT:
        return int(attr.i)
    if attr.type == A.STRING:
        return attr.s.decode("utf-8", "replace")
    if attr.type == A.TENSOR:
        return to_array(attr.t, where)
    if attr.type == A.GRAPH:
        return import_graph(attr.g, opset, where)
    if attr.type == A.FLOATS:
        return [float(v) for v in attr.floats]
    if attr.type == A.INTS:
        return [int(v) for v in attr.ints]
    if attr.type == A.STRINGS:
        return [s.decode("utf-8", "replace") for s in attr.strings]
    raise UnsupportedOperatorError(f"attribute {attr.name!r} has an unsupported type {A.AttributeType.Name(attr.type)}",
                                   where=where)


# The com.microsoft ops onnxruntime.quantization writes in QOperator format
# that engine/ops/qoperator.py runs; any other contrib op is refused here.
MICROSOFT_OPS = frozenset({"QGemm", "QLinearAdd", "QLinearMul", "QLinearSoftmax", "QLinearGlobalAveragePool"})


def import_graph(g: onnx.GraphProto, opset: int, where: str) -> Graph:
    inits = {t.name: to_array(t, f"{where}: initializer {t.name}") for t in g.initializer}
    for sparse in g.sparse_initializer:
        raise UnsupportedOperatorError(f"sparse initializer {sparse.values.name!r}", where=where)
    nodes = []
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}"
        if n.domain not in ("", "ai.onnx") and not (n.domain == "com.microsoft" and n.op_type in MICROSOFT_OPS):
            raise UnsupportedOperatorError(
                f"operator {n.domain}.{n.op_type} (node {name!r}) is outside the default ONNX domain", where=where)
        attrs = {a.name: attribute_value(a, opset, f"{where}: node {name}") for a in n.attribute}
        for a in n.attribute:
            if a.ref_attr_name:
                raise UnsupportedOperatorError(f"node {name!r}: attribute references (functions) are not supported", where=where)
        nodes.append(Node(n.op_type, name, list(n.input), list(n.output), attrs, n.domain))
    inputs = [tensor_info(v, where) for v in g.input if v.name not in inits]
    outputs = [tensor_info(v, where) for v in g.output]
    value_info = {}
    for v in g.value_info:
        try:
            value_info[v.name] = tensor_info(v, where)
        except UnsupportedOperatorError:
            continue
    return Graph(g.name or "graph", nodes, inputs, outputs, inits, opset, value_info)


def import_file(path: str | Path) -> Graph:
    return import_model(load_model(path), str(path))


def import_signature(path: str | Path) -> Graph:
    """Only the declared inputs and outputs of the ONNX file at `path` (no
    nodes, no weights read): what a spec check needs of a model it does not
    convert."""
    path = Path(path)
    try:
        g = onnx.load(str(path), load_external_data=False).graph
    except Exception as exc:  # onnx raises DecodeError, OSError, ValueError...
        raise ConversionError(f"cannot parse ONNX model: {exc}", where=str(path)) from None
    if not g.output:  # what any bytes protobuf reads as empty are, an empty file among them
        raise ConversionError("not an ONNX model: its graph has no outputs", where=str(path))
    inits = {t.name for t in g.initializer}
    return Graph(g.name or "graph", [], [tensor_info(v, str(path)) for v in g.input if v.name not in inits],
                 [tensor_info(v, str(path)) for v in g.output], {}, 0, {})
