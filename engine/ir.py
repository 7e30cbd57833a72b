"""The one graph type every converter stage works on.

A Graph is a topologically ordered list of Nodes over named values, plus its
constant tensors (initializers, numpy arrays) and the declared inputs and
outputs. Subgraphs (If branches) are Graphs stored in a node's attributes and
may read names of the enclosing graph. Passes take a Graph and return one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# ONNX TensorProto element type <-> numpy dtype: the subset the engine runs.
ONNX_TO_NUMPY: dict[int, np.dtype] = {
    1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8), 4: np.dtype(np.uint16),
    5: np.dtype(np.int16), 6: np.dtype(np.int32), 7: np.dtype(np.int64), 9: np.dtype(np.bool_),
    10: np.dtype(np.float16), 11: np.dtype(np.float64), 12: np.dtype(np.uint32), 13: np.dtype(np.uint64),
}
NUMPY_TO_ONNX: dict[np.dtype, int] = {v: k for k, v in ONNX_TO_NUMPY.items()}
ONNX_TYPE_NAMES = {
    1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
    10: "float16", 11: "double", 12: "uint32", 13: "uint64",
}

Dim = int | str | None


def type_string(dtype: np.dtype) -> str:
    """onnxruntime's spelling of a tensor type: 'tensor(float)'."""
    return f"tensor({ONNX_TYPE_NAMES[NUMPY_TO_ONNX[np.dtype(dtype)]]})"


# The inverse of type_string: what a session's get_inputs() reports -> numpy.
TYPE_STRING_TO_NUMPY: dict[str, np.dtype] = {type_string(d): d for d in ONNX_TO_NUMPY.values()}


@dataclass
class TensorInfo:
    name: str
    dtype: np.dtype
    shape: tuple[Dim, ...] | None  # None: rank unknown


@dataclass
class Node:
    op: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""


@dataclass
class Graph:
    name: str
    nodes: list[Node]
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    initializers: dict[str, np.ndarray]
    opset: int
    value_info: dict[str, TensorInfo] = field(default_factory=dict)

    def consumers(self) -> dict[str, list[Node]]:
        """name -> nodes reading it (subgraph reads count for the If node)."""
        out: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node_reads(node):
                out.setdefault(name, []).append(node)
        return out

    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs if o}


def node_reads(node: Node) -> list[str]:
    """Every name a node reads, including outer-scope names its subgraphs use."""
    names = [i for i in node.inputs if i]
    for value in node.attrs.values():
        if isinstance(value, Graph):
            names.extend(outer_reads(value))
    return names


def outer_reads(graph: Graph) -> list[str]:
    """Names a subgraph reads that it does not define itself."""
    defined = set(graph.initializers) | {t.name for t in graph.inputs}
    reads: list[str] = []
    for node in graph.nodes:
        reads.extend(n for n in node_reads(node) if n not in defined)
        defined.update(node.outputs)
    reads.extend(t.name for t in graph.outputs if t.name not in defined)
    return reads
