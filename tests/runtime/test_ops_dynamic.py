"""Data-dependent output shapes (engine.ops.dynamic, engine.plan_segments):
NonZero, Compress, Unique, NonMaxSuppression and TopK with a computed K,
with empty and full outputs, against onnxruntime; graphs that go on after
the cut; the bounded cache of the segments after a cut."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from engine.session import InferenceSession
from engine.plan_segments import SEGMENT_CACHE_SIZE, SegmentedPlan
from tests.runtime.op_oracle import assert_outputs_match, check_op, reference_outputs

RNG = np.random.default_rng(13)


def sparse(shape, density, dtype=np.float32):
    x = RNG.standard_normal(shape).astype(dtype)
    x[RNG.random(shape) >= density] = 0
    return x


@pytest.mark.parametrize("density", [0.0, 0.4, 1.0])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_nonzero_empty_some_and_full(tmp_path, density, dtype):
    x = sparse((3, 5, 7), density)
    if dtype is np.bool_:
        x = x != 0
    check_op(tmp_path, "NonZero", {"x": x.astype(dtype)}, opset=13, oracle="onnxruntime")


def test_nonzero_of_negative_zero_and_nan(tmp_path):
    x = np.array([[0.0, -0.0, np.nan], [1.0, 0.0, -2.0]], np.float32)
    check_op(tmp_path, "NonZero", {"x": x}, opset=13, oracle="onnxruntime")


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("density", [0.0, 0.5, 1.0])
def test_compress_with_a_run_time_condition(tmp_path, axis, density):
    x = RNG.standard_normal((4, 6, 5)).astype(np.float32)
    n = x.size if axis is None else x.shape[axis]
    cond = RNG.random(n - 1) < density  # shorter than the axis: the rest is dropped
    check_op(tmp_path, "Compress", {"x": x, "c": cond}, {} if axis is None else {"axis": axis}, opset=11,
             oracle="onnxruntime")


def test_compress_with_a_constant_condition_stays_in_the_plan(tmp_path):
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    cond = np.array([1, 0, 1, 1, 0, 1], bool)
    check_op(tmp_path, "Compress", {"x": x, "c": cond}, {"axis": 1}, constants={"c": cond}, opset=11,
             oracle="onnxruntime")
    sess = InferenceSession(tmp_path / "Compress.onnx", threads=1)
    sess.run(None, {"x": x})
    assert not isinstance(sess.plans()[0], SegmentedPlan)


@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_unique_all_outputs(tmp_path, sorted_, axis):
    x = RNG.integers(0, 3, (6, 4)).astype(np.float32)  # repeated rows and values
    x[2] = x[4]
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    check_op(tmp_path, "Unique", {"x": x}, attrs, n_outputs=4, opset=11, oracle="onnxruntime")


@pytest.mark.parametrize("values", ["one", "all"])
def test_unique_one_group_and_all_distinct(tmp_path, values):
    x = np.full(9, 7, np.int64) if values == "one" else RNG.permutation(9).astype(np.int64)
    check_op(tmp_path, "Unique", {"x": x}, {"sorted": 0}, n_outputs=4, opset=11, oracle="onnxruntime")


def nms_inputs(batches=2, boxes=40, classes=3, center=False):
    xy = RNG.random((batches, boxes, 2)).astype(np.float32) * 10
    wh = RNG.random((batches, boxes, 2)).astype(np.float32) * 4 + 0.5
    if center:
        b = np.concatenate([xy, wh], axis=2)
    else:
        b = np.concatenate([xy, xy + wh], axis=2)
        b[:, ::3] = b[:, ::3][..., [2, 3, 0, 1]]  # corners in either order
    scores = RNG.random((batches, classes, boxes)).astype(np.float32)
    scores[:, :, 5] = scores[:, :, 6]  # a tie: the lower index first
    return b, scores


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("max_out,iou,score", [(0, 0.5, 0.0), (100, 1.0, None), (3, 0.4, 0.3), (100, 0.0, 2.0)])
def test_nms_against_onnxruntime(tmp_path, center, max_out, iou, score):
    boxes, scores = nms_inputs(center=bool(center))
    inputs = {"boxes": boxes, "scores": scores, "m": np.array([max_out], np.int64),
              "iou": np.array([iou], np.float32), "score": None if score is None else np.array([score], np.float32)}
    check_op(tmp_path, "NonMaxSuppression", inputs, {"center_point_box": center}, opset=11, oracle="onnxruntime")


def test_nms_with_constant_limits(tmp_path):
    boxes, scores = nms_inputs(batches=1, boxes=64, classes=2)
    limits = {"m": np.array([5], np.int64), "iou": np.array([0.5], np.float32), "score": np.array([0.2], np.float32)}
    check_op(tmp_path, "NonMaxSuppression", {"boxes": boxes, "scores": scores, **limits}, constants=limits, opset=11,
             oracle="onnxruntime")


def save(tmp_path, nodes, inputs, outputs, name="m", inits=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return model, path


def nonzero_then_compute(tmp_path):
    """idx = NonZero(x > 0); y = x[idx] * 2 summed, and the count, and
    TopK of x with K = the count (a computed K)."""
    nodes = [helper.make_node("Greater", ["x", "zero"], ["pos"]),
             helper.make_node("NonZero", ["pos"], ["idx"]),
             helper.make_node("Transpose", ["idx"], ["idxT"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idxT"], ["vals"]),
             helper.make_node("Mul", ["vals", "two"], ["vals2"]),
             helper.make_node("ReduceSum", ["vals2"], ["total"], keepdims=0),
             helper.make_node("Shape", ["idx"], ["shape"]),
             helper.make_node("Slice", ["shape", "one", "two_i"], ["k"]),
             helper.make_node("Reshape", ["x", "minus1"], ["flat"]),
             helper.make_node("TopK", ["flat", "k"], ["top", "top_i"])]
    inits = [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
             helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
             helper.make_tensor("one", TensorProto.INT64, [1], [1]),
             helper.make_tensor("two_i", TensorProto.INT64, [1], [2]),
             helper.make_tensor("minus1", TensorProto.INT64, [1], [-1])]
    return save(tmp_path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
                [helper.make_tensor_value_info(n, t, s) for n, t, s in
                 (("vals2", 1, ["K"]), ("total", 1, []), ("shape", 7, [2]), ("top", 1, ["K"]), ("top_i", 7, ["K"]))],
                inits=inits)


def test_a_graph_goes_on_after_the_cut_and_caches_its_segments(tmp_path):
    model, path = nonzero_then_compute(tmp_path)
    sess = InferenceSession(path, threads=1)
    densities = [0.0, 0.3, 1.0] + [0.5] * 3
    for density in densities:
        x = sparse((3, 8), density)
        x[x < 0] *= -1
        x[RNG.random(x.shape) < 0.5] *= -1
        feeds = {"x": x}
        assert_outputs_match(sess.run(None, feeds), reference_outputs(model, feeds, "onnxruntime"), "nonzero graph")
    [plan] = sess.plans()
    assert isinstance(plan, SegmentedPlan)
    # the segments after the cut: one per count seen, bounded
    assert 1 <= plan.builds <= len(densities) * 2 and len(plan.cache) <= SEGMENT_CACHE_SIZE


def test_the_server_path_binds_a_segmented_plan(tmp_path):
    model, path = nonzero_then_compute(tmp_path)
    sess = InferenceSession(path, threads=1)
    feeds = {"x": sparse((3, 8), 0.5)}
    bound = sess.bind(feeds)
    try:
        assert_outputs_match(bound.outs, reference_outputs(model, feeds, "onnxruntime"), "bound")
    finally:
        bound.release()


def test_a_data_dependent_node_inside_a_subgraph_runs_the_branch_on_the_host(tmp_path):
    # a subgraph cannot cut the plan: the If runs on the host (engine.plan_segments HostSegment)
    branch = helper.make_graph([helper.make_node("NonZero", ["x"], ["nz"])], "b", [],
                               [helper.make_tensor_value_info("nz", TensorProto.INT64, [1, "K"])])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)]
    _, path = save(tmp_path, nodes, [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                     helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                   [helper.make_tensor_value_info("y", TensorProto.INT64, [1, "K"])])
    model = onnx.load(str(path))
    sess = InferenceSession(path, threads=1)
    for c, x in ((True, np.ones(4, np.float32)), (False, np.array([0, 2, 0, 3], np.float32)),
                 (True, np.zeros(4, np.float32))):
        feeds = {"c": np.array(c), "x": x}
        assert_outputs_match(sess.run(None, feeds), reference_outputs(model, feeds, "onnxruntime"), "NonZero in If")


def test_detector_with_nms_in_the_graph_converts_runs_and_matches_onnxruntime(zoo, tmp_path):
    from engine.convert import convert_file
    from models import zoo as model_zoo
    from tests.runtime.op_oracle import assert_matches_ort

    path = zoo("detector_nms")
    convert_file(path, tmp_path / "detector_nms.aie")
    sess = InferenceSession(tmp_path / "detector_nms.aie", threads=2)
    for batch in (1, 2):
        assert_matches_ort(path, model_zoo.random_inputs("detector_nms", batch=batch, seed=batch), sess)
    assert isinstance(sess.plans()[0], SegmentedPlan)


def test_a_data_dependent_node_over_constants_is_folded_at_plan_time(tmp_path):
    x = sparse((4, 5), 0.5)
    check_op(tmp_path, "NonZero", {"x": x}, constants={"x": x}, opset=13, oracle="onnxruntime")
    sess = InferenceSession(tmp_path / "NonZero.onnx", threads=1)
    sess.run(None, {})
    assert not isinstance(sess.plans()[0], SegmentedPlan)


def test_topk_with_a_k_computed_from_data_cuts_the_plan_before_it(tmp_path):
    nodes = [helper.make_node("ReduceMax", ["n"], ["k"], keepdims=1),  # K from values, not shapes
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("TopK", ["r", "k"], ["v", "i"])]
    model, path = save(tmp_path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 9]),
                                         helper.make_tensor_value_info("n", TensorProto.INT64, [3])],
                       [helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, "K"]),
                        helper.make_tensor_value_info("i", TensorProto.INT64, [2, "K"])], name="topk")
    sess = InferenceSession(path, threads=1)
    for n in ([1, 0, 4], [9, 2, 2], [0, 0, 0], [1, 0, 4]):
        feeds = {"x": RNG.standard_normal((2, 9)).astype(np.float32), "n": np.array(n, np.int64)}
        assert_outputs_match(sess.run(None, feeds), reference_outputs(model, feeds, "onnxruntime"), f"topk {n}")
    [plan] = sess.plans()
    assert isinstance(plan, SegmentedPlan) and plan.builds == 3  # one per K; the repeated K from the cache


def test_the_server_does_not_batch_a_model_whose_outputs_do_not_follow_the_batch(zoo):
    from engine.server.config import ModelConfig
    from engine.server.models import LoadedModel

    for name, batchable in (("detector_nms", False), ("detector", True)):
        model = LoadedModel(ModelConfig(name=name, path=str(zoo(name)), max_batch_size=8), threads=1)
        try:
            assert model.batchable is batchable, name
        finally:
            model.close()
