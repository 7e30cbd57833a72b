"""fuse_depthwise_pointwise: an NHWC depthwise Conv whose output only a 1x1
stride-1 Conv reads becomes one ConvDwPw node (MobileNetV2's depthwise ->
project pair), with the 1x1 stride-1 Conv before it too when the depthwise
conv is its only reader (the block's expand conv), lowered to CONV_DW_PW
(aie_conv2d_dw_pw): the expanded and depthwise tensors stay in per-thread
scratch instead of making a round trip through memory, and the result is
bitwise that of the separate convs.

ConvDwPw inputs: 0 x, 1-3 the depthwise conv's W, B, packed blob, 4-6 the
project conv's W, B, packed blob, 7 its residual, 8-10 the expand conv's W,
B, packed blob ("" where absent; no 8-10 without an expand conv). The window
attributes (pads, strides, dilations, kernel_shape, group, auto_pad) and
`_packed_isa` are the depthwise conv's, with its activation as
`_dw_act`/`_dw_p0`/`_dw_p1`; `_act`/`_p0`/`_p1` and `_pw_packed_isa` are the
project conv's, `_ex_act`/`_ex_p0`/`_ex_p1` and `_ex_packed_isa` the expand
conv's. Runs after prepack_weights (the blobs exist) and only on float32
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


def _act_attrs(node: Node, prefix: str) -> dict:
    """A fused conv's activation under the block's name for it."""
    return {f"_{prefix}act": node.attrs.get("_act", 0), f"_{prefix}p0": node.attrs.get("_p0", 0.0),
            f"_{prefix}p1": node.attrs.get("_p1", 0.0)}


def fuse_depthwise_pointwise(graph: Graph) -> Graph:
    outputs = {t.name for t in graph.outputs}
    inits = graph.initializers
    consumers = graph.consumers()
    producers = graph.producers()
    fused, drop = {}, set()
    for dw in graph.nodes:
        if not _fp32_nhwc_conv(dw) or not _depthwise(dw, inits):
            continue
        pw = single_consumer(consumers, outputs, dw.outputs[0])
        if not _fp32_nhwc_conv(pw) or id(pw) in fused or not _pointwise(pw, inits) \
                or pw.inputs[0] != dw.outputs[0] or dw.outputs[0] in pw.inputs[1:] \
                or inits[pw.inputs[1]].shape[1] != inits[dw.inputs[1]].shape[0]:
            continue
        ex = producers.get(dw.inputs[0])
        if not (_fp32_nhwc_conv(ex) and _pointwise(ex, inits) and len(ex.inputs) <= 4
                and single_consumer(consumers, outputs, dw.inputs[0]) is dw
                and inits[ex.inputs[1]].shape[0] == inits[dw.inputs[1]].shape[0]):
            ex = None
        d_in = (list(dw.inputs) + [""] * 4)[:4]
        p_in = (list(pw.inputs) + [""] * 5)[:5]
        inputs = d_in + p_in[1:4] + [p_in[4]]
        attrs = {k: v for k, v in dw.attrs.items() if k in _WINDOW}
        attrs.update(_nhwc=1, **_act_attrs(dw, "dw_"))
        attrs.update({k: pw.attrs[k] for k in ("_act", "_p0", "_p1") if k in pw.attrs})
        tags = [(dw, "_packed_isa"), (pw, "_pw_packed_isa")]
        if ex is not None:
            inputs[0] = ex.inputs[0]
            inputs += (list(ex.inputs) + [""] * 4)[1:4]
            attrs.update(_act_attrs(ex, "ex_"))
            tags.append((ex, "_ex_packed_isa"))
            drop.add(id(ex))
        attrs.update({tag: node.attrs["_packed_isa"] for node, tag in tags if "_packed_isa" in node.attrs})
        # at the project conv's place: its residual's producer may come after the other convs
        fused[id(pw)] = Node("ConvDwPw", "+".join(n.name for n in (ex, dw, pw) if n is not None), inputs,
                             list(pw.outputs), attrs)
        drop.add(id(dw))
    if fused:
        graph.nodes = [fused.get(id(n), n) for n in graph.nodes if id(n) not in drop]
    return graph
