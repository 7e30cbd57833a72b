"""Models quantised by onnxruntime.quantization.quantize_static (QDQ, per
channel: what users bring) run in ai-engine and agree with onnxruntime's own
int8 execution within one quantisation step of the output.

Both fuse the QDQ groups into int8 kernels (ai-engine: engine/passes/qdq_fuse.py,
every Conv/MatMul/Gemm of these models on CONV_U8S8 / GEMM_U8S8_PACKED,
NHWC from end to end); what stays between them (BatchNormalization, Add,
pooling) runs in fp32 between exact QuantizeLinear/DequantizeLinear. Where
the model ends in a DequantizeLinear the two agree to its scale: the assertion
(MobileNetV2 too, QDQ and QOperator, its depthwise convs on CONV_U8S8_DW;
bert_mini, QDQ per channel and per tensor and QOperator, see its test)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from engine.onnx_import import import_file
from engine.passes import run_passes
from engine.session import InferenceSession
from tests.int8_reference import ORT_INT8_EXACT_AT_FULL_RANGE

ort = pytest.importorskip("onnxruntime", reason="onnxruntime (the test oracle) is not installed")
quantization = pytest.importorskip("onnxruntime.quantization", reason="onnxruntime.quantization is not installed")


def quantised(zoo, name: str, fmt: str, per_channel: bool = True):
    """(model path) of zoo model `name` quantised by quantize_static (per channel or per tensor,
    u8/s8) in format `fmt` ("QDQ" | "QOperator"), cached under build/models/quantised by the
    source's hash: quantising costs seconds, and several tests read the same models. Without VNNI
    the weights are 7-bit (reduce_range, as onnxruntime recommends there): its int8 kernels are
    then exact (tests/int8_reference.py), so one step of agreement still tests ours."""
    import hashlib

    from models import zoo as model_zoo

    src = zoo(name)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:12]
    reduce_range = not ORT_INT8_EXACT_AT_FULL_RANGE
    kind = fmt.lower() + ("" if per_channel else ".per_tensor") + (".reduce_range" if reduce_range else "")
    dst = src.parent / "quantised" / f"{name}.{kind}.{digest}.onnx"
    if dst.exists():
        return dst
    calibration = [model_zoo.random_inputs(name, batch=1, seed=s) for s in range(4)]

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.it = iter(calibration)

        def get_next(self):
            return next(self.it, None)

    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_suffix(".partial.onnx")
    quantization.quantize_static(str(src), str(tmp), Reader(), quant_format=getattr(quantization.QuantFormat, fmt),
                                 per_channel=per_channel, reduce_range=reduce_range,
                                 activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8)
    tmp.replace(dst)  # whole or absent: a killed run leaves no half-written model behind
    return dst


def output_step(model: onnx.ModelProto, name: str) -> float:
    """The scale of the DequantizeLinear that produces a graph output."""
    producer = {o: n for n in model.graph.node for o in n.output}[name]
    assert producer.op_type == "DequantizeLinear", f"{name} is produced by {producer.op_type}"
    scale = {i.name: i for i in model.graph.initializer}[producer.input[1]]
    return float(numpy_helper.to_array(scale).max())


@pytest.mark.parametrize("name", ["digits", "cnn_bn", "resnet18"])
def test_an_onnxruntime_quantised_model_matches_onnxruntime_int8(zoo, name):
    from models import zoo as model_zoo

    dst = quantised(zoo, name, "QDQ")
    model = onnx.load(str(dst))
    assert {n.op_type for n in model.graph.node} >= {"QuantizeLinear", "DequantizeLinear"}
    graph, _ = run_passes(import_file(dst))
    ops = [n.op for n in graph.nodes]
    n_conv = sum(n.op_type == "Conv" for n in model.graph.node)
    assert ops.count("QConvU8S8") == n_conv and "Conv" not in ops, ops
    assert ops.count("Transpose") <= 2, f"the int8 chain leaves NHWC: {ops}"
    theirs = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    ours = InferenceSession(dst, threads=1)
    family = "conv_u8s8" if n_conv else "gemm_u8s8"
    assert ours.precision == "int8" and family in ours.kernel_paths, (ours.precision, ours.kernel_paths)
    feeds = model_zoo.random_inputs(name, batch=3, seed=99)
    for out, a, r in zip(model.graph.output, ours.run(None, feeds), theirs.run(None, feeds)):
        step = output_step(model, out.name)
        diff = float(np.abs(np.asarray(a, np.float64) - r).max())
        assert diff <= step * 1.001, f"{out.name}: max |aie - ort| {diff} > one step {step}"


def test_onnxruntime_quantised_resnet18_in_qoperator_format_matches_onnxruntime_int8(zoo):
    """ResNet-18 in QOperator format: QLinearConv, QLinearAdd and com.microsoft
    QLinearGlobalAveragePool (which only this format writes) on the int8 kernels,
    within one output step of onnxruntime int8."""
    from models import zoo as model_zoo

    dst = quantised(zoo, "resnet18", "QOperator")
    model = onnx.load(str(dst))
    assert "QLinearGlobalAveragePool" in {n.op_type for n in model.graph.node}
    theirs = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    ours = InferenceSession(dst, threads=2)
    assert ours.precision == "int8" and "conv_u8s8" in ours.kernel_paths, (ours.precision, ours.kernel_paths)
    feeds = model_zoo.random_inputs("resnet18", batch=2, seed=7)
    for out, a, r in zip(model.graph.output, ours.run(None, feeds), theirs.run(None, feeds)):
        step = output_step(model, out.name)
        diff = float(np.abs(np.asarray(a, np.float64) - r).max())
        assert diff <= step * 1.001, f"{out.name}: max |aie - ort| {diff} > one step {step}"


@pytest.mark.parametrize("name,fmt", [("mobilenetv2", "QDQ"), ("mobilenetv2", "QOperator")])
def test_onnxruntime_quantised_mobilenetv2_matches_onnxruntime_int8(zoo, name, fmt):
    """Both formats: every convolution on the int8 kernels (the depthwise ones on
    CONV_U8S8_DW), QGemm on GEMM_U8S8_PACKED, QLinearAdd in float32."""
    from models import zoo as model_zoo

    path = quantised(zoo, name, fmt)
    model = onnx.load(str(path))
    graph, _ = run_passes(import_file(path))
    ops = [n.op for n in graph.nodes]
    n_conv = sum(n.op_type in ("Conv", "QLinearConv") for n in model.graph.node)
    assert ops.count("QConvU8S8") == n_conv and "QGemmU8S8" in ops, ops  # the 17 depthwise ones too
    ours = InferenceSession(path, threads=1)
    assert ours.precision == "int8" and {"conv_u8s8", "conv_u8s8_dw"} <= set(ours.kernel_paths), ours.kernel_paths
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = model_zoo.random_inputs(name, batch=2, seed=99)
    for out, a, r in zip(model.graph.output, ours.run(None, feeds), theirs.run(None, feeds)):
        step = output_step(model, out.name)
        diff = float(np.abs(np.asarray(a, np.float64) - r).max())
        assert diff <= step * 1.001, f"{out.name}: max |aie - ort| {diff} > one step {step}"


def _quantised_step(model: onnx.ModelProto, name: str) -> float:
    """The output step of graph output `name`: the scale of the DequantizeLinear behind it, through
    an Identity or a Tanh (which moves no value by more than its input moves)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    node = producer[name]
    while node.op_type in ("Identity", "Tanh"):
        node = producer[node.input[0]]
    return output_step(model, node.output[0])


