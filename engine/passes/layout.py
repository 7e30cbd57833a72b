"""to_kernel_layout: run convolution/pooling chains in NHWC.

The conv and pool kernels are NHWC (kernels/include/aie_conv.h explains
why); ONNX models are NCHW. Transposing around every Conv would cost a copy
per layer, so this pass lays whole chains out in NHWC: a Conv/ConvTranspose
(constant 4-D weights) or a 2-D MaxPool/AveragePool starts a chain, and ops
that do not care about layout continue it when they read a chain tensor:
element-wise unary ops, broadcasting binary ops (a constant operand is
re-laid out once here, a runtime rank-4 operand transposed in), Concat/Split
(axis remapped), Resize (scales remapped), global pooling. Such a node gets
`_nhwc = 1` and writes `<name>/nhwc`; the NCHW tensor `<name>` is produced
by a Transpose only where something outside a chain (or a graph output)
reads it. A Transpose reading a chain tensor composes its permutation with
the layout change instead, so no extra copy is made at a Reshape/Transpose
head.
"""

from __future__ import annotations

import numpy as np

from engine.ir import Graph, Node, node_reads

TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]
AXIS_TO_NHWC = {0: 0, 1: 3, 2: 1, 3: 2}

UNARY = {"Relu", "Sigmoid", "Tanh", "Clip", "HardSwish", "HardSigmoid", "LeakyRelu", "Elu", "Selu", "Gelu", "Exp",
         "Log", "Neg", "Abs", "Sqrt", "Erf", "Identity", "Softplus", "Reciprocal", "Floor", "Ceil", "Round", "Sign",
         "Mish", "Softsign", "Celu", "ThresholdedRelu"}
