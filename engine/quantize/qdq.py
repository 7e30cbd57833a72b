"""The QDQ rewrite: which tensors of which nodes are quantised, their
scales and zero points, and the QuantizeLinear/DequantizeLinear nodes that
carry them. Works on the onnx ModelProto (the output is standard ONNX).

Scheme (onnxruntime.quantization's QDQ defaults, so either runtime reads it
the same way): activations per tensor, uint8, asymmetric; weights per output
channel, int8, symmetric (zero point 0, range +-127: 2 x 127 x 127 cannot
overflow a 16-bit pair sum in a vpmaddubsw kernel); biases stay float.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

QUANTISABLE = ("Conv", "MatMul", "Gemm")
FLOAT = TensorProto.FLOAT


@dataclass
class Targets:
    """What the rewrite quantises: activation tensor names, (weight name,
    channel axis or None for per tensor), and the nodes touched."""
    activations: list[str] = field(default_factory=list)
    weights: dict[str, int | None] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)     # op type -> count


def _weight_axis(node: onnx.NodeProto, w: np.ndarray) -> int | None:
    """The axis of a weight's output channels, or None (per tensor)."""
    if node.op_type == "Conv":
        return 0 if w.ndim >= 2 else None                   # [M, C/g, k...]
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1                          # B [N, K] or [K, N]
    return 1 if w.ndim == 2 else None                       # MatMul B [K, N]; batched B: one scale


def find_targets(graph: onnx.GraphProto, float_tensors: set[str]) -> Targets:
    inits = {i.name: i for i in graph.initializer}
    t = Targets()
    for node in graph.node:
        if node.op_type not in QUANTISABLE:
            continue
        operands = [0, 1]                                   # Conv X, W; MatMul A, B; Gemm A, B (C: bias, float)
        touched = False
        for k in operands:
            if k >= len(node.input) or not node.input[k]:
                continue
            name = node.input[k]
            init = inits.get(name)
            if init is not None and init.data_type == FLOAT and k == 1:
                if name not in t.weights:
                    t.weights[name] = _weight_axis(node, numpy_helper.to_array(init))
                touched = True
            elif init is None and name in float_tensors:
                if name not in t.activations:
                    t.activations.append(name)
                touched = True
        if touched:
            t.nodes[node.op_type] = t.nodes.get(node.op_type, 0) + 1
    return t


def activation_params(lo: float, hi: float) -> tuple[np.float32, np.uint8]:
    """uint8 asymmetric scale/zero point for the range [lo, hi] (widened to
    hold 0, so that zero padding and ReLU zeros are exact)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi == lo:
        return np.float32(1.0), np.uint8(0)
    scale = np.float32((hi - lo) / 255.0)
    zp = int(np.clip(np.rint(-lo / float(scale)), 0, 255))
    return scale, np.uint8(zp)


def quantise_weight(w: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """int8 symmetric, per channel along `axis` (or per tensor): (q, scale)."""
    w = np.asarray(w, np.float32)
    if axis is None:
        amax = np.array(np.abs(w).max(initial=0.0), np.float32)
    else:
        amax = np.abs(w).max(axis=tuple(i for i in range(w.ndim) if i != axis), initial=0.0).astype(np.float32)
    scale = np.where(amax > 0, amax / np.float32(127.0), np.float32(1.0)).astype(np.float32)
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


class _Names:
    def __init__(self, graph: onnx.GraphProto):
        self.used = {i.name for i in graph.initializer} | {v.name for v in graph.input} | \
                    {v.name for v in graph.output} | {o for n in graph.node for o in n.output} | \
                    {n.name for n in graph.node}

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name


def rewrite(model: onnx.ModelProto, targets: Targets, ranges: dict[str, tuple[float, float]]) -> onnx.ModelProto:
    """A copy of `model` with every target quantised. ranges: activation
    name -> (min, max) from calibration."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    names = _Names(g)
    replace: dict[str, str] = {}         # float tensor -> its dequantised copy
    new_inits: list[TensorProto] = []
    head: list[onnx.NodeProto] = []      # DequantizeLinear of weights (inputs are initializers)

    for wname, axis in targets.weights.items():
        init = next(i for i in g.initializer if i.name == wname)
        q, scale = quantise_weight(numpy_helper.to_array(init), axis)
        qn, sn, zn, dn = (names.fresh(f"{wname}_{s}") for s in ("quantized", "scale", "zero_point", "dequantized"))
        new_inits += [numpy_helper.from_array(q, qn), numpy_helper.from_array(scale, sn),
                      numpy_helper.from_array(np.zeros(scale.shape, np.int8), zn)]
        attrs = {} if axis is None else {"axis": axis}
        head.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [dn], name=names.fresh(f"{wname}_DQ"), **attrs))
        replace[wname] = dn

    pending = {a: None for a in targets.activations}
    body: list[onnx.NodeProto] = []

    def quantise_activation(name: str) -> None:
        scale, zp = activation_params(*ranges[name])
        sn, zn, qn, dn = (names.fresh(f"{name}_{s}") for s in ("scale", "zero_point", "quantized", "dequantized"))
        new_inits.extend([numpy_helper.from_array(np.array(scale, np.float32), sn),
                          numpy_helper.from_array(np.array(zp, np.uint8), zn)])
        body.append(helper.make_node("QuantizeLinear", [name, sn, zn], [qn], name=names.fresh(f"{name}_Q")))
        body.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [dn], name=names.fresh(f"{name}_DQ")))
        replace[name] = dn
        del pending[name]

    for node in g.node:
        if node.op_type in QUANTISABLE:
            # Q/DQ right before the first consumer: its input exists by then (topological order kept).
            for k in (0, 1):
                if k < len(node.input) and node.input[k] in pending:
                    quantise_activation(node.input[k])
            for k in (0, 1):
                if k < len(node.input) and node.input[k] in replace:
                    node.input[k] = replace[node.input[k]]
        body.append(node)

    del g.node[:]
    g.node.extend(head + body)
    kept = [i for i in g.initializer if i.name not in targets.weights or _still_used(i.name, g)]
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    return out


def _uses(g: onnx.GraphProto):
    """Every tensor name a node of g, or of a subgraph in it, reads."""
    for n in g.node:
        yield from n.input
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                yield from _uses(sub)


def _still_used(name: str, g: onnx.GraphProto) -> bool:
    """A weight another (non-quantised) consumer still reads, here or in a
    subgraph's outer-scope reference, stays as well."""
    return name in set(_uses(g)) or any(o.name == name for o in g.output)