# The 7-bit model's data puts one QLinearSoftmax row (softmax_1, [1, 3, 66]) on a tie: onnxruntime
# writes 2 where QSOFTMAX_U8 and qsoftmax_reference (its code transcribed, element-order float32
# sum) write 3, and LayerNorm / Erf carry that to 5 output steps. onnxruntime's bytes for that row
# depend on the order of its elements, yet no float32 sum order tried (2..64 lanes, tree or serial
# combines) reproduces them over 400 permutations: open. Not the int8 saturation (the QDQ models,
# also 7-bit here, agree to 0 steps); on VNNI hosts the full-range model does not hit the tie.
_QSOFTMAX_TIE = pytest.mark.xfail(not ORT_INT8_EXACT_AT_FULL_RANGE, strict=False,
                                  reason="QLinearSoftmax tie in the 7-bit bert_mini QOperator model: open, see comment")


@pytest.mark.parametrize("fmt,per_channel", [("QDQ", True), ("QDQ", False),
                                             pytest.param("QOperator", True, marks=_QSOFTMAX_TIE)])
def test_onnxruntime_quantised_bert_mini_matches_onnxruntime_int8(zoo, fmt, per_channel, capsys):
    """bert_mini quantised by quantize_static (QDQ, quantize_static's default format, and QOperator)
    within one output step of onnxruntime int8 (default session options: ORT_ENABLE_ALL). What it
    takes: onnxruntime runs the QDQ groups as QLinearAdd / QLinearSoftmax / QLinearMatMul, whose
    arithmetic differs from the DequantizeLinear -> op -> QuantizeLinear steps on ties (QLinearAdd:
    one rounding, not three) and, for a softmax whose y_scale is float32(1/255), by the multiplier
    floor(1 / y_scale) = 254; both, compounding through LayerNorm and Erf, put the output ~9 steps
    away. ai-engine runs those groups in onnxruntime's arithmetic (QADD_U8 form 1, QSOFTMAX_U8, an
    int32 QLinearMatMul for attention's activation x activation products)."""
    from models import zoo as model_zoo

    path = quantised(zoo, "bert_mini", fmt, per_channel)
    model = onnx.load(str(path))
    graph, _ = run_passes(import_file(path))
    ops = [n.op for n in graph.nodes]
    assert ops.count("QSoftmaxU8") + ops.count("QLinearSoftmax") == 4 and ops.count("QGemmU8S8") >= 24, ops
    if fmt == "QDQ":  # every Softmax, Add between quantised tensors and attention product fused
        assert "Softmax" not in ops and ops.count("QLinearMatMul") == 8 and ops.count("QAddU8") >= 24, ops
    ours = InferenceSession(path, threads=1)
    assert ours.precision == "int8" and "gemm_u8s8" in ours.kernel_paths, ours.kernel_paths
    feeds = model_zoo.random_inputs("bert_mini", batch=2, seed=99)
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    for out, a, r in zip(model.graph.output, ours.run(None, feeds), theirs):
        step = _quantised_step(model, out.name)
        diff = float(np.abs(np.asarray(a, np.float64) - r).max())
        with capsys.disabled():
            print(f"\nbert_mini {fmt}{'' if per_channel else ' per tensor'} {out.name}: max |aie - ort int8| "
                  f"{diff:.3g} = {diff / step:.2f} steps")
        assert diff <= step * 1.001, f"{out.name}: max |aie - ort| {diff} > one step {step}"
