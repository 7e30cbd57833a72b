"""fuse_attention: scaled-dot-product attention spelled as exporters write it,

    MatMul(Q, Kt) [Div/Mul by a scalar, or already the GEMM's _alpha from
    fuse_matmul_scale] [Add(mask)] -> Softmax(last axis) -> MatMul(·, V)

with 4-D Q [B, H, M, dk], Kt [B, H, dk, L], V [B, H, L, dv], becomes one
FusedAttention node (engine.ops.fused_attention: one executor step that
never holds more than one score tile per worker). Only exact chains fuse:
known ranks and matching inner dims, every intermediate with one consumer
and no graph output, the softmax over the last axis; anything else stays."""

from __future__ import annotations

import numpy as np

from engine.ir import Graph, Node
from engine.passes.rewrite import Chains

_EPILOGUE = ("_act", "_bias")


def _shape(graph: Graph, name: str):
    info = graph.value_info.get(name) or next((t for t in graph.inputs if t.name == name), None)
    return None if info is None else info.shape


def _scalar(inits, node: Node, x: str) -> float | None:
    if len(node.inputs) != 2 or x not in node.inputs or node.inputs[0] == node.inputs[1]:
        return None
    other = node.inputs[1] if node.inputs[0] == x else node.inputs[0]
    if other not in inits or inits[other].size != 1 or inits[other].dtype != np.float32:
        return None
    if node.op == "Div" and node.inputs[0] != x:
        return None
    c = float(inits[other].reshape(-1)[0])
    if node.op == "Div":
        return None if c == 0.0 else float(np.float32(1.0) / np.float32(c))
    return c


def _same(a, b) -> bool:
    """Two dims are provably equal (equal ints or the same symbol)."""
    return a is not None and a == b


def fuse_attention(graph: Graph) -> Graph:
    chains = Chains(graph)
    inits, drop, fused, only = chains.inits, chains.drop, chains.fused, chains.only
    for mm1 in graph.nodes:
        if mm1.op != "MatMul" or any(k in mm1.attrs for k in _EPILOGUE) or id(mm1) in drop:
            continue
        q, kt = mm1.inputs[0], mm1.inputs[1]
        qs, ks = _shape(graph, q), _shape(graph, kt)
        if qs is None or ks is None or len(qs) != 4 or len(ks) != 4 or not _same(qs[3], ks[2]):
            continue
        alpha, chain, cur = float(mm1.attrs.get("_alpha", 1.0)), [mm1], only(mm1.outputs[0])
        if cur is not None and cur.op in ("Div", "Mul") and "_alpha" not in mm1.attrs:
            c = _scalar(inits, cur, mm1.outputs[0])
            if c is None:
                continue
            alpha, chain = c, chain + [cur]
            cur = only(cur.outputs[0])
        mask = None
        if cur is not None and cur.op == "Add" and len(cur.inputs) == 2 and cur.inputs[0] != cur.inputs[1]:
            scores = chain[-1].outputs[0]
            mask = cur.inputs[1] if cur.inputs[0] == scores else cur.inputs[0]
            ms = inits[mask].shape if mask in inits else _shape(graph, mask)
            if ms is None or len(ms) > 4:
                continue
            chain.append(cur)
            cur = only(cur.outputs[0])
        if cur is None or cur.op != "Softmax":
            continue
        axis = cur.attrs.get("axis", -1 if graph.opset >= 13 else 1)
        if axis not in (-1, 3):
            continue
        chain.append(cur)
        mm2 = only(cur.outputs[0])
        if mm2 is None or mm2.op != "MatMul" or mm2.inputs[0] != cur.outputs[0] \
                or any(k in mm2.attrs for k in _EPILOGUE + ("_alpha",)):
            continue
        v = mm2.inputs[1]
        vs = _shape(graph, v)
        if vs is None or len(vs) != 4 or not _same(ks[3], vs[2]):
            continue
        chain.append(mm2)
        if any(id(n) in drop for n in chain):
            continue
        node = Node("FusedAttention", mm1.name + "/fused_attention", [q, kt, v] + ([mask] if mask else []),
                    [mm2.outputs[0]], {"alpha": alpha})
        drop.update(id(n) for n in chain)
        fused[id(mm2)] = node
    return chains.splice()
