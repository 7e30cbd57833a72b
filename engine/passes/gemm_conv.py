"""gemm_as_pointwise_conv: run Gemm with constant weights as a 1x1 convolution.

Y = A @ B + c (transA = 0, alpha = 1, beta = 1, c a vector of N) is a 1x1
stride-1 convolution over M "pixels" of K channels: A [M, K] viewed as NHWC
[M, 1, 1, K], weights B^T as [N, K, 1, 1], bias c. The library runs that on
its direct kernel, which broadcasts A's rows in place instead of packing them
into GEMM panels first (the packing is a large share of a GEMM whose N is
only a few 32-wide panels, e.g. the digits classifier's 64 x 128 x 784 at
batch 64); with fewer rows than a tile (batch 1) the convolution falls back
to the same packed-B GEMM a Gemm node would run. Two Reshapes (views, no
copy) frame the Conv; the fused activation (_act/_p0/_p1) moves to it.
Runs after to_kernel_layout (the Conv is emitted already NHWC) and before
prepack_weights (which packs its weights like any Conv's).
"""

from __future__ import annotations

import numpy as np

from engine.ir import Graph, Node, node_reads

_MOVABLE_ATTRS = {"transA", "transB", "alpha", "beta", "_act", "_p0", "_p1"}


def _weights(node: Node, inits) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(W [N, K, 1, 1], bias [N] or None) when node is a Gemm this pass can
    rewrite exactly, else None."""
    a = node.attrs
    if node.op != "Gemm" or node.domain or set(a) - _MOVABLE_ATTRS or len(node.inputs) < 2 or len(node.outputs) != 1:
        return None
    if a.get("transA", 0) or float(a.get("alpha", 1.0)) != 1.0:
        return None
    b = inits.get(node.inputs[1])
    if b is None or b.dtype != np.float32 or b.ndim != 2 or 0 in b.shape:
        return None
    w = b if a.get("transB", 0) else b.T  # [N, K]
    n = w.shape[0]
    bias = None
    if len(node.inputs) > 2 and node.inputs[2]:
        c = inits.get(node.inputs[2])
        if c is None or c.dtype != np.float32 or float(a.get("beta", 1.0)) != 1.0 or c.shape not in ((n,), (1, n)):
            return None
        bias = c.reshape(n)
    return np.ascontiguousarray(w).reshape(w.shape + (1, 1)), bias


def gemm_as_pointwise_conv(graph: Graph) -> Graph:
    inits = graph.initializers
    names = set(inits) | {t.name for t in graph.inputs} | {t.name for t in graph.outputs}
    for n in graph.nodes:
        names.update(node_reads(n))  # outer-scope reads of If/Loop/Scan bodies too
        names.update(n.outputs)

    def unique(base: str) -> str:
        name, k = base, 1
        while name in names:
            name, k = f"{base}.{k}", k + 1
        names.add(name)
        return name

    nodes = []
    for node in graph.nodes:
        job = _weights(node, inits)
        if job is None:
            nodes.append(node)
            continue
        w, bias = job
        N, K = w.shape[:2]
        base = node.name or node.outputs[0]
        w_name = unique(f"{base}/pointwise_w")
        inits[w_name] = w
        conv_in = [w_name]
        if bias is not None:
            b_name = unique(f"{base}/pointwise_b")
            inits[b_name] = np.ascontiguousarray(bias)
            conv_in.append(b_name)
        shape_in, shape_out = unique(f"{base}/nhwc_shape"), unique(f"{base}/out_shape")
        inits[shape_in] = np.array([-1, 1, 1, K], np.int64)
        inits[shape_out] = np.array([-1, N], np.int64)
        x4, y4 = unique(f"{base}/nhwc"), unique(f"{base}/conv_nhwc")
        attrs = {"kernel_shape": [1, 1], "_nhwc": 1}
        attrs.update({k: v for k, v in node.attrs.items() if k in ("_act", "_p0", "_p1")})
        nodes.append(Node("Reshape", unique(f"{base}/as_pixels"), [node.inputs[0], shape_in], [x4]))
        nodes.append(Node("Conv", unique(f"{base}/pointwise"), [x4] + conv_in, [y4], attrs))
        nodes.append(Node("Reshape", unique(f"{base}/as_rows"), [y4, shape_out], list(node.outputs)))
    graph.nodes = nodes
    return graph
