"""fuse_recurrent_input: a batch-first sequence fed to RNN/GRU/LSTM through
Transpose(perm=[1, 0, 2]) (what torch exports for batch_first=True) is read
in place instead: the recurrence takes the Transpose's input and marks
itself `_x_batch_first`, and its step reads x with batch-first strides
(engine.ops.recurrent). Without this the transposed copy is a temporary as
long as the sequence, the only part of such a plan that grows with it.
Only a Transpose whose output nothing else reads is folded."""

from __future__ import annotations

from engine.ir import Graph, Node
from engine.passes.rewrite import Chains

RECURRENT = ("RNN", "GRU", "LSTM")


def fuse_recurrent_input(graph: Graph) -> Graph:
    chains = Chains(graph)
    for node in graph.nodes:
        if node.op not in RECURRENT or node.domain not in ("", "ai.onnx") or node.attrs.get("layout", 0) != 0 \
                or node.attrs.get("_x_batch_first") or not node.inputs or not node.inputs[0]:
            continue
        tr = chains.producers.get(node.inputs[0])
        if tr is None or tr.op != "Transpose" or list(tr.attrs.get("perm") or []) != [1, 0, 2] \
                or chains.only(node.inputs[0]) is not node:
            continue
        fused = Node(node.op, node.name, [tr.inputs[0], *node.inputs[1:]], list(node.outputs),
                     {**node.attrs, "_x_batch_first": 1}, node.domain)
        chains.fused[id(node)] = fused
        chains.drop.add(id(tr))
    return chains.splice()
