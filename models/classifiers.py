"""Image classifiers of the zoo: mlp, cnn_bn, resnet18, mobilenetv2.

All take float32 NCHW (or [N, 784] for the MLP) with a symbolic batch "N" and
return raw logits: no Softmax at the end, because logits keep the numerical
comparison against onnxruntime sensitive (Softmax squashes most differences
below atol). The weights are random, so the predictions mean nothing; the
`digits` model is the one trained classifier.
"""

from __future__ import annotations

import onnx

from models.graph_builder import FLOAT, GraphBuilder


def mlp() -> onnx.ModelProto:
    """784-512-512-10 with Gemm+Relu (the classic MNIST MLP shape)."""
    g = GraphBuilder("mlp", seed=101)
    x = g.input("input", FLOAT, ["N", 784])
    x = g.op("Relu", [g.gemm(x, 784, 512)])
    x = g.op("Relu", [g.gemm(x, 512, 512)])
    g.op("Gemm", [x, g.normal((10, 512), (1 / 512) ** 0.5, "fc_w"), g.normal((10,), 0.05, "fc_b")],
         transB=1, outputs=["logits"])
    g.output("logits", FLOAT, ["N", 10])
    return g.model("MLP 784-512-512-10, raw logits, random He-initialised weights.")


def cnn_bn() -> onnx.ModelProto:
    """CIFAR-sized CNN: 3x(Conv+BN+Relu) with MaxPool, GlobalAveragePool, Gemm."""
    g = GraphBuilder("cnn_bn", seed=102)
    x = g.input("input", FLOAT, ["N", 3, 32, 32])
    x = g.conv_bn(x, 3, 32, 3)
    x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.conv_bn(x, 32, 64, 3)
    x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.conv_bn(x, 64, 128, 3)
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    g.op("Gemm", [x, g.he((10, 128), 128, "fc_w"), g.normal((10,), 0.05, "fc_b")],
         transB=1, outputs=["logits"])
    g.output("logits", FLOAT, ["N", 10])
    return g.model("Small CNN 3x32x32 -> 10 with BatchNormalization, random weights.")


def _basic_block(g: GraphBuilder, x: str, cin: int, cout: int, stride: int) -> str:
    y = g.conv_bn(x, cin, cout, 3, stride)
    # A small gamma on the block's last BN (like zero-init-residual training
    # leaves it) keeps the residual stream from doubling its variance per block.
    y = g.conv_bn(y, cout, cout, 3, 1, act=None, gamma_range=(0.2, 0.5))
    if stride != 1 or cin != cout:
        x = g.conv_bn(x, cin, cout, 1, stride, act=None)
    return g.op("Relu", [g.op("Add", [y, x])])


def resnet18() -> onnx.ModelProto:
    """ResNet-18 (He et al. 2015, torchvision layout): 3x224x224 -> 1000 logits."""
    g = GraphBuilder("resnet18", seed=103)
    x = g.input("input", FLOAT, ["N", 3, 224, 224])
    x = g.conv_bn(x, 3, 64, 7, 2)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        x = _basic_block(g, x, cin, cout, stride)
        x = _basic_block(g, x, cout, cout, 1)
        cin = cout
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    g.op("Gemm", [x, g.normal((1000, 512), (1 / 512) ** 0.5, "fc_w"), g.normal((1000,), 0.05, "fc_b")],
         transB=1, outputs=["logits"])
    g.output("logits", FLOAT, ["N", 1000])
    return g.model("ResNet-18, BasicBlocks with BatchNormalization, 1000 classes, random weights.")


def _divisible(v: float, divisor: int = 8) -> int:
    """Channel rounding of the MobileNet reference code: nearest multiple of 8, never < 90%."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


# (expansion t, output channels c, repeats n, first stride s): Sandler et al. 2018, table 2.
_MBV2_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                  (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenetv2(width: float = 1.0) -> onnx.ModelProto:
    """MobileNetV2 at 224x224, width 1.0 (3.5 M parameters, ~300 MMAC): inverted
    residuals, depthwise 3x3 conv, ReLU6 as Clip(0, 6)."""
    g = GraphBuilder("mobilenetv2", seed=104)
    x = g.input("input", FLOAT, ["N", 3, 224, 224])
    cin = _divisible(32 * width)
    x = g.conv_bn(x, 3, cin, 3, 2, act="Relu6")
    for t, c, n, s in _MBV2_SETTINGS:
        cout = _divisible(c * width)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = g.conv_bn(x, cin, hidden, 1, act="Relu6") if t != 1 else x
            y = g.conv_bn(y, hidden, hidden, 3, stride, group=hidden, act="Relu6")
            y = g.conv_bn(y, hidden, cout, 1, act=None,
                          gamma_range=(0.2, 0.5) if stride == 1 and cin == cout else (0.5, 1.5))
            x = g.op("Add", [x, y]) if stride == 1 and cin == cout else y
            cin = cout
    last = _divisible(1280 * max(1.0, width))
    x = g.conv_bn(x, cin, last, 1, act="Relu6")
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    g.op("Gemm", [x, g.normal((1000, last), (1 / last) ** 0.5, "fc_w"), g.normal((1000,), 0.05, "fc_b")],
         transB=1, outputs=["logits"])
    g.output("logits", FLOAT, ["N", 1000])
    return g.model(f"MobileNetV2 width {width} at 224x224, ReLU6 as Clip, random weights.")
