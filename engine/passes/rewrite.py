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


class Chains:
    """One fusion pass's working state over a graph: its initializers, graph
    outputs and producers, the readers of a value (`readers`, `only`: the one
    reader), and the nodes fused or dropped so far (`splice` applies them)."""

    def __init__(self, graph: Graph):
        self.graph, self.inits = graph, graph.initializers
        self.outputs = {t.name for t in graph.outputs}
        self.producers = graph.producers()
        self._consumers = graph.consumers()
        self.drop: set[int] = set()
        self.fused: dict[int, Node] = {}

    def readers(self, name: str) -> list[Node]:
        return self._consumers.get(name, [])

    def only(self, name: str) -> Node | None:
        return single_consumer(self._consumers, self.outputs, name)

    def only_with_1d_const(self, name: str, op: str) -> tuple[Node, str] | None:
        """The one reader of `name` if it is `op` with a 1-D initializer as
        its other operand: (that node, the initializer's name)."""
        node = self.only(name)
        if node is None or node.op != op:
            return None
        const = node.inputs[1] if node.inputs[0] == name else node.inputs[0]
        return (node, const) if const in self.inits and self.inits[const].ndim == 1 else None

    def splice(self) -> Graph:
        return splice(self.graph, self.fused, self.drop)


def splice(graph: Graph, fused: dict[int, Node], drop: set[int]) -> Graph:
    """Each fused node takes its chain's last node's place (keyed by id in
    `fused`); the chains' other nodes (ids in `drop`) go."""
    if fused:
        graph.nodes = [fused.get(id(n), n) for n in graph.nodes if id(n) not in drop or id(n) in fused]
    return graph
