"""qdq_fuse: run the QDQ groups of a quantised model on the int8 kernels.

onnxruntime.quantization.quantize_static (QDQ format) writes each quantised
Conv / MatMul / Gemm as

    DequantizeLinear(x: uint8, per-tensor) ─┐
    DequantizeLinear(w: int8 constant, zero point 0) ─┤ Conv | MatMul | Gemm [+ bias: DequantizeLinear(int32)]
                                                       └─ [Relu] ─ [QuantizeLinear(uint8, per-tensor)]

and this pass replaces such a group by one node, QConvU8S8 or QGemmU8S8
(engine/ops/qlinear.py: the CONV_U8S8 / GEMM_U8S8_PACKED steps), that reads
the uint8 tensor itself, so a chain of quantised layers passes uint8
activations from one int8 kernel to the next. DequantizeLinear(uint8) ->
BatchNormalization [-> Relu] -> QuantizeLinear(uint8) (what quantize_static
leaves of a BatchNormalization it does not fold) becomes QLutU8: a 256-entry
table per channel holding what the fp32 steps would compute; a QLutU8 that
is the only reader of a uint8 QConvU8S8 output then joins the conv, which
applies the table in its output stage (input 8, `lut`). DQ(uint8) + DQ(uint8)
[-> Relu] -> Q(uint8) (a residual Add) becomes QAddU8, one pass over the
uint8 tensors. DQ(uint8) -> Softmax -> Q(uint8) becomes QSoftmaxU8, one
pass in onnxruntime's QLinearSoftmax arithmetic (what onnxruntime fuses the
group into; engine/ops/qlinear.py says where it differs from the steps).

- with the trailing QuantizeLinear the node writes its uint8 output directly
  (`_out` "uint8"): (acc + bias_int32) * (x_scale * w_scale / y_scale),
  rounded half to even, plus y's zero point, saturated: onnxruntime's
  QLinearConv / QLinearMatMul arithmetic, byte for byte. A Relu before the
  QuantizeLinear is exact in it when y's zero point is 0 (what calibration
  writes after a Relu: the clamp at 0 is the saturation); with another zero
  point the node writes float32 with the Relu and the QuantizeLinear stays.
- without it the node writes float32: acc * x_scale * w_scale + bias, then
  the Relu, in the float32 epilogue (the dequantised product, computed
  exactly in int32 rather than as a float32 sum).

Weights are packed here, once, into the int8 GEMM's layout, which every
kernel path reads (no per-ISA repacking at load). What stays as it was
(DequantizeLinear to float32, then the float32 op, exactly as before): a
weight that is not an int8 constant or has a non-zero zero point, scales
that are not constants, per-channel scales along another axis, an activation
that is not uint8 per-tensor, grouped convolutions (depthwise ones fuse when
their output is quantised: CONV_U8S8_DW), Gemm with
transA, alpha or beta != 1, a uint8 output with a bias that is not int32, a
MatMul whose A is not 2-D... (the lowering flattens leading dims when the
shape is known), and tensors another node (or a graph output) also reads.

Runs first, before fold_constants would turn the weights' DequantizeLinear
into float32 constants.
"""

from __future__ import annotations

import numpy as np

from engine.ir import Graph, Node
from engine.kernels.abi import Unary
from engine.kernels.conv_int8 import pack_conv_s8
from engine.kernels.conv_int8_depthwise import MAX_TAPS as DW_MAX_TAPS, pack_depthwise_s8
from engine.kernels.gemm_lowp import pack_b_s8


