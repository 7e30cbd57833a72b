"""Fusions into kernel epilogues and fused normalisation steps.

fuse_bias_activation: Conv/Gemm/MatMul followed by an activation the GEMM
epilogue implements (Relu, Clip with constant bounds, Sigmoid, HardSwish,
HardSigmoid, LeakyRelu, Tanh, Gelu) becomes one node (attributes _act, _p0,
_p1); MatMul + Add of a constant row vector becomes MatMul with _bias.
fuse_silu: x * Sigmoid(x) after such a node becomes its SiLU epilogue.
fuse_matmul_scale: MatMul then Div/Mul by a scalar becomes the GEMM's alpha.
fuse_gelu: the erf spelling of GELU after such a node becomes its epilogue.
fuse_conv_residual: NHWC Conv + Add(skip) [+ activation] becomes one Conv
with a residual operand (after the layout pass).
fuse_layernorm: the ReduceMean-Sub-Pow-ReduceMean-Add-Sqrt-Div(-Mul-Add)
decomposition over the last axis becomes LayerNormalization.
"""

from __future__ import annotations

import numpy as np

from engine.ir import Graph, Node
from engine.kernels.abi import Unary
from engine.passes.rewrite import Chains, single_consumer


def _activation(node: Node, inits) -> tuple[int, float, float] | None:
    if node.op == "Relu":
        return Unary.RELU, 0.0, 0.0
    if node.op == "Sigmoid":
        return Unary.SIGMOID, 0.0, 0.0
    if node.op == "Tanh":
        return Unary.TANH, 0.0, 0.0
    if node.op == "HardSwish":
        return Unary.HARDSWISH, 0.0, 0.0
    if node.op == "HardSigmoid":
        return Unary.HARDSIGMOID, node.attrs.get("alpha", 0.2), node.attrs.get("beta", 0.5)
    if node.op == "LeakyRelu":
        return Unary.LEAKY_RELU, node.attrs.get("alpha", 0.01), 0.0
    if node.op == "Gelu" and node.attrs.get("approximate", "none") == "none":
        return Unary.GELU, 0.0, 0.0
    if node.op == "Clip":
        if "min" in node.attrs or "max" in node.attrs:
            return Unary.CLIP, node.attrs.get("min", -np.inf), node.attrs.get("max", np.inf)
        bounds = []
        for i, default in ((1, -np.inf), (2, np.inf)):
            name = node.inputs[i] if len(node.inputs) > i else ""
            if not name:
                bounds.append(default)
            elif name in inits and inits[name].size == 1:
                bounds.append(float(inits[name].reshape(-1)[0]))
            else:
                return None
        return Unary.CLIP, bounds[0], bounds[1]
    return None


def fuse_bias_activation(graph: Graph) -> Graph:
    outputs = {t.name for t in graph.outputs}
    inits = graph.initializers
    drop = set()
    consumers = graph.consumers()
    for node in graph.nodes:
        if node.op == "MatMul" and "_bias" not in node.attrs and "_act" not in node.attrs and node.inputs[1] in inits \
                and inits[node.inputs[1]].ndim == 2:
            add = single_consumer(consumers, outputs, node.outputs[0])
            if add is not None and add.op == "Add":
                other = add.inputs[1] if add.inputs[0] == node.outputs[0] else add.inputs[0]
                n = inits[node.inputs[1]].shape[1]
                if other in inits and inits[other].dtype == np.float32 and inits[other].shape in ((n,), (1, n)):
                    node.inputs = node.inputs[:2] + [other]
                    node.attrs["_bias"] = 1
                    node.outputs = list(add.outputs)
                    drop.add(id(add))
                    consumers = _refresh(graph, drop)
    for node in graph.nodes:
        if id(node) in drop or node.op not in ("Conv", "ConvTranspose", "Gemm", "MatMul") or "_act" in node.attrs:
            continue
        user = single_consumer(consumers, outputs, node.outputs[0])
        if user is None or id(user) in drop:
            continue
        act = _activation(user, inits)
        if act is None:
            continue
        node.attrs["_act"], node.attrs["_p0"], node.attrs["_p1"] = act
        node.outputs = [user.outputs[0]]
        drop.add(id(user))
        consumers = _refresh(graph, drop)
    graph.nodes = [n for n in graph.nodes if id(n) not in drop]
    return graph


def fuse_silu(graph: Graph) -> Graph:
    """y = x * Sigmoid(x) after a Conv/ConvTranspose/Gemm/MatMul becomes that
    node's SiLU epilogue (the x * sigmoid(x) spelling of exporters)."""
    outputs = {t.name for t in graph.outputs}
    consumers = graph.consumers()
    producers = graph.producers()
    drop = set()
    for sig in graph.nodes:
        if sig.op != "Sigmoid":
            continue
        x = sig.inputs[0]
        prod = producers.get(x)
        users = consumers.get(x, [])
        mul = single_consumer(consumers, outputs, sig.outputs[0])
        if prod is None or prod.op not in ("Conv", "ConvTranspose", "Gemm", "MatMul") or "_act" in prod.attrs \
                or mul is None or mul.op != "Mul" or sorted(mul.inputs) != sorted([x, sig.outputs[0]]) \
                or len(users) != 2 or x in outputs or id(prod) in drop:
            continue
        prod.attrs["_act"], prod.attrs["_p0"], prod.attrs["_p1"] = Unary.SILU, 0.0, 0.0
        prod.outputs = [mul.outputs[0]]
        drop.update((id(sig), id(mul)))
    graph.nodes = [n for n in graph.nodes if id(n) not in drop]
    return graph


