"""detector: a small YOLO-style detector, 3x160x160 -> 1575 anchors x (4 + 8 classes).

Backbone of Conv+BN+SiLU (SiLU written as x * Sigmoid(x), the pattern the
converter fuses) with a CSP-style Split/Concat block, an SPPF block (chained
5x5 MaxPools), a neck that upsamples once with Resize (nearest, x2) and once
with ConvTranspose (stride 2), and three heads (strides 8, 16, 32) decoded
with Reshape/Transpose/Sigmoid/Slice into
  boxes  [N, 1575, 4]  sigmoid box coordinates (cx, cy, w, h) in [0, 1]
  scores [N, 1575, 8]  objectness x class probability
Random weights: the outputs are shaped like detections, not meaningful ones.
"""

from __future__ import annotations

import numpy as np
import onnx

from models.graph_builder import FLOAT, GraphBuilder

SIZE, CLASSES, ANCHORS = 160, 8, 3
PER_ANCHOR = 5 + CLASSES


def _csp_block(g: GraphBuilder, x: str, channels: int) -> str:
    half = channels // 2
    a, b = g.op("Split", [x, g.const([half, half], "split", np.int64)], n_out=2, axis=1)
    b2 = g.conv_bn(b, half, half, 3, act="SiLU")
    return g.conv_bn(g.op("Concat", [a, b, b2], axis=1), channels + half, channels, 1, act="SiLU")


def _sppf(g: GraphBuilder, x: str, channels: int) -> str:
    y0 = g.conv_bn(x, channels, channels // 2, 1, act="SiLU")
    pools = [y0]
    for _ in range(3):
        pools.append(g.op("MaxPool", [pools[-1]], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2]))
    return g.conv_bn(g.op("Concat", pools, axis=1), channels * 2, channels, 1, act="SiLU")


def _head(g: GraphBuilder, x: str, channels: int, grid: int) -> str:
    """1x1 conv to anchors x (box, objectness, classes), then [N, anchors*grid*grid, 13]."""
    w = g.normal((ANCHORS * PER_ANCHOR, channels, 1, 1), 1.0 / channels ** 0.5, "head_w")
    y = g.op("Conv", [x, w, g.normal((ANCHORS * PER_ANCHOR,), 0.1, "head_b")], kernel_shape=[1, 1])
    y = g.op("Reshape", [y, g.const([0, ANCHORS, PER_ANCHOR, grid, grid], "head_shape", np.int64)])
    y = g.op("Transpose", [y], perm=[0, 1, 3, 4, 2])
    return g.op("Reshape", [y, g.const([0, -1, PER_ANCHOR], "flat_shape", np.int64)])


def _slice_last(g: GraphBuilder, x: str, start: int, end: int) -> str:
    return g.op("Slice", [x, g.const([start], "starts", np.int64), g.const([end], "ends", np.int64),
                          g.const([2], "axes", np.int64)])


def detector() -> onnx.ModelProto:
    g = GraphBuilder("detector", seed=106)
    x = g.input("images", FLOAT, ["N", 3, SIZE, SIZE])
    x = g.conv_bn(x, 3, 16, 3, 2, act="SiLU")                      # 80x80
    x = g.conv_bn(x, 16, 32, 3, 2, act="SiLU")                     # 40x40
    x = _csp_block(g, x, 32)
    p3 = g.conv_bn(x, 32, 64, 3, 2, act="SiLU")                    # 20x20, stride 8
    p4 = g.conv_bn(_csp_block(g, p3, 64), 64, 128, 3, 2, act="SiLU")  # 10x10, stride 16
    p5 = _sppf(g, g.conv_bn(p4, 128, 128, 3, 2, act="SiLU"), 128)  # 5x5, stride 32

    up = g.op("Resize", [p5, "", g.const([1.0, 1.0, 2.0, 2.0], "scales")], mode="nearest")
    n4 = g.conv_bn(g.op("Concat", [up, p4], axis=1), 256, 64, 3, act="SiLU")   # 10x10
    t = g.op("ConvTranspose", [n4, g.he((64, 32, 2, 2), 64, "deconv_w"), g.normal((32,), 0.05, "deconv_b")],
             kernel_shape=[2, 2], strides=[2, 2])
    n3 = g.conv_bn(g.op("Concat", [g.activation(t, "SiLU"), p3], axis=1), 96, 64, 3, act="SiLU")  # 20x20

    heads = [_head(g, n3, 64, SIZE // 8), _head(g, n4, 64, SIZE // 16), _head(g, p5, 128, SIZE // 32)]
    raw = g.op("Sigmoid", [g.op("Concat", heads, axis=1)])
    g.op("Identity", [_slice_last(g, raw, 0, 4)], outputs=["boxes"])
    g.op("Mul", [_slice_last(g, raw, 4, 5), _slice_last(g, raw, 5, PER_ANCHOR)], outputs=["scores"])
    anchors = ANCHORS * sum((SIZE // s) ** 2 for s in (8, 16, 32))
    g.output("boxes", FLOAT, ["N", anchors, 4])
    g.output("scores", FLOAT, ["N", anchors, CLASSES])
    return g.model("YOLO-style detector head 3x160x160, 8 classes, random weights.")