BINARY = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"}
# Resize coordinate modes the library's NHWC resize implements (aie_layout.h).
RESIZE_COORDS = {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"}


class _Layout:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.inits = graph.initializers
        self.ranks = {t.name: len(t.shape) for t in [*graph.inputs, *graph.value_info.values(), *graph.outputs]
                      if t.shape is not None}
        self.nhwc: dict[str, str] = {}  # NCHW name -> its NHWC twin
        self.missing_nchw: set[str] = set()  # produced only in NHWC so far
        self.names = {n for node in graph.nodes for n in (*node.inputs, *node.outputs)} | set(self.inits)
        self.nodes: list[Node] = []

    def unique(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}.{k}", k + 1
        self.names.add(name)
        return name

    def rank(self, name: str) -> int | None:
        if name in self.inits:
            return self.inits[name].ndim
        return 4 if name in self.nhwc else self.ranks.get(name)

    # -- conversions --
    def as_nhwc(self, name: str, rank4: bool = False) -> str | None:
        """The NHWC twin of a rank-4 operand (made if needed); None if the
        operand's rank is not known to be <= 4 (rank4: the caller knows it is 4)."""
        if name in self.nhwc:
            return self.nhwc[name]
        if name in self.inits:
            c = self.inits[name]
            if c.ndim > 4:
                return None
            if c.size == 1:
                return name  # a scalar broadcasts the same in any layout
            new = self.unique(name + "/nhwc")
            self.inits[new] = np.ascontiguousarray(c.reshape((1,) * (4 - c.ndim) + c.shape).transpose(TO_NHWC))
            self.nhwc[name] = new
            return new
        if self.ranks.get(name) != 4 and not rank4:
            return None
        new = self.unique(name + "/nhwc")
        self.nodes.append(Node("Transpose", new + "/transpose", [name], [new], {"perm": list(TO_NHWC)}))
        self.nhwc[name] = new
        return new

    def ensure_nchw(self, name: str) -> None:
        if name in self.missing_nchw:
            self.missing_nchw.discard(name)
            self.nodes.append(Node("Transpose", name + "/to_nchw", [self.nhwc[name]], [name], {"perm": list(TO_NCHW)}))

    def emit_nhwc(self, node: Node, inputs: list[str], attrs: dict | None = None) -> None:
        outs = []
        for o in node.outputs:
            if not o:
                outs.append(o)
                continue
            new = self.unique(o + "/nhwc")
            self.nhwc[o] = new
            self.missing_nchw.add(o)
            outs.append(new)
        node.inputs, node.outputs = inputs, outs
        node.attrs.update(attrs or {})
        node.attrs["_nhwc"] = 1
        self.nodes.append(node)

    # -- which nodes join a chain --
    def starts_chain(self, node: Node) -> bool:
        a = node.attrs
        if node.op in ("Conv", "ConvTranspose"):
            w = self.inits.get(node.inputs[1]) if len(node.inputs) > 1 else None
            if w is None or w.ndim != 4 or w.dtype != np.float32:
                return False
            return node.op == "Conv" or (a.get("output_shape") is None and a.get("auto_pad", "NOTSET") == "NOTSET")
        if node.op == "QConvU8S8":  # engine.passes.qdq_fuse: int8 weights, packed
            return True
        if node.op in ("MaxPool", "AveragePool"):
            return (len(a.get("kernel_shape", [])) == 2 and not a.get("storage_order", 0)
                    and not (len(node.outputs) > 1 and node.outputs[1]))
        return False

    def per_tensor(self, node: Node) -> bool:
        """A Q/DQ with scalar constant parameters, a BatchNormalization or a
        QLutU8 (their per-channel values follow the channel axis): element-wise in any layout."""
        if node.op == "QLutU8":  # engine.passes.qdq_fuse: a table per channel, channels last when NHWC
            return True
        if node.op == "BatchNormalization":
            return not node.attrs.get("training_mode", 0) and all(i in self.inits for i in node.inputs[1:5])
        return node.op in ("QuantizeLinear", "DequantizeLinear") and not node.attrs.get("block_size", 0) and all(
            not i or (i in self.inits and self.inits[i].size == 1) for i in node.inputs[1:])

    def rewrite(self, node: Node) -> bool:
        """Append node in NHWC form and return True, or return False."""
        ins = node.inputs
        if self.starts_chain(node):
            # 4-D weights / a 2-D window: the input is rank 4.
            self.emit_nhwc(node, [self.as_nhwc(ins[0], rank4=True), *ins[1:]])
            return True
        if not ins or ins[0] not in self.nhwc and node.op not in BINARY | {"Concat", "QAddU8"}:
            return False
        if node.op in ("GlobalAveragePool", "GlobalMaxPool") or node.op in UNARY or self.per_tensor(node):
            self.emit_nhwc(node, [self.nhwc[ins[0]], *ins[1:]])
            return True
        if node.op in BINARY or node.op in ("Concat", "QAddU8"):  # QAddU8: engine.passes.qdq_fuse
            if not any(i in self.nhwc for i in ins):
                return False
            if node.op == "Concat" and any(self.rank(i) != 4 for i in ins):
                return False
            if any(self.rank(i) is None or self.rank(i) > 4 for i in ins):
                return False
            new = [self.as_nhwc(i) for i in ins]
            if any(n is None for n in new):
                return False
            attrs = {}
            if node.op == "Concat":
                attrs["axis"] = AXIS_TO_NHWC[node.attrs["axis"] % 4]
            self.emit_nhwc(node, new, attrs)
            return True
        if node.op == "Split":
            axis = AXIS_TO_NHWC[node.attrs.get("axis", 0) % 4]
            self.emit_nhwc(node, [self.nhwc[ins[0]], *ins[1:]], {"axis": axis})
            return True
        if node.op == "Resize":
            return self.rewrite_resize(node)
        if node.op == "Transpose":
            perm = node.attrs.get("perm") or [3, 2, 1, 0]
            node.inputs = [self.nhwc[ins[0]]]
            node.attrs["perm"] = [TO_NCHW[p] for p in perm]
            self.nodes.append(node)
            return True
        return False

    def rewrite_resize(self, node: Node) -> bool:
        a = node.attrs
        if a.get("coordinate_transformation_mode", "half_pixel") not in RESIZE_COORDS or a.get("axes") is not None \
                or a.get("antialias", 0) or a.get("mode", "nearest") not in ("nearest", "linear"):
            return False
        ins = list(node.inputs)
        for k in (2, 3):  # scales, sizes: constants of 4 elements, re-ordered
            if k < len(ins) and ins[k]:
                c = self.inits.get(ins[k])
                if c is None or c.size != 4:
                    return False
                new = self.unique(ins[k] + "/nhwc")
                self.inits[new] = np.ascontiguousarray(c.reshape(4)[TO_NHWC])
                ins[k] = new
        ins[0] = self.nhwc[ins[0]]
        self.emit_nhwc(node, ins)
        return True


def to_kernel_layout(graph: Graph) -> Graph:
    lay = _Layout(graph)
    for node in graph.nodes:
        if lay.rewrite(node):
            continue
        for name in node_reads(node):
            lay.ensure_nchw(name)
        lay.nodes.append(node)
    for t in graph.outputs:
        lay.ensure_nchw(t.name)
    graph.nodes = lay.nodes
    return graph
