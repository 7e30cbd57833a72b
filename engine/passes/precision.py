"""mark_bf16: choose the nodes that compute in bf16 when a model is
converted with precision bf16 (`ai-engine convert --precision bf16`).

It sets the node attribute `_precision = "bf16"` on the matrix products with
a constant weight, which is where bf16 pays (AMX / AVX-512 BF16 do 2-16x the
fp32 FLOPs) and where rounding the inputs to 8 significant bits costs a
bounded, measured error (kernels/include/aie_gemm_lowp.h):

- MatMul with a constant 2-D fp32 B and no folded scale (`_alpha` 1);
- Gemm with a constant 2-D fp32 B, transA 0, alpha 1, and no C or a C that
  is a bias row ([N] / [1, N], beta 1) or is ignored (beta 0): what
  GEMM_BF16_PACKED's epilogue applies exactly as fp32 does;
- Conv with group 1 (lowered by engine.ops.nn when it has a bf16 kernel;
  fp32 otherwise) whose shape passes the cost rule below.

The cost rule for a Conv with a constant weight [K, C, R, S]: bf16 when its
GEMM depth C*R*S >= 32 and K >= 24, else fp32. The bf16 conv converts every
input value it reads (im2col in bf16) and pads depth to the AMX tile depth
(32) and K to the tile width (32); the products it saves grow with K per
converted value. Below one full k-chunk of depth, or with K under 3/4 of a
tile width, conversion and padding cost more than the products save:
measured on MobileNetV2 (1 thread, per step, bf16 vs fp32): 1x1 16->96
@112 1.43 vs 0.54 ms, 24->144 @56 0.78 vs 0.61, 3x3 3->32 @224 0.66 vs
0.30, 32->16 @112 0.42 vs 0.28 (all slower in bf16); 144->24 @56 0.36 vs
0.44, 32->192 @28 0.25 vs 0.31, 192->32 @28 0.12 vs 0.16 (faster).

- FusedAttention (engine.passes.fuse_attention): its two products between
  activations (Q Kt, P V) run on the bf16 GEMM, Kt and V packed at run time
  (ATTENTION_BF16); its scale, mask and softmax stay fp32.

Everything else stays fp32: softmax, normalisations, reductions, unfused
products between two activations, depthwise convolutions,
convolutions the cost rule leaves in fp32. Each
op's lowering reads the attribute; prepack_weights then stores the marked
GEMM weights packed in bf16. It runs after the fusions (which set `_alpha`,
`_bias`, `_act`) and before to_kernel_layout (gemm_as_pointwise_conv leaves a
marked Gemm alone, so it runs on the bf16 GEMM); it is not one of
DEFAULT_PASSES: fp32 stays the default, unchanged. Subgraph (If/Loop)
bodies are left in fp32.
"""

from __future__ import annotations

import numpy as np

from engine.ir import Graph, Node

BF16 = "bf16"


def _const_b(node: Node, inits: dict) -> np.ndarray | None:
    if len(node.inputs) < 2 or node.inputs[1] not in inits:
        return None
    w = inits[node.inputs[1]]
    return w if w.dtype == np.float32 and w.ndim == 2 else None


def _gemm_takes_bf16(node: Node, inits: dict) -> bool:
    w = _const_b(node, inits)
    if w is None or int(node.attrs.get("transA", 0)) or float(node.attrs.get("alpha", 1.0)) != 1.0:
        return False
    c = node.inputs[2] if len(node.inputs) > 2 else ""
    beta = float(node.attrs.get("beta", 1.0))
    if not c or beta == 0.0:
        return True
    n = w.shape[0] if int(node.attrs.get("transB", 0)) else w.shape[1]
    return beta == 1.0 and c in inits and tuple(inits[c].shape) in ((n,), (1, n))


# The cost rule (module docstring): the smallest GEMM depth (C*R*S) and
# output-channel count at which a Conv gains from bf16.
CONV_MIN_DEPTH = 32
CONV_MIN_K = 24


def _conv_takes_bf16(node: Node, inits: dict) -> bool:
    if int(node.attrs.get("group", 1)) != 1:
        return False
    w = inits.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if w is None or w.ndim < 3:
        return True
    return int(np.prod(w.shape[1:])) >= CONV_MIN_DEPTH and w.shape[0] >= CONV_MIN_K


def _takes_bf16(node: Node, inits: dict) -> bool:
    if node.op == "MatMul":
        return _const_b(node, inits) is not None and float(node.attrs.get("_alpha", 1.0)) == 1.0
    if node.op == "Gemm":
        return _gemm_takes_bf16(node, inits)
    if node.op == "Conv":
        return _conv_takes_bf16(node, inits)
    return node.op == "FusedAttention"


def mark_bf16(graph: Graph) -> Graph:
    for node in graph.nodes:
        if _takes_bf16(node, graph.initializers):
            node.attrs["_precision"] = BF16
    return graph


def _bf16_kernel_conv(node: Node, inits: dict) -> bool:
    """A Conv that lowers onto the bf16 kernel (engine.ops.nn.lower_conv):
    marked bf16, NHWC, one group, weights constant (or their bf16 blob)."""
    ins = list(node.inputs) + [""] * 4
    return (node.op == "Conv" and node.attrs.get("_precision") == BF16 and bool(node.attrs.get("_nhwc"))
            and int(node.attrs.get("group", 1)) == 1 and (ins[1] in inits or ins[3] in inits))


def mark_bf16_activations(graph: Graph) -> Graph:
    """Keep activations in bf16 between bf16 convolutions (ResNet's chains):
    a bf16 Conv's output is written in bf16 (attribute `_y_bf16`; its fused
    bias, activation and residual applied in fp32 first) when it is not a
    graph output and every reader is a bf16 Conv reading it as its input
    (0) or fused residual (4). Those convs read it as is instead of
    converting it, and the arena holds it in 2-byte elements
    (aie_conv2d_bf16_io). Everything else reads and writes fp32 as before:
    the boundaries need no conversion step. Runs after the fusions and the
    layout pass, which decide the readers."""
    inits = graph.initializers
    outputs = {t.name for t in graph.outputs}
    consumers = graph.consumers()
    for node in graph.nodes:
        if not _bf16_kernel_conv(node, inits) or not node.outputs or node.outputs[0] in outputs:
            continue
        y = node.outputs[0]
        readers = consumers.get(y, [])
        if readers and all(_bf16_kernel_conv(r, inits) and all(i in (0, 4) for i, name in enumerate(r.inputs)
                                                                 if name == y) for r in readers):
            node.attrs["_y_bf16"] = 1
    return graph


# Nodes engine.passes.qdq_fuse writes: a quantised model is int8 by its graph.
INT8_OPS = frozenset({"QConvU8S8", "QGemmU8S8", "QLutU8", "QAddU8"})


def precision_of(graph: Graph) -> str:
    """The model's precision as stored: "int8" when any node computes on the
    int8 kernels, "bf16" when any node computes in bf16, else "fp32"."""
    if any(n.op in INT8_OPS for n in graph.nodes):
        return "int8"
    return BF16 if any(n.attrs.get("_precision") == BF16 for n in graph.nodes) else "fp32"
