"""Loop and Scan (engine.ops.loops) against onnx.reference / onnxruntime:
Scan and a Loop without scan outputs run as loops in the plan (run-time trip
count, data-dependent condition, zero iterations, carried values passed
through, the plan the same for every length); a Loop with scan outputs runs
in place too (a `for` loop; with a data-dependent condition its scan outputs
are bounded outputs: tests/runtime/test_ops_control_flow.py), or unrolled
where its body needs plan-time values per iteration."""

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


def test_loop_with_a_run_time_condition_and_scan_outputs(tmp_path):
    # once unsupported (it needed unrolling); the scan outputs are bounded outputs now
    check_op(tmp_path, "Loop", {"M": np.array(8, np.int64), "cond": np.array(True),
                                "acc0": RNG.standard_normal(2).astype(np.float32)},
             {"body": _loop_body(True)}, n_outputs=2, opset=16)


# -- Loop without scan outputs: a real loop in the plan (engine.ops.loops.lower_loop_in_place) --

def _carried_body(cond_from_data: bool, passthrough: bool = False):
    # acc' = acc * 0.5 + i; keep going while sum(acc') < limit (or the
    # incoming condition); `passthrough` also swaps two carried values
    # (a body output that is a body input: the copies must not interfere).
    nodes = [helper.make_node("Cast", ["i"], ["i_f"], to=F), helper.make_node("Mul", ["acc", "half"], ["h"]),
             helper.make_node("Add", ["h", "i_f"], ["acc_out"])]
    if cond_from_data:
        nodes += [helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
                  helper.make_node("Less", ["total", "limit"], ["c_out"])]
    else:
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    ins = [helper.make_tensor_value_info("i", TensorProto.INT64, []),
           helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
           helper.make_tensor_value_info("acc", F, [3])]
    outs = [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", F, [3])]
    if passthrough:
        ins += [helper.make_tensor_value_info("a", F, [3]), helper.make_tensor_value_info("b", F, [3])]
        outs += [helper.make_tensor_value_info("b", F, [3]), helper.make_tensor_value_info("a", F, [3])]
    return helper.make_graph(nodes, "body", ins, outs, [helper.make_tensor("half", F, [], [0.5]),
                                                        helper.make_tensor("limit", F, [], [40.0])])


def _loop_model(body, n_carried, trip=True, cond=True):
    ins = ([helper.make_tensor_value_info("M", TensorProto.INT64, [])] if trip else []) + \
          ([helper.make_tensor_value_info("cond", TensorProto.BOOL, [])] if cond else []) + \
          [helper.make_tensor_value_info(f"v{j}", F, [3]) for j in range(n_carried)]
    node = helper.make_node("Loop", ["M" if trip else "", "cond" if cond else ""] +
                            [f"v{j}" for j in range(n_carried)], [f"y{j}" for j in range(n_carried)], body=body)
    graph = helper.make_graph([node], "loop", ins, [helper.make_tensor_value_info(f"y{j}", F, [3])
                                                   for j in range(n_carried)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])


def _run_both(tmp_path, model, feeds):
    import onnx

    from engine.session import InferenceSession
    from tests.runtime.op_oracle import assert_outputs_match, reference_outputs

    want = reference_outputs(model, feeds, "onnxruntime")
    onnx.save(model, str(tmp_path / "loop.onnx"))
    sess = InferenceSession(tmp_path / "loop.onnx", threads=1)
    assert_outputs_match(sess.run(None, feeds), want, "Loop", 1e-5, 1e-6)
    return sess


def _acc():
    return RNG.standard_normal(3).astype(np.float32)


def test_loop_with_a_run_time_trip_count_is_one_plan_for_every_count(tmp_path):
    model = _loop_model(_carried_body(False), 1)
    sizes = set()
    for m in (0, 1, 5, 200):
        sess = _run_both(tmp_path, model, {"M": np.array(m, np.int64), "cond": np.array(True), "v0": _acc()})
        (plan,) = sess.plans()
        sizes.add((len(plan.steps), plan.arena_bytes))
    assert len(sizes) == 1, f"plan (steps, arena bytes) by trip count 0/1/5/200: {sizes}"


def test_loop_with_a_condition_computed_in_the_body(tmp_path):
    model = _loop_model(_carried_body(True), 1)
    for m in (3, 1000):   # stops on the trip count, then on the data
        _run_both(tmp_path, model, {"M": np.array(m, np.int64), "cond": np.array(True), "v0": _acc()})


def test_loop_with_only_a_condition_and_a_false_start(tmp_path):
    model = _loop_model(_carried_body(True), 1, trip=False)
    _run_both(tmp_path, model, {"cond": np.array(True), "v0": _acc()})
    _run_both(tmp_path, model, {"cond": np.array(False), "v0": _acc()})   # zero iterations


def test_loop_carried_values_passed_through_and_swapped(tmp_path):
    model = _loop_model(_carried_body(False, passthrough=True), 3)
    for m in (0, 3, 4):
        _run_both(tmp_path, model, {"M": np.array(m, np.int64), "cond": np.array(True), "v0": _acc(),
                                    "v1": _acc(), "v2": _acc()})


def test_scan_is_one_loop_whatever_its_length(tmp_path):
    # Scan runs in place: the plan's steps and arena are the same for 1, 7
    # and 300 iterations (the stacked output is the caller's memory).
    import onnx

    from engine.session import InferenceSession
    from tests.runtime.op_oracle import assert_outputs_match, reference_outputs

    sizes = set()
    for steps in (1, 7, 300):
        feeds = {"s0": RNG.standard_normal(3).astype(np.float32),
                 "xs": RNG.standard_normal((steps, 3)).astype(np.float32)}
        node = helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=_scan_body(), num_scan_inputs=1,
                                scan_output_directions=[1])
        graph = helper.make_graph([node], "scan", [helper.make_tensor_value_info("s0", F, [3]),
                                                   helper.make_tensor_value_info("xs", F, [steps, 3])],
                                  [helper.make_tensor_value_info("s", F, [3]),
                                   helper.make_tensor_value_info("ys", F, [steps, 3])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
        onnx.save(model, str(tmp_path / "scan.onnx"))
        sess = InferenceSession(tmp_path / "scan.onnx", threads=1)
        assert_outputs_match(sess.run(None, feeds), reference_outputs(model, feeds, "onnxruntime"), "Scan", 1e-5, 1e-6)
        (plan,) = sess.plans()
        sizes.add((len(plan.steps), plan.arena_bytes))
    assert len(sizes) == 1, f"plan (steps, arena bytes) by length 1/7/300: {sizes}"


@pytest.mark.parametrize("trips", [0, 6])
def test_a_for_loop_with_scan_outputs_runs_in_place(tmp_path, trips):
    # plan-time trip count, condition passed through: scan outputs stacked by COPY_AT, nothing unrolled
    import onnx

    from engine.session import InferenceSession
    from tests.runtime.op_oracle import assert_outputs_match, reference_outputs

    node = helper.make_node("Loop", ["M", "cond", "acc0"], ["acc", "sqs"], body=_loop_body(False))
    graph = helper.make_graph([node], "for", [helper.make_tensor_value_info("acc0", F, [2])],
                              [helper.make_tensor_value_info("acc", F, [2]),
                               helper.make_tensor_value_info("sqs", F, [trips, 2])],
                              [helper.make_tensor("M", TensorProto.INT64, [], [trips]),
                               helper.make_tensor("cond", TensorProto.BOOL, [], [True])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    onnx.save(model, str(tmp_path / "for.onnx"))
    feeds = {"acc0": RNG.standard_normal(2).astype(np.float32)}
    sess = InferenceSession(tmp_path / "for.onnx", threads=1)
    assert_outputs_match(sess.run(None, feeds), reference_outputs(model, feeds, "onnxruntime"), "Loop", 1e-5, 1e-6)
    from engine.kernels.abi import Op

    (plan,) = sess.plans()
    ops = list(plan.steps[:, 0])
    assert ops.count(Op.COPY_AT) == 1 and ops.count(Op.JUMP) == 1, f"not one loop: {ops}"


def test_a_body_that_needs_its_iteration_number_at_plan_time_is_unrolled(tmp_path):
    # Slice starts at the iteration number: fine unrolled (a constant each
    # time), not in place; the in-place attempt is dropped, the result right.
    import onnx

    from engine.session import InferenceSession
    from tests.runtime.op_oracle import assert_outputs_match, reference_outputs

    body = helper.make_graph(
        [helper.make_node("Unsqueeze", ["i", "ax"], ["st"]), helper.make_node("Add", ["st", "one"], ["en"]),
         helper.make_node("Slice", ["data", "st", "en"], ["piece"]),
         helper.make_node("Add", ["acc", "piece"], ["acc_out"]), helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("acc", F, [1])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, [1])],
        [helper.make_tensor("ax", TensorProto.INT64, [1], [0]), helper.make_tensor("one", TensorProto.INT64, [1], [1])])
    node = helper.make_node("Loop", ["M", "", "acc0"], ["acc"], body=body)
    graph = helper.make_graph([node], "slices", [helper.make_tensor_value_info("acc0", F, [1]),
                                                 helper.make_tensor_value_info("data", F, [5])],
                              [helper.make_tensor_value_info("acc", F, [1])],
                              [helper.make_tensor("M", TensorProto.INT64, [], [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    onnx.save(model, str(tmp_path / "slices.onnx"))
    feeds = {"acc0": np.zeros(1, np.float32), "data": RNG.standard_normal(5).astype(np.float32)}
    got = InferenceSession(tmp_path / "slices.onnx", threads=1).run(None, feeds)
    assert_outputs_match(got, reference_outputs(model, feeds, "onnxruntime"), "Loop", 1e-5, 1e-6)