class _Fuser:
    def __init__(self, graph: Graph):
        self.g = graph
        self.inits = graph.initializers
        self.producers = graph.producers()
        self.consumers = graph.consumers()
        self.outputs = {t.name for t in graph.outputs}
        self.drop: set[int] = set()

    def const(self, name: str) -> np.ndarray | None:
        return self.inits.get(name) if name else None

    def only_reader(self, name: str, node: Node) -> bool:
        readers = self.consumers.get(name, [])
        return name not in self.outputs and len(readers) == 1 and readers[0] is node

    def dq(self, name: str) -> Node | None:
        node = self.producers.get(name)
        return node if node is not None and node.op == "DequantizeLinear" and node.domain == "" else None

    def per_tensor(self, node: Node, dtype) -> tuple[float, int] | None:
        """(scale, zero point) of a Q/DQ node with constant scalar parameters of the given integer type."""
        scale = self.const(node.inputs[1])
        zp = self.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros((), dtype)
        if scale is None or zp is None or scale.size != 1 or zp.size != 1 or zp.dtype != dtype \
                or scale.dtype != np.float32 or node.attrs.get("block_size", 0) or node.attrs.get("output_dtype", 0):
            return None
        s = float(scale.reshape(()))
        return (s, int(zp.reshape(()))) if s > 0 and np.isfinite(s) else None

    def activation(self, name: str) -> tuple[Node, float, int] | None:
        """The uint8 per-tensor DequantizeLinear producing name: (it, x_scale, x_zero)."""
        node = self.dq(name)
        if node is None or node.inputs[0] in self.inits:
            return None
        qp = self.per_tensor(node, np.uint8)
        return None if qp is None else (node, *qp)

    def weight(self, name: str, channel_axis: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(int8 weights, float32 scale per output channel) of a constant, symmetric DequantizeLinear."""
        node = self.dq(name)
        if node is None or node.attrs.get("block_size", 0) or node.attrs.get("output_dtype", 0):
            return None
        w, scale = self.const(node.inputs[0]), self.const(node.inputs[1])
        zp = self.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros((), np.int8)
        if w is None or scale is None or zp is None or w.dtype != np.int8 or scale.dtype != np.float32 \
                or np.any(zp != 0) or not np.all(np.isfinite(scale)) or np.any(scale < 0):
            return None
        n = w.shape[channel_axis]
        if scale.size == 1:
            return w, np.full(n, float(scale.reshape(-1)[0]), np.float32)
        axis = node.attrs.get("axis", 1) % w.ndim
        if scale.ndim != 1 or axis != channel_axis or scale.size != n:
            return None
        return w, np.ascontiguousarray(scale)

    def bias(self, name: str, n: int) -> tuple[np.ndarray | None, np.ndarray | None] | None:
        """(int32 bias or None, float32 bias) of a Conv/Gemm bias input; None when it cannot be used."""
        if not name:
            return None, None
        node = self.dq(name)
        if node is not None:
            b, scale = self.const(node.inputs[0]), self.const(node.inputs[1])
            zp = self.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros((), np.int32)
            if b is None or scale is None or zp is None or b.dtype != np.int32 or np.any(zp != 0) or b.size != n \
                    or scale.size not in (1, n):
                return None
            return b.reshape(n), (b.reshape(n).astype(np.float32) * scale.reshape(-1)).astype(np.float32)
        b = self.const(name)
        if b is None or b.dtype != np.float32 or b.size != n:
            return None
        return None, b.reshape(n).astype(np.float32)

    def tail(self, op: Node) -> tuple[list[Node], int, tuple[float, int] | None]:
        """What follows op's output and fuses with it: (nodes, activation, (y_scale, y_zero) or None)."""
        out = op.outputs[0]
        readers = self.consumers.get(out, [])
        nodes, act = [], Unary.IDENTITY
        if len(readers) == 1 and out not in self.outputs and readers[0].op == "Relu":
            relu = readers[0]
            nodes, act, out = [relu], Unary.RELU, relu.outputs[0]
            readers = self.consumers.get(out, [])
        if len(readers) == 1 and out not in self.outputs and readers[0].op == "QuantizeLinear" \
                and readers[0].domain == "":
            q = readers[0]
            qp = self.per_tensor(q, np.uint8) if not q.attrs.get("saturate", 1) == 0 else None
            if qp is not None and (act == Unary.IDENTITY or qp[1] == 0):
                return nodes + [q], Unary.IDENTITY, qp
        return nodes, act, None

    def fuse(self, op: Node, kind: str, x, w_scale: np.ndarray, packed: np.ndarray, biases, attrs: dict) -> bool:
        dq_x, x_scale, x_zero = x
        b_int, b_f32 = biases
        tail, act, yq = self.tail(op)
        if yq is not None and b_int is None and b_f32 is not None:
            tail, act, yq = [n for n in tail if n.op == "Relu"], Unary.IDENTITY, None
            if tail:
                tail, act = tail, Unary.RELU
        out_name = tail[-1].outputs[0] if tail else op.outputs[0]
        inputs = self.fused_inputs(op.name or out_name, dq_x.inputs[0], x_scale, x_zero, packed, w_scale,
                                   b_int if yq is not None else b_f32, yq)
        attrs = dict(attrs, _out="uint8" if yq is not None else "float32")
        if act != Unary.IDENTITY:
            attrs["_act"] = int(act)
        op.op, op.inputs, op.outputs, op.attrs, op.domain = kind, inputs, [out_name], attrs, ""
        self.drop.update(id(n) for n in tail)
        return True

    def fused_inputs(self, base: str, x_name: str, x_scale: float, x_zero: int, packed: np.ndarray,
                     w_scale: np.ndarray, bias: np.ndarray | None, yq: tuple[float, int] | None) -> list[str]:
        """The inputs of a QConvU8S8 / QGemmU8S8 (engine/ops/qlinear.py), their constants added
        as initializers named after base."""
        names = {k: self.unique(f"{base}/{k}") for k in ("x_scale", "x_zero", "packed", "w_scale", "bias", "y_scale",
                                                          "y_zero")}
        self.inits[names["x_scale"]] = np.float32(x_scale).reshape(())
        self.inits[names["x_zero"]] = np.uint8(x_zero).reshape(())
        self.inits[names["packed"]] = packed
        self.inits[names["w_scale"]] = w_scale
        inputs = [x_name, names["x_scale"], names["x_zero"], names["packed"], names["w_scale"], ""]
        if bias is not None:
            self.inits[names["bias"]] = np.ascontiguousarray(bias)
            inputs[5] = names["bias"]
        if yq is not None:
            self.inits[names["y_scale"]] = np.float32(yq[0]).reshape(())
            self.inits[names["y_zero"]] = np.uint8(yq[1]).reshape(())
            inputs += [names["y_scale"], names["y_zero"]]
        return inputs

    def unique(self, name: str) -> str:
        while name in self.inits or name in self.producers:
            name += "_"
        return name

    def conv(self, node: Node) -> bool:
        if len(node.inputs) < 2:
            return False
        if node.attrs.get("group", 1) != 1:
            return self.depthwise(node)
        x = self.activation(node.inputs[0])
        wq = self.weight(node.inputs[1], 0)
        if x is None or wq is None or wq[0].ndim != 4:
            return False
        w, w_scale = wq
        biases = self.bias(node.inputs[2] if len(node.inputs) > 2 else "", w.shape[0])
        if biases is None or w.shape[1] * w.shape[2] * w.shape[3] > 32768:
            return False
        attrs = {k: v for k, v in node.attrs.items() if k in ("auto_pad", "pads", "strides", "dilations")}
        attrs["_w_shape"] = [int(d) for d in w.shape]
        return self.fuse(node, "QConvU8S8", x, w_scale, pack_conv_s8(w).copy(), biases, attrs)

    def depthwise(self, node: Node) -> bool:
        """A depthwise Conv (group == C == K) whose output is quantised (QConvU8S8 with
        `group`: CONV_U8S8_DW has no float32 output stage)."""
        x = self.activation(node.inputs[0])
        wq = self.weight(node.inputs[1], 0)
        if x is None or wq is None or wq[0].ndim != 4 or wq[0].shape[1] != 1 \
                or node.attrs["group"] != wq[0].shape[0] or wq[0].shape[2] * wq[0].shape[3] > DW_MAX_TAPS:
            return False
        w, w_scale = wq
        biases = self.bias(node.inputs[2] if len(node.inputs) > 2 else "", w.shape[0])
        _, _, yq = self.tail(node)
        if biases is None or yq is None or (biases[0] is None and biases[1] is not None):
            return False
        attrs = {k: v for k, v in node.attrs.items() if k in ("auto_pad", "pads", "strides", "dilations", "group")}
        attrs["_w_shape"] = [int(d) for d in w.shape]
        return self.fuse(node, "QConvU8S8", x, w_scale, pack_depthwise_s8(w), biases, attrs)

    def gemm(self, node: Node) -> bool:
        a = node.attrs
        if node.op == "Gemm" and (a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0):
            return False
        trans_b = int(a.get("transB", 0)) if node.op == "Gemm" else 0
        x = self.activation(node.inputs[0])
        wq = self.weight(node.inputs[1], 0 if trans_b else 1)
        if x is None or wq is None or wq[0].ndim != 2 or wq[0].shape[trans_b] > 32768:
            return False
        w, w_scale = wq
        n = w.shape[0] if trans_b else w.shape[1]
        biases = self.bias(node.inputs[2] if node.op == "Gemm" and len(node.inputs) > 2 else "", n)
        if biases is None:
            return False
        packed = pack_b_s8(w, trans_b=bool(trans_b))
        attrs = {"_w_shape": [int(w.shape[trans_b]), int(n)]}  # K, N
        return self.fuse(node, "QGemmU8S8", x, w_scale, np.ascontiguousarray(packed.buffer), biases, attrs)

    def activation_matmul(self, node: Node) -> bool:
        """DQ(uint8) x DQ(uint8) -> MatMul -> Q(uint8), both run-time tensors (attention's products):
        QLinearMatMul, the int32 product requantised once (engine/ops/qoperator.py), which is what
        onnxruntime fuses the group into; the steps' float32 product rounds differently on ties."""
        a, b = self.activation(node.inputs[0]), self.activation(node.inputs[1])
        if a is None or b is None:
            return False
        readers = self.consumers.get(node.outputs[0], [])
        if len(readers) != 1 or node.outputs[0] in self.outputs or readers[0].op != "QuantizeLinear" \
                or readers[0].domain != "" or readers[0].attrs.get("saturate", 1) == 0 \
                or self.per_tensor(readers[0], np.uint8) is None:
            return False
        q = readers[0]
        zq = q.inputs[2] if len(q.inputs) > 2 else ""
        node.op, node.domain, node.attrs = "QLinearMatMul", "", {}
        node.inputs = [*(list(a[0].inputs) + [""])[:3], *(list(b[0].inputs) + [""])[:3], q.inputs[1], zq]
        node.outputs = [q.outputs[0]]
        self.drop.add(id(q))
        return True


    def vector(self, name: str) -> np.ndarray | None:
        """A 1-D float32 constant, or the DequantizeLinear of one (quantize_static quantises a
        BatchNormalization's scale and bias too), computed as DequantizeLinear does."""
        v = self.const(name)
        if v is not None:
            return v
        node = self.dq(name)
        if node is None or node.attrs.get("block_size", 0):
            return None
        q, scale = self.const(node.inputs[0]), self.const(node.inputs[1])
        zp = self.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros((), q.dtype
                                                                                                 if q is not None
                                                                                                 else np.int8)
        if q is None or scale is None or zp is None or q.ndim != 1 or scale.dtype != np.float32 \
                or scale.size not in (1, q.size) or zp.size not in (1, q.size):
            return None
        return ((q.astype(np.float32) - zp.astype(np.float32).reshape(-1)) * scale.reshape(-1)).astype(np.float32)

    def batchnorm(self, node: Node) -> bool:
        """DQ(uint8) -> BatchNormalization (constant) [-> Relu] -> Q(uint8): a per-channel table QLutU8."""
        if node.attrs.get("training_mode", 0) or len([o for o in node.outputs if o]) != 1:
            return False
        x = self.activation(node.inputs[0])
        params = [self.vector(i) for i in node.inputs[1:5]]
        if x is None or any(p is None or p.dtype != np.float32 or p.ndim != 1 for p in params):
            return False
        tail, act, yq = self.tail(node)
        if yq is None:
            return False
        dq, x_scale, x_zero = x
        # The fp32 operations the unfused steps do: DequantizeLinear, BatchNormalization as
        # lower_batchnorm folds it (float64 -> float32 scale and shift, then x * s + t),
        # the Relu (exact in the saturation: y's zero point is 0), QuantizeLinear.
        scale, bias, mean, var = (p.astype(np.float64) for p in params)
        s = scale / np.sqrt(var + node.attrs.get("epsilon", 1e-5))
        t = (bias - mean * s).astype(np.float32)
        v = (np.arange(256, dtype=np.float32) - np.float32(x_zero)) * np.float32(x_scale)
        y = v[None, :] * s.astype(np.float32)[:, None] + t[:, None]
        lut = _quantize_u8(y.astype(np.float32), yq[0], yq[1])
        name = self.unique(f"{node.name or node.outputs[0]}/lut")
        self.inits[name] = lut
        out = tail[-1].outputs[0]
        node.op, node.inputs, node.outputs, node.attrs, node.domain = "QLutU8", [dq.inputs[0], name], [out], {}, ""
        self.drop.update(id(n) for n in tail)
        return True


    def add(self, node: Node) -> bool:
        """DQ(uint8) + DQ(uint8) [-> Relu] -> Q(uint8), all per tensor (either operand may be a
        constant): QAddU8 on the uint8 tensors, in onnxruntime's QLinearAdd arithmetic (`_form` 1:
        onnxruntime fuses the group into QLinearAdd, and drops a Relu before a zero point of 0,
        where the saturation is the Relu); a Relu before another zero point keeps the steps'
        arithmetic (`_form` 0)."""
        a, b = self.operand(node.inputs[0]), self.operand(node.inputs[1])
        if a is None or b is None or (a[0].inputs[0] in self.inits and b[0].inputs[0] in self.inits):
            return False
        out, tail, relu = node.outputs[0], [], 0
        readers = self.consumers.get(out, [])
        if len(readers) == 1 and out not in self.outputs and readers[0].op == "Relu" and readers[0].domain == "":
            tail, relu, out = [readers[0]], 1, readers[0].outputs[0]
            readers = self.consumers.get(out, [])
        if len(readers) != 1 or out in self.outputs or readers[0].op != "QuantizeLinear" or readers[0].domain != "" \
                or readers[0].attrs.get("saturate", 1) == 0:
            return False
        q = readers[0]
        yq = self.per_tensor(q, np.uint8)
        if yq is None:
            return False
        if relu and yq[1] == 0:
            relu = 0
        node.op, node.domain = "QAddU8", ""
        node.inputs = [a[0].inputs[0], b[0].inputs[0]]
        node.outputs = [q.outputs[0]]
        node.attrs = {"_a": [a[1], a[2]], "_b": [b[1], b[2]], "_y": [yq[0], yq[1]], "_relu": relu,
                      "_form": 0 if relu else 1}
        self.drop.update(id(n) for n in tail + [q])
        return True

    def operand(self, name: str) -> tuple[Node, float, int] | None:
        """activation(name), or the same of a DequantizeLinear of a uint8 constant."""
        node = self.dq(name)
        if node is None:
            return None
        if node.inputs[0] in self.inits and self.inits[node.inputs[0]].dtype != np.uint8:
            return None
        qp = self.per_tensor(node, np.uint8)
        return None if qp is None else (node, *qp)

    def softmax(self, node: Node, opset: int) -> bool:
        """DQ(uint8) -> Softmax -> Q(uint8), per tensor, over the last axis (or rows flattened from
        axis before opset 13): QSoftmaxU8, onnxruntime's QLinearSoftmax, which is what onnxruntime
        runs for this group (see engine/ops/qlinear.py emit_qsoftmax_u8 for where the two differ)."""
        x = self.activation(node.inputs[0])
        if x is None:
            return False
        axis = node.attrs.get("axis", -1 if opset >= 13 else 1)
        if opset >= 13 and axis != -1:
            return False  # another axis needs the rank, unknown here; the steps stay
        readers = self.consumers.get(node.outputs[0], [])
        if len(readers) != 1 or node.outputs[0] in self.outputs or readers[0].op != "QuantizeLinear" \
                or readers[0].domain != "" or readers[0].attrs.get("saturate", 1) == 0:
            return False
        q = readers[0]
        yq = self.per_tensor(q, np.uint8)
        if yq is None:
            return False
        node.op, node.domain, node.inputs, node.outputs = "QSoftmaxU8", "", [x[0].inputs[0]], [q.outputs[0]]
        node.attrs = {"_x": [x[1], x[2]], "_y": [yq[0], yq[1]], "axis": axis, "_flatten": int(opset < 13)}
        self.drop.add(id(q))
        return True


class _QOperator:
    """QOperator-format nodes (QLinearConv, QLinearMatMul, ConvInteger,
    MatMulInteger) whose weights are int8 constants with zero point 0 and
    whose activation is uint8 with a constant per-tensor zero point become
    QConvU8S8 / QGemmU8S8 in place: the same int32 sums and, for QLinear*,
    the same float32 requantisation as engine/ops/qoperator.py composes (and
    onnxruntime computes); the *Integer ops write the int32 sums (`_out`
    "int32"). Anything else stays for engine/ops/qoperator.py."""

    def __init__(self, fuser: _Fuser):
        self.f = fuser

    def scalar(self, name: str, dtype) -> np.ndarray | None:
        v = self.f.const(name) if name else np.zeros((), dtype)
        return v.reshape(()) if v is not None and v.size == 1 and v.dtype == dtype else None

    def weights(self, name: str, zp_name: str) -> np.ndarray | None:
        w = self.f.const(name)
        zp = self.f.const(zp_name) if zp_name else np.zeros((), np.int8)
        if w is None or zp is None or w.dtype != np.int8 or zp.dtype != np.int8 or np.any(zp != 0):
            return None
        return w

    def scales(self, name: str, n: int) -> np.ndarray | None:
        s = self.f.const(name)
        if s is None or s.dtype != np.float32 or s.size not in (1, n) or s.ndim > 1 \
                or not np.all(np.isfinite(s)) or np.any(s <= 0):
            return None
        return np.ascontiguousarray(np.broadcast_to(s.reshape(-1), (n,)), np.float32)

    def rewrite(self, node: Node, kind: str, x_name: str, x_scale: float, x_zero: int, packed: np.ndarray,
                w_scale: np.ndarray, bias: np.ndarray | None, yq: tuple[float, int] | None, out: str,
                attrs: dict) -> bool:
        inputs = self.f.fused_inputs(node.name or node.outputs[0], x_name, x_scale, x_zero, packed, w_scale, bias, yq)
        node.op, node.inputs, node.attrs, node.domain = kind, inputs, dict(attrs, _out=out), ""
        return True

    def operands(self, node: Node, x_i: int, xs_i: int | None, xz_i: int, w_i: int, wz_i: int):
        """(x_scale, x_zero, int8 weights) or None."""
        ins = node.inputs + [""] * 9
        x_zero = self.scalar(ins[xz_i], np.uint8)
        x_scale = self.f.const(ins[xs_i]) if xs_i is not None else np.ones((), np.float32)
        w = self.weights(ins[w_i], ins[wz_i])
        if x_zero is None or x_scale is None or x_scale.size != 1 or x_scale.dtype != np.float32 \
                or not x_scale.reshape(()) > 0 or w is None or ins[x_i] in self.f.inits:
            return None
        return float(x_scale.reshape(())), int(x_zero), w

    def output(self, node: Node) -> tuple[float, int] | None:
        at = 7 if node.op == "QGemm" else 6
        ins = node.inputs + [""] * 9
        if not ins[at]:
            return None
        ys, yz = self.f.const(ins[at]), self.scalar(ins[at + 1], np.uint8)
        if ys is None or yz is None or ys.size != 1 or ys.dtype != np.float32 or not ys.reshape(()) > 0:
            return None
        return float(ys.reshape(())), int(yz)

    def conv(self, node: Node) -> bool:
        qlinear = node.op == "QLinearConv"
        ops = self.operands(node, 0, 1, 2, 3, 5) if qlinear else self.operands(node, 0, None, 2, 1, 3)
        if ops is None:
            return False
        x_scale, x_zero, w = ops
        group = node.attrs.get("group", 1)
        if w.ndim != 4 or w.shape[1] * w.shape[2] * w.shape[3] > 32768:
            return False
        if group != 1 and (group != w.shape[0] or w.shape[1] != 1  # grouped, not depthwise: composed
                           or w.shape[2] * w.shape[3] > DW_MAX_TAPS):
            return False
        if node.attrs.get("kernel_shape") is not None and list(node.attrs["kernel_shape"]) != list(w.shape[2:]):
            return False
        k = w.shape[0]
        w_scale, yq, bias = np.ones(k, np.float32), None, None
        if qlinear:
            w_scale, yq = self.scales(node.inputs[4], k), self.output(node)
            bias = self.f.const(node.inputs[8]) if len(node.inputs) > 8 and node.inputs[8] else None
            if w_scale is None or yq is None or (len(node.inputs) > 8 and node.inputs[8]
                                                 and (bias is None or bias.dtype != np.int32 or bias.size != k)):
                return False
        attrs = {a: v for a, v in node.attrs.items() if a in ("auto_pad", "pads", "strides", "dilations", "group")}
        attrs["_w_shape"] = [int(d) for d in w.shape]
        packed = pack_conv_s8(w).copy() if group == 1 else pack_depthwise_s8(w)
        return self.rewrite(node, "QConvU8S8", node.inputs[0], x_scale, x_zero, packed, w_scale,
                            None if bias is None else bias.reshape(k), yq, "uint8" if qlinear else "int32", attrs)

    def matmul(self, node: Node) -> bool:
        """QLinearMatMul, MatMulInteger and com.microsoft QGemm (transB, int32 C; without
        y_scale its output is float32, (acc + C) * s_a * s_b: the F32 output kind with
        the bias dequantised, as the QDQ Gemm fusion writes it)."""
        qgemm = node.op == "QGemm"
        qlinear = node.op != "MatMulInteger"
        ops = self.operands(node, 0, 1, 2, 3, 5) if qlinear else self.operands(node, 0, None, 2, 1, 3)
        a = node.attrs
        if ops is None or (qgemm and (a.get("transA", 0) or a.get("alpha", 1.0) != 1.0)):
            return False
        x_scale, x_zero, w = ops
        trans_b = int(a.get("transB", 0)) if qgemm else 0
        if w.ndim != 2 or w.shape[trans_b] > 32768:
            return False
        n = w.shape[1 - trans_b]
        w_scale, yq, bias = np.ones(n, np.float32), None, None
        if qlinear:
            w_scale = self.scales(node.inputs[4], n)
            yq = self.output(node) if not qgemm or (len(node.inputs) > 7 and node.inputs[7]) else None
            if w_scale is None or (yq is None and not qgemm):
                return False
        if qgemm and len(node.inputs) > 6 and node.inputs[6]:
            bias = self.f.const(node.inputs[6])
            if bias is None or bias.dtype != np.int32 or bias.size != n:
                return False
            bias = bias.reshape(n)
            if yq is None:  # the F32 kind adds a float32 bias after the scaling
                bias = (bias.astype(np.float32) * (np.float32(x_scale) * w_scale)).astype(np.float32)
        if qgemm and yq is None and len(node.inputs) > 7 and node.inputs[7]:
            return False
        packed = np.ascontiguousarray(pack_b_s8(w, trans_b=bool(trans_b)).buffer)
        out = "uint8" if yq is not None else "float32" if qgemm else "int32"
        return self.rewrite(node, "QGemmU8S8", node.inputs[0], x_scale, x_zero, packed, w_scale, bias, yq, out,
                            {"_w_shape": [int(w.shape[trans_b]), int(n)]})


def _quantize_u8(y: np.ndarray, scale: float, zero: int) -> np.ndarray:
    """QuantizeLinear to uint8 as the QUANTIZE step computes it (kernels/exec/qlinear.c), in numpy float32."""
    with np.errstate(invalid="ignore", over="ignore"):
        q = y / np.float32(scale)
        q = np.where(q < np.float32(2.0 ** 31), q, np.float32(-512))
        q = np.rint(np.clip(q, -512, 512)) + np.float32(zero)
    return np.ascontiguousarray(np.clip(q, 0, 255).astype(np.uint8))


def _lut_into_conv(graph: Graph) -> None:
    """QConvU8S8 (uint8 out) -> QLutU8 as one node: the conv applies the table to each
    requantised byte in its output stage (aie_qepilogue.lut_u8), the same bytes without
    a pass over the tensor. Only where the lut is the conv output's one reader."""
    producers, consumers = graph.producers(), graph.consumers()
    outputs = {t.name for t in graph.outputs}
    drop = set()

    def live(n: Node) -> bool:  # the fused groups leave their DequantizeLinear unread until dead-node elimination
        return any(o in outputs or consumers.get(o) for o in n.outputs)

    for lut in graph.nodes:
        if lut.op != "QLutU8" or lut.domain != "":
            continue
        conv = producers.get(lut.inputs[0])
        src = lut.inputs[0]
        if conv is None or conv.op != "QConvU8S8" or conv.attrs.get("_out") != "uint8" or len(conv.inputs) != 8 \
                or conv.attrs.get("group", 1) != 1 \
                or src in outputs or [n for n in consumers.get(src, []) if live(n)] != [lut]:
            continue
        conv.inputs = conv.inputs + [lut.inputs[1]]
        conv.outputs = [lut.outputs[0]]
        drop.update(id(n) for n in consumers[src])  # the lut and dead readers of the tensor that is gone
    graph.nodes = [n for n in graph.nodes if id(n) not in drop]


def qdq_fuse(graph: Graph) -> Graph:
    f = _Fuser(graph)
    qop = _QOperator(f)
    for node in list(graph.nodes):
        if (node.domain != "" and (node.domain, node.op) != ("com.microsoft", "QGemm")) or id(node) in f.drop:
            continue
        if node.op == "Conv":
            f.conv(node)
        elif node.op in ("MatMul", "Gemm") and len(node.inputs) >= 2:
            _ = f.gemm(node) or (node.op == "MatMul" and f.activation_matmul(node))
        elif node.op == "BatchNormalization" and len(node.inputs) == 5:
            f.batchnorm(node)
        elif node.op in ("QLinearConv", "ConvInteger") and len(node.inputs) >= (8 if node.op[0] == "Q" else 2):
            qop.conv(node)
        elif node.op in ("QLinearMatMul", "MatMulInteger", "QGemm") and len(node.inputs) >= (6 if node.op[0] == "Q" else 2):
            qop.matmul(node)
        elif node.op == "Add" and len(node.inputs) == 2:
            f.add(node)
        elif node.op == "Softmax" and node.inputs:
            f.softmax(node, graph.opset)
    graph.nodes = [n for n in graph.nodes if id(n) not in f.drop]
    _lut_into_conv(graph)
    return graph
