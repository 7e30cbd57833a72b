"""Static post-training quantisation to a standard QDQ ONNX model.

    quantize_file("model.onnx", "calib/", "model.int8.onnx")

calibration (`calibration`) → activation ranges measured by running the fp32
model in ai-engine → QuantizeLinear/DequantizeLinear inserted around every
Conv, MatMul and Gemm (`qdq`) → the error of the quantised model against fp32
on the same samples (`accuracy`), checked against the caller's limits before
the output file is written. The output is plain ONNX (opset >= 13) that
onnxruntime also runs, so users can check it with tools they already trust.
"""

from engine.quantize.accuracy import AccuracyReport, compare_outputs
from engine.quantize.calibration import Calibration, load_calibration
from engine.quantize.quantizer import QuantizeOptions, QuantizeResult, quantize_file

__all__ = ["AccuracyReport", "Calibration", "QuantizeOptions", "QuantizeResult", "compare_outputs",
           "load_calibration", "quantize_file"]
