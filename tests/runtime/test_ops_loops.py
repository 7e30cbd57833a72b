"""Scan and Loop unrolled at plan time (engine.ops.loops) against
onnx.reference; a data-dependent Loop condition is cleanly unsupported."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.runtime.op_oracle import check_op

RNG = np.random.default_rng(9)
F = TensorProto.FLOAT


def _scan_body():
    # state' = state + x_t * 2; out_t = state' (as Scan's per-step output)
    nodes = [helper.make_node("Mul", ["x_t", "two"], ["x2"]), helper.make_node("Add", ["s", "x2"], ["s_out"]),
             helper.make_node("Identity", ["s_out"], ["y_t"])]
    return helper.make_graph(nodes, "body", [helper.make_tensor_value_info("s", F, [3]),
                                             helper.make_tensor_value_info("x_t", F, [3])],
                             [helper.make_tensor_value_info("s_out", F, [3]),
                              helper.make_tensor_value_info("y_t", F, [3])],
                             [helper.make_tensor("two", F, [], [2.0])])


def test_scan_against_reference(tmp_path):
    check_op(tmp_path, "Scan", {"s0": RNG.standard_normal(3).astype(np.float32),
                                "xs": RNG.standard_normal((4, 3)).astype(np.float32)},
             {"body": _scan_body(), "num_scan_inputs": 1}, n_outputs=2, opset=16)


@pytest.mark.parametrize("in_dir,out_dir,out_axis", [(1, 0, 1), (0, 1, 0), (1, 1, -1)])
def test_scan_directions_and_axes(tmp_path, in_dir, out_dir, out_axis):
    # onnx.reference implements axis 0 / forward only: numpy is the oracle here.
    def oracle(feeds):
        s, xs = feeds["s0"].copy(), feeds["xs"]
        outs = []
        for t in range(xs.shape[1]):
            s = s + xs[:, xs.shape[1] - 1 - t if in_dir else t] * np.float32(2)
            outs.append(s)
        outs = outs[::-1] if out_dir else outs
        return [s, np.stack(outs, axis=out_axis)]

    check_op(tmp_path, "Scan", {"s0": RNG.standard_normal(3).astype(np.float32),
                                "xs": RNG.standard_normal((3, 4)).astype(np.float32)},
             {"body": _scan_body(), "num_scan_inputs": 1, "scan_input_axes": [1], "scan_input_directions": [in_dir],
              "scan_output_directions": [out_dir], "scan_output_axes": [out_axis]}, n_outputs=2, opset=16,
             oracle=oracle)


def _loop_body(cond_from_data: bool):
    nodes = [helper.make_node("Cast", ["i"], ["i_f"], to=F), helper.make_node("Add", ["acc", "i_f"], ["acc_out"]),
             helper.make_node("Mul", ["acc_out", "acc_out"], ["sq"])]
    if cond_from_data:
        nodes.append(helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0))
        nodes.append(helper.make_node("Less", ["total", "limit"], ["c_out"]))
        inits = [helper.make_tensor("limit", F, [], [10.0])]
    else:
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
        inits = []
    return helper.make_graph(nodes, "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                                             helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                                             helper.make_tensor_value_info("acc", F, [2])],
                             [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("acc_out", F, [2]),
                              helper.make_tensor_value_info("sq", F, [2])], inits)


def test_loop_with_a_trip_count_and_scan_outputs(tmp_path):
    check_op(tmp_path, "Loop", {"M": np.array(4, np.int64), "cond": np.array(True),
                                "acc0": RNG.standard_normal(2).astype(np.float32)},
             {"body": _loop_body(False)}, n_outputs=2, opset=16)


def test_loop_with_a_run_time_condition_is_cleanly_unsupported(tmp_path):
    from engine.errors import UnsupportedOperatorError

    with pytest.raises(UnsupportedOperatorError, match="condition computed at run time"):
        check_op(tmp_path, "Loop", {"M": np.array(8, np.int64), "cond": np.array(True),
                                    "acc0": RNG.standard_normal(2).astype(np.float32)},
                 {"body": _loop_body(True)}, n_outputs=2, opset=16)
