"""fuse_rmsnorm: the decomposed RMSNorm chain over the last axis,

    x * 1 / sqrt(ReduceMean(x^2, axes=[-1], keepdims=1) + eps) * scale

with x^2 as Pow(x, 2) or Mul(x, x), the axes as attribute or (opset 18+)
input, and the division as Div(x, ·) or Reciprocal then Mul, becomes one
FusedRMSNorm node (engine.ops.fused_norm: the aie_rms_norm kernel). Only
exact chains fuse: every intermediate has one consumer and is no graph
output, the mean is over the last axis only, eps is a scalar constant and
scale a constant vector over the last axis; anything else stays as is."""

from __future__ import annotations

import numpy as np

from engine.ir import Graph, Node
from engine.passes.rewrite import Chains


def _rank(graph: Graph, name: str) -> int | None:
    info = graph.value_info.get(name) or next((t for t in graph.inputs if t.name == name), None)
    return None if info is None or info.shape is None else len(info.shape)


def _last_dim(graph: Graph, name: str):
    info = graph.value_info.get(name) or next((t for t in graph.inputs if t.name == name), None)
    return None if info is None or not info.shape else info.shape[-1]


def _other(node: Node, name: str) -> str | None:
    """The operand of a binary node that is not `name` (None: not binary or both are)."""
    if len(node.inputs) != 2 or name not in node.inputs or node.inputs[0] == node.inputs[1]:
        return None
    return node.inputs[1] if node.inputs[0] == name else node.inputs[0]


def _scalar_const(inits, name) -> float | None:
    if name not in inits or inits[name].size != 1 or inits[name].dtype != np.float32:
        return None
    return float(inits[name].reshape(-1)[0])


def _square_of(node: Node, inits) -> str | None:
    """x when node computes x^2 (Pow(x, 2) or Mul(x, x))."""
    if node.op == "Pow" and len(node.inputs) == 2 and _scalar_const(inits, node.inputs[1]) == 2.0:
        return node.inputs[0]
    if node.op == "Pow" and len(node.inputs) == 2 and node.inputs[1] in inits and inits[node.inputs[1]].size == 1 \
            and inits[node.inputs[1]].dtype.kind in "iu" and int(inits[node.inputs[1]].reshape(-1)[0]) == 2:
        return node.inputs[0]
    if node.op == "Mul" and len(node.inputs) == 2 and node.inputs[0] == node.inputs[1]:
        return node.inputs[0]
    return None


def _mean_last_axis(graph: Graph, node: Node, x: str) -> bool:
    if node.op != "ReduceMean" or node.attrs.get("keepdims", 1) != 1:
        return False
    inits = graph.initializers
    axes = node.attrs.get("axes")
    if axes is None:
        if len(node.inputs) < 2 or node.inputs[1] not in inits:
            return False
        axes = [int(a) for a in inits[node.inputs[1]].reshape(-1)]
    axes = list(axes)
    rank = _rank(graph, x)
    return axes == [-1] or (rank is not None and axes == [rank - 1])


def fuse_rmsnorm(graph: Graph) -> Graph:
    chains = Chains(graph)
    inits, drop, fused, only = chains.inits, chains.drop, chains.fused, chains.only
    for sq in graph.nodes:
        x = _square_of(sq, inits)
        if x is None or x in inits or id(sq) in drop:
            continue
        mean = only(sq.outputs[0])
        if mean is None or not _mean_last_axis(graph, mean, x):
            continue
        add = only(mean.outputs[0])
        if add is None or add.op != "Add":
            continue
        eps_name = _other(add, mean.outputs[0])
        eps = _scalar_const(inits, eps_name) if eps_name else None
        if eps is None:
            continue
        sqrt = only(add.outputs[0])
        if sqrt is None or sqrt.op != "Sqrt":
            continue
        nxt = only(sqrt.outputs[0])
        if nxt is None:
            continue
        if nxt.op == "Div" and nxt.inputs == [x, sqrt.outputs[0]]:
            chain = [sq, mean, add, sqrt, nxt]
        elif nxt.op == "Reciprocal":
            mul = only(nxt.outputs[0])
            if mul is None or mul.op != "Mul" or _other(mul, nxt.outputs[0]) != x:
                continue
            chain = [sq, mean, add, sqrt, nxt, mul]
        else:
            continue
        norm = chain[-1].outputs[0]
        last = only(norm)
        scale = _other(last, norm) if last is not None and last.op == "Mul" else None
        if scale is None or scale not in inits or inits[scale].dtype != np.float32 or inits[scale].ndim != 1:
            continue
        width = _last_dim(graph, x)
        if isinstance(width, int) and inits[scale].shape != (width,):
            continue
        chain.append(last)
        if any(id(n) in drop for n in chain):
            continue
        node = Node("FusedRMSNorm", sq.name + "/fused_rmsnorm", [x, scale], [last.outputs[0]], {"epsilon": eps})
        drop.update(id(n) for n in chain)
        fused[id(last)] = node
    return chains.splice()
