"""prepack_weights: pack constant GEMM B matrices and Conv weights once, at
conversion, into the library's micro-kernel layout.

The packed blob becomes a new initializer (uint8, 64-byte aligned in the
.aie) read through the node's input 3, and the node records the ISA it was
packed for in `_packed_isa`. The raw weights stay in the file too: a host
whose selected ISA differs (or a forced AIE_ISA) packs again from them when
it builds a plan, instead of failing. Weights shared by several nodes with
the same packing are packed once.

GEMM weights of nodes marked bf16 (engine.passes.precision) are packed in
bf16 for aie_gemm_bf16 (`_packed_bf16`): that layout is the same on every
level, so when only such nodes read a weight its fp32 copy is dropped (the
node keeps B's shape in `_b_shape`) and the .aie shrinks to about half.
A group-1 Conv marked bf16 gets its bf16 blob (engine.kernels.conv_lowp: one
layout for every ISA, so it carries no `_packed_isa`); when only such convs
read a weight its fp32 copy is dropped too (the node keeps the weight's shape
in `_w_shape`): every level runs CONV_BF16 from that blob.
"""

from __future__ import annotations

import numpy as np

from engine.errors import KernelError
from engine.ir import Graph
from engine.kernels.conv_lowp import pack_conv_bf16
from engine.kernels.gemm_lowp import pack_b_bf16
from engine.packing import conv_params, host_isa, pack_conv, pack_gemm_b, winograd_wins


def _winograd(node, w: np.ndarray, group: int) -> bool:
    """Winograd packing for 3x3 stride-1 dilation-1 convs where the library
    prefers it by channel counts (the spatial size is not known here; a plan
    for a size where it does not pay packs the GEMM layout again)."""
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        return False
    if any(int(v) != 1 for v in list(node.attrs.get("strides", [1, 1])) + list(node.attrs.get("dilations", [1, 1]))):
        return False
    K, Cg = w.shape[:2]
    return winograd_wins(conv_params(N=1, H=0, W=0, C=Cg * group, K=K, R=3, S=3, stride_h=1, stride_w=1, dil_h=1,
                                     dil_w=1, groups=group))


def _pack(node, inits) -> tuple[tuple, np.ndarray | None] | None:
    if len(node.inputs) < 2 or node.inputs[1] not in inits:
        return None
    w = inits[node.inputs[1]]
    if w.dtype != np.float32:
        return None
    if node.op in ("Conv", "ConvTranspose") and w.ndim in (3, 4):
        group = int(node.attrs.get("group", 1))
        transposed = node.op == "ConvTranspose"
        if transposed and w.ndim != 4:
            return None
        wino = not transposed and _winograd(node, w, group)
        key = (node.inputs[1], node.op, group, wino)
        return key, (lambda: pack_conv(w.reshape(w.shape[:2] + (1,) + w.shape[2:]) if w.ndim == 3 else w, group,
                                       transposed, winograd=wino))
    if node.op == "Gemm" and w.ndim == 2:
        trans = int(node.attrs.get("transB", 0))
        return (node.inputs[1], "gemm", trans), (lambda: pack_gemm_b(w, bool(trans)))
    if node.op == "MatMul" and w.ndim == 2:
        return (node.inputs[1], "gemm", 0), (lambda: pack_gemm_b(w, False))
    return None


def _pack_conv_bf16(node, inits) -> tuple[tuple, np.ndarray | None] | None:
    """A group-1 Conv marked `_precision: bf16`: its weights rounded to bf16
    in the bf16 GEMM's layout, the same at every ISA level (no _packed_isa)."""
    if node.op != "Conv" or node.attrs.get("_precision") != "bf16" or int(node.attrs.get("group", 1)) != 1:
        return None
    if len(node.inputs) < 2 or node.inputs[1] not in inits:
        return None
    w = inits[node.inputs[1]]
    if w.dtype != np.float32 or w.ndim not in (3, 4) or w.size == 0:
        return None
    return (node.inputs[1], "conv_bf16"), (lambda: pack_conv_bf16(w.reshape(w.shape[:2] + (1,) + w.shape[2:])
                                                                   if w.ndim == 3 else w))


def _bf16_gemm(node, inits) -> tuple[tuple, np.ndarray | None] | None:
    if node.attrs.get("_precision") != "bf16" or node.op not in ("Gemm", "MatMul"):
        return None
    if len(node.inputs) < 2 or node.inputs[1] not in inits:
        return None
    w = inits[node.inputs[1]]
    if w.dtype != np.float32 or w.ndim != 2:
        return None
    trans = int(node.attrs.get("transB", 0)) if node.op == "Gemm" else 0
    return (node.inputs[1], "gemm_bf16", trans), (lambda: pack_b_bf16(w, trans_b=bool(trans)).buffer)


def _drop_fp32_copies(graph: Graph, bf16_names: set[str], bf16_nodes: set[int]) -> None:
    """A weight read only by nodes that run on its bf16 blob (GEMM B, Conv
    weights; ids in bf16_nodes), each as its input 1 alone, needs no fp32 copy."""
    readers = graph.consumers()
    for name in bf16_names:
        nodes = readers.get(name, [])
        if any(o.name == name for o in graph.outputs) or not all(
                id(n) in bf16_nodes and n.inputs[1] == name and sum(i == name for i in n.inputs) == 1
                for n in nodes):
            continue
        for n in nodes:
            n.attrs["_w_shape" if n.op == "Conv" else "_b_shape"] = list(graph.initializers[name].shape)
            n.inputs[1] = ""
        del graph.initializers[name]


def prepack_weights(graph: Graph) -> Graph:
    isa = host_isa()
    inits = graph.initializers
    done: dict[tuple, str] = {}
    bf16_names: set[str] = set()
    bf16_nodes: set[int] = set()
    for node in graph.nodes:
        job = _pack_conv_bf16(node, inits) or _bf16_gemm(node, inits) or _pack(node, inits)
        if job is None or len(node.inputs) > 5:
            continue
        key, pack = job
        if key not in done:
            try:
                blob = pack()
            except KernelError:
                continue  # the lowering reports what is wrong with these weights, with the node's name
            name = f"{node.inputs[1]}/packed"
            while name in inits:
                name += "_"
            inits[name] = blob
            done[key] = name
        ins = (list(node.inputs) + [""] * 4)
        ins[3] = done[key]
        node.inputs = ins[:max(4, len(node.inputs))]
        if key[1] in ("gemm_bf16", "conv_bf16"):
            if key[1] == "gemm_bf16":
                node.attrs["_packed_bf16"] = 1
            bf16_names.add(node.inputs[1])
            bf16_nodes.add(id(node))
        else:
            node.attrs["_packed_isa"] = isa
    _drop_fp32_copies(graph, bf16_names, bf16_nodes)
    return graph
