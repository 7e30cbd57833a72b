"""fuse_depthwise_pointwise: an NHWC depthwise Conv whose output only a 1x1
stride-1 Conv reads becomes one ConvDwPw node (MobileNet's depthwise ->
project pair), lowered to CONV_DW_PW (aie_conv2d_dw_pw): the depthwise
output stays in per-thread scratch tiles instead of making a round trip
through memory, and the result is bitwise that of the two convs.

ConvDwPw inputs: 0 x, 1-3 the depthwise conv's W, B, packed blob, 4-6 the
1x1 conv's W, B, packed blob, 7 the 1x1's residual ("" where absent). The
window attributes (pads, strides, dilations, kernel_shape, group, auto_pad)
and `_packed_isa` are the depthwise conv's, with its activation as
`_dw_act`/`_dw_p0`/`_dw_p1`; `_act`/`_p0`/`_p1` and `_pw_packed_isa` are the
1x1's. Runs after prepack_weights (both blobs exist) and only on float32
convs: a bf16 conv keeps its own kernel.
"""

from __future__ import annotations

from engine.ir import Graph, Node
from engine.passes.rewrite import single_consumer

_WINDOW = ("pads", "strides", "dilations", "kernel_shape", "group", "auto_pad")


def _fp32_nhwc_conv(node: Node | None) -> bool:
    return node is not None and node.op == "Conv" and bool(node.attrs.get("_nhwc")) \
        and node.attrs.get("_precision", "fp32") == "fp32" and not node.attrs.get("_y_bf16")


def _depthwise(node: Node, inits) -> bool:
    w = inits.get(node.inputs[1]) if len(node.inputs) > 1 else None
    return w is not None and w.ndim == 4 and w.shape[1] == 1 and w.shape[0] > 1 \
        and int(node.attrs.get("group", 1)) == w.shape[0] and len(node.inputs) <= 4


def _pointwise(node: Node, inits) -> bool:
    w = inits.get(node.inputs[1]) if len(node.inputs) > 1 else None
    a = node.attrs
    return w is not None and w.ndim == 4 and w.shape[2:] == (1, 1) and int(a.get("group", 1)) == 1 \
        and all(s == 1 for s in a.get("strides", [1, 1])) and all(p == 0 for p in a.get("pads", [0] * 4)) \
        and a.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")


def fuse_depthwise_pointwise(graph: Graph) -> Graph:
    outputs = {t.name for t in graph.outputs}
    inits = graph.initializers
    consumers = graph.consumers()
    fused, drop = {}, set()
    for dw in graph.nodes:
        if not _fp32_nhwc_conv(dw) or not _depthwise(dw, inits):
            continue
        pw = single_consumer(consumers, outputs, dw.outputs[0])
        if not _fp32_nhwc_conv(pw) or id(pw) in fused or not _pointwise(pw, inits) \
                or pw.inputs[0] != dw.outputs[0] or dw.outputs[0] in pw.inputs[1:] \
                or inits[pw.inputs[1]].shape[1] != inits[dw.inputs[1]].shape[0]:
            continue
        d_in = (list(dw.inputs) + [""] * 4)[:4]
        p_in = (list(pw.inputs) + [""] * 5)[:5]
        attrs = {k: v for k, v in dw.attrs.items() if k in _WINDOW}
        attrs.update(_nhwc=1, _dw_act=dw.attrs.get("_act", 0), _dw_p0=dw.attrs.get("_p0", 0.0),
                     _dw_p1=dw.attrs.get("_p1", 0.0))
        for k in ("_act", "_p0", "_p1"):
            if k in pw.attrs:
                attrs[k] = pw.attrs[k]
        if "_packed_isa" in dw.attrs:
            attrs["_packed_isa"] = dw.attrs["_packed_isa"]
        if "_packed_isa" in pw.attrs:
            attrs["_pw_packed_isa"] = pw.attrs["_packed_isa"]
        # at the 1x1's place: its residual's producer may come after the depthwise conv
        fused[id(pw)] = Node("ConvDwPw", f"{dw.name}+{pw.name}", d_in + p_in[1:4] + [p_in[4]], list(pw.outputs),
                             attrs)
        drop.add(id(dw))
    if fused:
        graph.nodes = [fused.get(id(n), n) for n in graph.nodes if id(n) not in drop]
    return graph
