"""Dead-node elimination."""

from __future__ import annotations

from engine.ir import Graph, node_reads


def eliminate_dead_nodes(graph: Graph) -> Graph:
    """Drop nodes none of whose outputs reach a graph output, and unused
    initializers."""
    needed = {t.name for t in graph.outputs}
    keep = []
    for node in reversed(graph.nodes):
        if any(o in needed for o in node.outputs if o):
            keep.append(node)
            needed.update(node_reads(node))
    graph.nodes = keep[::-1]
    graph.initializers = {k: v for k, v in graph.initializers.items() if k in needed}
    return graph
