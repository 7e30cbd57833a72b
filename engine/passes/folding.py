"""Constant folding and BatchNormalization folding.

Constant folding evaluates every node whose inputs are all initializers by
running it through the executor (engine.plan.fold_node), so a folded value
is bit-identical to what inference would compute. Shape-dependent chains
(Shape -> Gather -> Concat -> Reshape) fold per concrete shape at plan time.
"""

from __future__ import annotations

import numpy as np

from engine.errors import ConversionError
from engine.ir import Graph, node_reads
from engine.passes.rewrite import Chains
from engine.plan import NO_FOLD, Value, fold_node

# Folding a node that would materialise more than this many bytes (e.g. an
# Expand of a scalar to a huge tensor) would bloat the file: keep it a step.
FOLD_LIMIT = 64 << 20


def fold_constants(graph: Graph) -> Graph:
    consts = dict(graph.initializers)
    graph_outputs = {t.name for t in graph.outputs}
    kept = []
    for node in graph.nodes:
        foldable = (node.op not in NO_FOLD and all(not i or i in consts for i in node.inputs)
                    and not any(isinstance(v, Graph) for v in node.attrs.values()))
        if foldable:
            try:
                ins = [Value(consts[i].shape, consts[i].dtype, const=consts[i]) if i else None for i in node.inputs]
                outs = fold_node(node, ins, graph.opset)
            except ConversionError:
                foldable = False  # leave it: the planner reports it with context
            else:
                if all(o is not None and o.nbytes <= FOLD_LIMIT for o in outs):
                    for name, v in zip(node.outputs, outs):
                        consts[name] = np.asarray(v.const, order="C")
                    continue
        kept.append(node)
    graph.nodes = kept
    # node_reads: a folded value an If/Loop branch reads from this scope is needed too.
    needed = {i for n in kept for i in node_reads(n)} | graph_outputs
    graph.initializers = {k: v for k, v in consts.items() if k in needed or k in graph.initializers}
    # Outputs that became constants still need a producer: Identity of the constant.
    return graph


def fold_batchnorm(graph: Graph) -> Graph:
    """Conv -> BatchNormalization (inference, constant params, Conv output
    read only by the BN) becomes one Conv with scaled weights and bias."""
    chains = Chains(graph)
    inits, drop = chains.inits, chains.drop
    for bn in graph.nodes:
        if bn.op != "BatchNormalization" or bn.attrs.get("training_mode", 0) or len([o for o in bn.outputs if o]) > 1:
            continue
        conv = chains.producers.get(bn.inputs[0])
        if conv is None or conv.op != "Conv" or chains.only(bn.inputs[0]) is not bn:
            continue
        params = bn.inputs[1:5]
        if not all(p in inits for p in params) or conv.inputs[1] not in inits or \
                (len(conv.inputs) > 2 and conv.inputs[2] and conv.inputs[2] not in inits):
            continue
        scale, shift, mean, var = (inits[p].astype(np.float64) for p in params)
        s = scale / np.sqrt(var + bn.attrs.get("epsilon", 1e-5))
        w = inits[conv.inputs[1]].astype(np.float64)
        b = inits[conv.inputs[2]].astype(np.float64) if len(conv.inputs) > 2 and conv.inputs[2] else np.zeros(w.shape[0])
        wname, bname = conv.name + "/bn_weight", conv.name + "/bn_bias"
        inits[wname] = (w * s.reshape(-1, *([1] * (w.ndim - 1)))).astype(np.float32)
        inits[bname] = ((b - mean) * s + shift).astype(np.float32)
        conv.inputs = [conv.inputs[0], wname, bname]
        conv.outputs = [bn.outputs[0]]
        drop.add(id(bn))
    graph.nodes = [n for n in graph.nodes if id(n) not in drop]
    return graph
