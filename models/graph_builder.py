"""A small, seeded ONNX graph builder shared by every zoo model.

Why a builder and not raw onnx.helper calls: every model needs unique tensor
names, seeded initialisers with realistic scales and the same Conv+BN+act
blocks; keeping that in one place keeps the model files readable as
topology. Everything is deterministic: names come from counters, weights from
one numpy Generator seeded by the model, so the same code gives the same bytes.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
PRODUCER = "ai-engine models.zoo"


class GraphBuilder:
    """Accumulates nodes, initialisers, inputs and outputs of one graph."""

    def __init__(self, name: str, seed: int):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._counts: dict[str, int] = {}

    # ---- naming and raw pieces ------------------------------------------------
    def fresh(self, prefix: str) -> str:
        n = self._counts.get(prefix, 0)
        self._counts[prefix] = n + 1
        return f"{prefix}_{n}"

    def input(self, name: str, elem_type: int, shape: list) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def output(self, name: str, elem_type: int, shape: list) -> None:
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, shape))

    def const(self, value, prefix: str = "const", dtype=np.float32) -> str:
        """An initialiser holding `value` (array or scalar); returns its name."""
        name = self.fresh(prefix)
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, name: str | None = None,
           outputs: list[str] | None = None, **attrs) -> str | list[str]:
        """Add one node; returns its output name (or names when n_out > 1)."""
        node_name = name or self.fresh(op_type.lower())
        outs = outputs or ([node_name] if n_out == 1 else [f"{node_name}_out{i}" for i in range(n_out)])
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=node_name, **attrs))
        return outs[0] if len(outs) == 1 else outs

    # ---- seeded weights ---------------------------------------------------------
    def he(self, shape: tuple, fan_in: int, prefix: str) -> str:
        """He-normal weights: keeps activation variance ~constant through ReLU layers."""
        w = self.rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)
        return self.const(w, prefix)

    def normal(self, shape: tuple, std: float, prefix: str, mean: float = 0.0) -> str:
        return self.const(mean + self.rng.standard_normal(shape) * std, prefix)

    def bn_params(self, channels: int, gamma_range=(0.5, 1.5)) -> list[str]:
        """BatchNormalization scale, bias, mean, var: non-trivial running statistics so
        folding BN into the conv is exercised numerically, not a no-op."""
        return [
            self.const(self.rng.uniform(*gamma_range, channels), "bn_scale"),
            self.const(self.rng.normal(0.0, 0.1, channels), "bn_bias"),
            self.const(self.rng.normal(0.0, 0.2, channels), "bn_mean"),
            self.const(self.rng.uniform(0.5, 2.0, channels), "bn_var"),
        ]

    # ---- common blocks ------------------------------------------------------------
    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1,
             bias: bool = True, pad: int | None = None) -> str:
        pad = k // 2 if pad is None else pad
        fan_in = (cin // group) * k * k
        ins = [x, self.he((cout, cin // group, k, k), fan_in, "conv_w")]
        if bias:
            ins.append(self.normal((cout,), 0.05, "conv_b"))
        return self.op("Conv", ins, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[pad] * 4, group=group)

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1,
                act: str | None = "Relu", gamma_range=(0.5, 1.5)) -> str:
        """Conv (no bias, as exported by frameworks before BN) + BatchNormalization + activation."""
        y = self.conv(x, cin, cout, k, stride, group, bias=False)
        y = self.op("BatchNormalization", [y, *self.bn_params(cout, gamma_range)], epsilon=1e-5)
        return self.activation(y, act)

    def activation(self, x: str, act: str | None) -> str:
        if act is None:
            return x
        if act == "Relu":
            return self.op("Relu", [x])
        if act == "Relu6":  # ReLU6 as exporters write it: Clip with min/max inputs (opset >= 11)
            return self.op("Clip", [x, self.const(0.0, "clip_min"), self.const(6.0, "clip_max")])
        if act == "SiLU":  # x * sigmoid(x), the pattern the converter fuses
            return self.op("Mul", [x, self.op("Sigmoid", [x])])
        raise ValueError(f"unknown activation {act!r}")

    def gemm(self, x: str, fin: int, fout: int, scale: str = "he") -> str:
        w = self.he((fout, fin), fin, "fc_w") if scale == "he" else \
            self.normal((fout, fin), math.sqrt(1.0 / fin), "fc_w")
        return self.op("Gemm", [x, w, self.normal((fout,), 0.05, "fc_b")], transB=1)

    # ---- the model ------------------------------------------------------------------
    def model(self, doc: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name=PRODUCER, producer_version="1")
        model.doc_string = f"GENERATED by models/zoo.py ({self.name}); do not edit. {doc}"
        # IR 8 is what opset 17 shipped with; pinning it keeps files readable by
        # older runtimes and independent of the installed onnx version's default.
        model.ir_version = 8
        return model


FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
BOOL = TensorProto.BOOL
