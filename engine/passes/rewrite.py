"""What the fusion passes share: finding the one node that reads a value,
and splicing fused nodes into the graph in place of the chains they replace."""

from __future__ import annotations

from engine.ir import Graph, Node


def single_consumer(consumers: dict[str, list[Node]], outputs: set[str], name: str) -> Node | None:
    """The only node reading `name`, or None when several (or none) read it or
    it is a graph output: a chain may only be fused where nothing else needs
    its intermediate values."""
    users = consumers.get(name, [])
    return users[0] if len(users) == 1 and name not in outputs else None


def splice(graph: Graph, fused: dict[int, Node], drop: set[int]) -> Graph:
    """Each fused node takes its chain's last node's place (keyed by id in
    `fused`); the chains' other nodes (ids in `drop`) go."""
    if fused:
        graph.nodes = [fused.get(id(n), n) for n in graph.nodes if id(n) not in drop or id(n) in fused]
    return graph
