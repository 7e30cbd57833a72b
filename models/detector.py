"""detector: a small YOLO-style detector, 3x160x160 -> 1575 anchors x (4 + 8 classes).

Backbone of Conv+BN+SiLU (SiLU written as x * Sigmoid(x), the pattern the
converter fuses) with a CSP-style Split/Concat block, an SPPF block (chained
5x5 MaxPools), a neck that upsamples once with Resize (nearest, x2) and once
with ConvTranspose (stride 2), and three heads (strides 8, 16, 32) decoded
with Reshape/Transpose/Sigmoid/Slice into
  boxes  [N, 1575, 4]  sigmoid box coordinates (cx, cy, w, h) in [0, 1]
  scores [N, 1575, 8]  objectness x class probability
Random weights: the outputs are shaped like detections, not meaningful ones.

detector_nms: the same network at 320x320 with the post-processing in the
graph, as detectors are exported for serving: NonMaxSuppression per class
(center boxes, IoU 0.5, score 0.25, at most 20 per class) and the kept
boxes and scores gathered by its indices:
  selected [K, 3] (batch, class, anchor), det_boxes [K, 4], det_scores [K]
with K known only at run time. Its objectness logits carry a prior bias
(OBJ_PRIOR) so that, like a trained detector's, about 1% of the anchors
pass the score threshold: with the zoo's random inputs ~200 candidates at
320x320 (K ~70) and ~650-1200 at 640x640 (K ~140 of at most 160); without
it a quarter of all anchors would, and NMS would be timed on a case no
real model produces. detector_nms_640 is the same network at 640x640 (an
entry of its own: the heads' Reshape constants carry the grid size).
"""

from __future__ import annotations

import numpy as np
import onnx

from models.graph_builder import FLOAT, GraphBuilder

SIZE, CLASSES, ANCHORS = 160, 8, 3
NMS_SIZE = 320
PER_ANCHOR = 5 + CLASSES
OBJ_PRIOR = -3.0  # ~1% of anchors over the 0.25 score threshold (checked: ~200 at 320, ~650-1200 at 640)


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


def _head(g: GraphBuilder, x: str, channels: int, grid: int, obj_prior: float = 0.0) -> str:
    """1x1 conv to anchors x (box, objectness, classes), then [N, anchors*grid*grid, 13].
    obj_prior shifts the objectness logits, as trained detectors' are: most anchors see background."""
    w = g.normal((ANCHORS * PER_ANCHOR, channels, 1, 1), 1.0 / channels ** 0.5, "head_w")
    prior = np.zeros((ANCHORS, PER_ANCHOR))
    prior[:, 4] = obj_prior
    y = g.op("Conv", [x, w, g.normal((ANCHORS * PER_ANCHOR,), 0.1, "head_b", mean=prior.ravel())],
             kernel_shape=[1, 1])
    y = g.op("Reshape", [y, g.const([0, ANCHORS, PER_ANCHOR, grid, grid], "head_shape", np.int64)])
    y = g.op("Transpose", [y], perm=[0, 1, 3, 4, 2])
    return g.op("Reshape", [y, g.const([0, -1, PER_ANCHOR], "flat_shape", np.int64)])


def _slice_last(g: GraphBuilder, x: str, start: int, end: int) -> str:
    return g.op("Slice", [x, g.const([start], "starts", np.int64), g.const([end], "ends", np.int64),
                          g.const([2], "axes", np.int64)])


def detector() -> onnx.ModelProto:
    g = GraphBuilder("detector", seed=106)
    _detector_body(g, SIZE)
    return g.model("YOLO-style detector head 3x160x160, 8 classes, random weights.")


def detector_nms(size: int = NMS_SIZE) -> onnx.ModelProto:
    g = GraphBuilder("detector_nms", seed=107)
    boxes, scores = _detector_body(g, size, outputs=False, obj_prior=OBJ_PRIOR)
    scores_t = g.op("Transpose", [scores], perm=[0, 2, 1])  # [N, classes, anchors], as NMS takes them
    selected = g.op("NonMaxSuppression", [boxes, scores_t, g.const([20], "max_out", np.int64),
                                          g.const([0.5], "iou"), g.const([0.25], "score_min")],
                    center_point_box=1, outputs=["selected"])
    batch_anchor = g.op("Gather", [selected, g.const([0, 2], "cols", np.int64)], axis=1)
    g.op("GatherND", [boxes, batch_anchor], outputs=["det_boxes"])
    g.op("GatherND", [scores_t, selected], outputs=["det_scores"])
    g.output("selected", onnx.TensorProto.INT64, ["K", 3])
    g.output("det_boxes", FLOAT, ["K", 4])
    g.output("det_scores", FLOAT, ["K"])
    return g.model(f"YOLO-style detector 3x{size}x{size}, 8 classes, NMS in the graph, random weights.")


def detector_nms_640() -> onnx.ModelProto:
    """detector_nms at 640x640: a separate entry (not symbolic H/W) because the
    heads' Reshape constants carry the grid size."""
    return detector_nms(640)


def _detector_body(g: GraphBuilder, size: int, outputs: bool = True, obj_prior: float = 0.0) -> tuple[str, str]:
    x = g.input("images", FLOAT, ["N", 3, size, size])
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

    heads = [_head(g, n3, 64, size // 8, obj_prior), _head(g, n4, 64, size // 16, obj_prior),
             _head(g, p5, 128, size // 32, obj_prior)]
    raw = g.op("Sigmoid", [g.op("Concat", heads, axis=1)])
    if not outputs:
        return _slice_last(g, raw, 0, 4), g.op("Mul", [_slice_last(g, raw, 4, 5), _slice_last(g, raw, 5, PER_ANCHOR)])
    g.op("Identity", [_slice_last(g, raw, 0, 4)], outputs=["boxes"])
    g.op("Mul", [_slice_last(g, raw, 4, 5), _slice_last(g, raw, 5, PER_ANCHOR)], outputs=["scores"])
    anchors = ANCHORS * sum((size // s) ** 2 for s in (8, 16, 32))
    g.output("boxes", FLOAT, ["N", anchors, 4])
    g.output("scores", FLOAT, ["N", anchors, CLASSES])
    return "boxes", "scores"