def _const_operand(node: Node, x: str, inits) -> float | None:
    """The scalar constant node applies to x (x op c or c op x), else None."""
    if len(node.inputs) != 2 or x not in node.inputs:
        return None
    other = node.inputs[1] if node.inputs[0] == x else node.inputs[0]
    if other == x or other not in inits or inits[other].size != 1:
        return None
    return float(inits[other].reshape(-1)[0])


def fuse_gelu(graph: Graph) -> Graph:
    """x * 0.5 * (1 + erf(x / sqrt 2)) (torch's export of nn.GELU, also with
    x * (1/sqrt 2) and the products in either order) after a Conv/Gemm/MatMul
    becomes that node's exact-GELU epilogue."""
    outputs = {t.name for t in graph.outputs}
    inits = graph.initializers
    consumers = graph.consumers()
    producers = graph.producers()
    drop = set()

    def one(name):
        return single_consumer(consumers, outputs, name)

    for erf in graph.nodes:
        if erf.op != "Erf" or id(erf) in drop:
            continue
        scale = producers.get(erf.inputs[0])
        if scale is None or scale.op not in ("Div", "Mul") or one(scale.outputs[0]) is not erf:
            continue
        x = scale.inputs[0] if scale.op == "Div" else next((i for i in scale.inputs if i not in inits), None)
        c = _const_operand(scale, x, inits) if x else None
        inv_sqrt2 = 0.7071067811865476
        if c is None or not np.isclose(c if scale.op == "Mul" else 1.0 / c, inv_sqrt2, rtol=1e-6) \
                or (scale.op == "Div" and scale.inputs[0] != x):
            continue
        add = one(erf.outputs[0])
        if add is None or add.op != "Add" or _const_operand(add, erf.outputs[0], inits) != 1.0:
            continue
        prod = producers.get(x)
        if prod is None or prod.op not in ("Conv", "Gemm", "MatMul") or "_act" in prod.attrs or x in outputs:
            continue
        users = consumers.get(x, [])
        half = next((n for n in users if n is not scale and n.op == "Mul"), None)
        chain = None
        if half is not None and len(users) == 2 and _const_operand(half, x, inits) == 0.5:
            last = one(half.outputs[0])  # (x * 0.5) * (1 + erf)
            if last is not None and last.op == "Mul" and sorted(last.inputs) == sorted([half.outputs[0], add.outputs[0]]):
                chain = [scale, erf, add, half, last]
        elif half is not None and len(users) == 2 and sorted(half.inputs) == sorted([x, add.outputs[0]]):
            last = one(half.outputs[0])  # (x * (1 + erf)) * 0.5
            if last is not None and last.op == "Mul" and _const_operand(last, half.outputs[0], inits) == 0.5:
                chain = [scale, erf, add, half, last]
        if chain is None or any(id(n) in drop for n in chain):
            continue
        prod.attrs["_act"], prod.attrs["_p0"], prod.attrs["_p1"] = Unary.GELU, 0.0, 0.0
        prod.outputs = [chain[-1].outputs[0]]
        drop.update(id(n) for n in chain)
    graph.nodes = [n for n in graph.nodes if id(n) not in drop]
    return graph


def fuse_matmul_scale(graph: Graph) -> Graph:
    """MatMul followed by Div/Mul by a scalar constant (attention's
    1/sqrt(d) on Q K^T) becomes the GEMM's alpha (attribute _alpha)."""
    outputs = {t.name for t in graph.outputs}
    inits = graph.initializers
    consumers = graph.consumers()
    drop = set()
    for mm in graph.nodes:
        if mm.op != "MatMul" or any(k in mm.attrs for k in ("_act", "_bias", "_alpha")):
            continue
        user = single_consumer(consumers, outputs, mm.outputs[0])
        if user is None or user.op not in ("Div", "Mul"):
            continue
        c = _const_operand(user, mm.outputs[0], inits)
        if c is None or (user.op == "Div" and (user.inputs[0] != mm.outputs[0] or c == 0.0)):
            continue
        if inits[user.inputs[1] if user.inputs[0] == mm.outputs[0] else user.inputs[0]].dtype != np.float32:
            continue
        mm.attrs["_alpha"] = float(np.float32(1.0) / np.float32(c)) if user.op == "Div" else c
        mm.outputs = [user.outputs[0]]
        drop.add(id(user))
    graph.nodes = [n for n in graph.nodes if id(n) not in drop]
    return graph


