"""A sequence model: one LSTM layer (input 64, hidden 128) over x [seq, N, 64]
with a symbolic sequence length, then a linear head on the last hidden
state; the recurrence benchmark and the zoo's `lstm`."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

INPUT, HIDDEN, CLASSES = 64, 128, 10
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def lstm_model(op: str = "LSTM") -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    g = GATES[op]
    scale = 1.0 / np.sqrt(HIDDEN)

    def u(*shape):
        return rng.uniform(-scale, scale, shape).astype(np.float32)

    inits = [onnx.numpy_helper.from_array(u(1, g * HIDDEN, INPUT), "W"),
             onnx.numpy_helper.from_array(u(1, g * HIDDEN, HIDDEN), "R"),
             onnx.numpy_helper.from_array(u(1, 2 * g * HIDDEN), "B"),
             onnx.numpy_helper.from_array(u(HIDDEN, CLASSES), "head")]
    nodes = [helper.make_node(op, ["x", "W", "R", "B"], ["y", "y_h"], hidden_size=HIDDEN),
             helper.make_node("Squeeze", ["y_h", "axes0"], ["last"]),
             helper.make_node("MatMul", ["last", "head"], ["logits"])]
    inits.append(onnx.numpy_helper.from_array(np.array([0], np.int64), "axes0"))
    graph = helper.make_graph(
        nodes, op.lower(), [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", "N", INPUT])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq", 1, "N", HIDDEN]),
         helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model
