"""Symbolic dimensions through conversion, plans per concrete shape in a
bounded cache (builds and evictions counted), and max_shapes planned at
conversion."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from engine import aie_format
from engine.convert import PrecisionOptions, convert_file
from engine.errors import ConversionError
from engine.session import InferenceSession
from tests.runtime.op_oracle import assert_matches_ort

RNG = np.random.default_rng(31)


def conv_model(tmp_path):
    """x[batch, 3, height, width] -> Conv 3x3 -> Relu -> ReduceMean over height."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], RNG.standard_normal(108).astype(np.float32))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("ReduceMean", ["r"], ["y"], axes=[2], keepdims=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         ["batch", 3, "height", "width"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, "width"])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / "conv.onnx"
    onnx.save(model, str(path))
    return path


def test_symbolic_dims_stay_symbolic_in_the_aie_and_plans_are_per_shape(tmp_path):
    src = conv_model(tmp_path)
    convert_file(src, tmp_path / "conv.aie")
    model = aie_format.load(tmp_path / "conv.aie")
    assert list(model.graph.inputs[0].shape) == ["batch", 3, "height", "width"]
    sess = InferenceSession(tmp_path / "conv.aie", threads=1, plan_cache_size=2)
    for width in (7, 33, 7, 20):
        assert_matches_ort(src, {"x": RNG.standard_normal((2, 3, 5, width)).astype(np.float32)}, sess)
    # 7 (built), 33 (built), 7 (hit), 20 (built, evicts 33)
    stats = sess.plan_stats
    assert {k: stats[k] for k in ("plans", "capacity", "builds", "evictions")} == \
        {"plans": 2, "capacity": 2, "builds": 3, "evictions": 1}


def test_a_new_plan_takes_the_arena_of_an_evicted_one(tmp_path):
    src = conv_model(tmp_path)
    sess = InferenceSession(src, threads=1, plan_cache_size=1)
    x = RNG.standard_normal((1, 3, 64, 600)).astype(np.float32)  # a plan arena over 2 MiB
    assert_matches_ort(src, {"x": x}, sess)
    for width in (599, 598, 597):  # each evicts the last; a little smaller: its arena fits
        assert_matches_ort(src, {"x": x[..., :width].copy()}, sess)
    assert sess.plan_stats["arenas_reused"] == 3
    [plan] = sess.plans()
    assert plan.arenas_created == plan.arenas_taken == 1  # the first plan's arena, still charged to it


def test_max_shapes_are_planned_at_conversion(tmp_path):
    src = conv_model(tmp_path)
    small = convert_file(src, tmp_path / "a.aie")
    big = convert_file(src, tmp_path / "b.aie", precision=PrecisionOptions(max_shapes={"x": [4, 3, 32, 640]}))
    assert big.arena_bytes > small.arena_bytes
    assert {"inputs": {"x": [4, 3, 32, 640]}, "arena_bytes": big.arena_bytes} in big.planned_shapes
    assert aie_format.load(tmp_path / "b.aie").meta["planned"] == big.planned_shapes


@pytest.mark.parametrize("max_shapes,match", [({"y": [1, 3, 4, 4]}, "name inputs"),
                                              ({"x": [1, 4, 4, 4]}, "does not fit input 'x'")])
def test_bad_max_shapes_are_one_clear_error(tmp_path, max_shapes, match):
    with pytest.raises(ConversionError, match=match):
        convert_file(conv_model(tmp_path), tmp_path / "c.aie", precision=PrecisionOptions(max_shapes=max_shapes))
    assert not (tmp_path / "c.aie").exists()


def test_donors_that_fit_no_new_plan_leave_the_arena_budget(tmp_path):
    import gc

    from engine.arena import PLAN_ARENAS, ArenaPolicy

    src = conv_model(tmp_path)
    policy = ArenaPolicy(hugepages=False, owner="conv")
    sess = InferenceSession(src, threads=1, plan_cache_size=1, arena=policy)
    x = RNG.standard_normal((1, 3, 256, 600)).astype(np.float32)  # a plan arena of several MiB
    sess.run(None, {"x": x})
    gc.collect()
    # room for one plan arena of the larger shape only: a much smaller plan cannot take the donor,
    # so the donor must be dropped before the new arena is charged
    old, PLAN_ARENAS.limit = PLAN_ARENAS.limit, PLAN_ARENAS.used()
    try:
        assert_matches_ort(src, {"x": x[:, :, :8, :10].copy()}, sess)
    finally:
        PLAN_ARENAS.limit = old
    assert sess.plan_stats["arenas_reused"] == 0