def fuse_conv_residual(graph: Graph) -> Graph:
    """NHWC Conv -> Add(skip) [-> activation] becomes one Conv with a
    residual operand (input 4) and the activation in its epilogue: ResNet's
    and MobileNetV2's blocks. The Conv moves to the Add's place, after the
    skip tensor's producer; its own inputs were all defined earlier."""
    outputs = {t.name for t in graph.outputs}
    inits = graph.initializers
    consumers = graph.consumers()
    producers = graph.producers()
    drop, moved = set(), {}
    for add in graph.nodes:
        if add.op != "Add" or len(add.inputs) != 2 or id(add) in drop:
            continue
        for k in (0, 1):
            conv, skip = producers.get(add.inputs[k]), add.inputs[1 - k]
            if conv is None or conv.op != "Conv" or not conv.attrs.get("_nhwc") or "_act" in conv.attrs \
                    or len(conv.inputs) > 4 or skip in inits or skip == add.inputs[k] or id(conv) in drop \
                    or single_consumer(consumers, outputs, add.inputs[k]) is not add:
                continue
            last, out = add, add.outputs[0]
            act_node = single_consumer(consumers, outputs, out)
            act = _activation(act_node, inits) if act_node is not None else None
            if act is not None:
                conv.attrs["_act"], conv.attrs["_p0"], conv.attrs["_p1"] = act
                last, out = act_node, act_node.outputs[0]
                drop.add(id(act_node))
            conv.inputs = (list(conv.inputs) + [""] * 4)[:4] + [skip]
            conv.outputs = [out]
            drop.add(id(add))
            moved[id(last)] = conv
            drop.add(id(conv))
            break
    nodes = []
    for n in graph.nodes:
        if id(n) in moved:
            nodes.append(moved[id(n)])
        elif id(n) not in drop:
            nodes.append(n)
    graph.nodes = nodes
    return graph


def _refresh(graph: Graph, drop: set) -> dict:
    g = Graph(graph.name, [n for n in graph.nodes if id(n) not in drop], graph.inputs, graph.outputs,
              graph.initializers, graph.opset)
    return g.consumers()


def _scalar(inits, name, value) -> bool:
    return name in inits and inits[name].size == 1 and float(inits[name].reshape(-1)[0]) == value


def _last_axis_mean(node: Node, inits, rank_hint=None) -> bool:
    if node.op != "ReduceMean" or not node.attrs.get("keepdims", 1):
        return False
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1] in inits:
        axes = [int(a) for a in inits[node.inputs[1]].reshape(-1)]
    return axes == [-1]


def fuse_layernorm(graph: Graph) -> Graph:
    """x - mean(x) = d; d / sqrt(mean(d^2) + eps) [* gamma + beta]."""
    chains = Chains(graph)
    inits, outputs, only = chains.inits, chains.outputs, chains.only
    for mean1 in graph.nodes:
        if not _last_axis_mean(mean1, inits):
            continue
        x = mean1.inputs[0]
        subs = [n for n in chains.readers(mean1.outputs[0]) if n.op == "Sub" and n.inputs == [x, mean1.outputs[0]]]
        if len(subs) != 1:
            continue
        sub = subs[0]
        d_users = chains.readers(sub.outputs[0])
        pow_ = next((n for n in d_users if n.op == "Pow" and _scalar(inits, n.inputs[1], 2.0)), None)
        div = next((n for n in d_users if n.op == "Div" and n.inputs[0] == sub.outputs[0]), None)
        if pow_ is None or div is None or len(d_users) != 2:
            continue
        mean2 = only(pow_.outputs[0])
        if mean2 is None or not _last_axis_mean(mean2, inits):
            continue
        add = only(mean2.outputs[0])
        if add is None or add.op != "Add":
            continue
        eps_name = add.inputs[1] if add.inputs[0] == mean2.outputs[0] else add.inputs[0]
        if eps_name not in inits or inits[eps_name].size != 1:
            continue
        sqrt = only(add.outputs[0])
        if sqrt is None or sqrt.op != "Sqrt" or chains.producers.get(div.inputs[1]) is not sqrt:
            continue
        if any(n in outputs for n in (mean1.outputs[0], sub.outputs[0], pow_.outputs[0], sqrt.outputs[0])):
            continue
        chain = [mean1, sub, pow_, mean2, add, sqrt, div]
        # LayerNormalization needs a scale (a bare chain stays as is); the bias is optional
        scaled = chains.only_with_1d_const(div.outputs[0], "Mul")
        if scaled is None:
            continue
        mul, scale = scaled
        chain.append(mul)
        out, bias = mul.outputs[0], ""
        shifted = chains.only_with_1d_const(out, "Add")
        if shifted is not None:
            badd, bias = shifted
            chain.append(badd)
            out = badd.outputs[0]
        eps = float(inits[eps_name].reshape(-1)[0])
        chains.fused[id(chain[-1])] = Node("LayerNormalization", mean1.name + "/fused_layernorm",
                                           [x, scale] + ([bias] if bias else []), [out], {"axis": -1, "epsilon": eps})
        chains.drop.update(id(n) for n in chain)
    return chains.splice()
