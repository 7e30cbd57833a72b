"""Control flow whose output shapes only a run tells (engine.ops.loops
lower_while_loop_in_place, engine.ops.control, engine.plan_segments):
a Loop with scan outputs and a run-time trip count or condition runs as one
loop in the plan, its stacked outputs bounded outputs that grow by re-planning;
an If whose branches give different shapes cuts the plan after it. Every
model is built with onnx.helper and checked against onnxruntime on random
data."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from engine.errors import InvalidArgument, UnsupportedOperatorError
from engine.ops.loops import INITIAL_CAPACITY
from engine.plan_segments import SegmentedPlan
from engine.session import InferenceSession
from tests.runtime.op_oracle import assert_outputs_match, reference_outputs

RNG = np.random.default_rng(13)
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
OPSET = 17


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def _session(tmp_path, model, name="m"):
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return InferenceSession(path, threads=1)


def _check(sess, model, feeds, what="model"):
    got = sess.run(None, feeds)
    assert_outputs_match(got, reference_outputs(model, feeds, "onnxruntime"), what, 1e-5, 1e-6)
    return got


def _shape(plan: SegmentedPlan) -> tuple[int, int]:
    """The first segment's step count and arena: the loop's plan."""
    return len(plan.first.plan.steps), plan.first.plan.arena_bytes


# -- Loop with scan outputs and a run-time trip count --

def _body(cond_from_data=False):
    # acc' = acc * 0.5 + w * i (w: an outer-scope graph input); scan outputs
    # acc' (float [3]) and i * i (int64 []); while-form: go on while sum(acc') < limit
    nodes = [helper.make_node("Cast", ["i"], ["i_f"], to=F), helper.make_node("Mul", ["w", "i_f"], ["wi"]),
             helper.make_node("Mul", ["acc", "half"], ["h"]), helper.make_node("Add", ["h", "wi"], ["acc_out"]),
             helper.make_node("Identity", ["acc_out"], ["acc_t"]), helper.make_node("Mul", ["i", "i"], ["i2"])]
    if cond_from_data:
        nodes += [helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
                  helper.make_node("Less", ["total", "limit"], ["c_out"])]
    else:
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    return helper.make_graph(nodes, "body", [_vi("i", I64, []), _vi("c_in", B, []), _vi("acc", F, [3])],
                             [_vi("c_out", B, []), _vi("acc_out", F, [3]), _vi("acc_t", F, [3]), _vi("i2", I64, [])],
                             [helper.make_tensor("half", F, [], [0.5]), helper.make_tensor("limit", F, [], [40.0])])


def _loop_model(trip_input=True, cond_from_data=False, max_trip=None):
    body = _body(cond_from_data)
    ins = [_vi("acc0", F, [3]), _vi("w", F, [3])]
    inits = []
    if trip_input:
        ins.insert(0, _vi("M", I64, []))
    elif max_trip is not None:
        inits.append(helper.make_tensor("M", I64, [], [max_trip]))
    m = "M" if trip_input or max_trip is not None else ""
    inits.append(helper.make_tensor("go", B, [], [True]))
    node = helper.make_node("Loop", [m, "go", "acc0"], ["acc", "accs", "squares"], body=body)
    return _model([node], ins, [_vi("acc", F, [3]), _vi("accs", F, ["n", 3]), _vi("squares", I64, ["n"])], inits)


def _vec():
    return RNG.standard_normal(3).astype(np.float32)


def test_run_time_trip_count_is_one_loop_for_every_count(tmp_path):
    model = _loop_model()
    sess = _session(tmp_path, model)
    sizes = {}
    for m in (0, 1, 7, 300):
        _check(sess, model, {"M": np.array(m, np.int64), "acc0": _vec(), "w": _vec()}, f"Loop M={m}")
        (plan,) = sess.plans()
        assert isinstance(plan, SegmentedPlan)
        sizes[m] = _shape(plan)
    assert len(set(sizes.values())) == 1, f"plan (steps, arena bytes) by trip count: {sizes}"
    # 300 iterations outgrew the first room once; the room is kept
    assert list(plan.capacities.values()) == [300]
    _check(sess, model, {"M": np.array(299, np.int64), "acc0": _vec(), "w": _vec()}, "Loop M=299")
    assert plan.first.bounded.capacity == 300


def test_a_while_loop_with_scan_outputs(tmp_path):
    # no trip count: the body's data decides when to stop
    model = _loop_model(trip_input=False, cond_from_data=True)
    sess = _session(tmp_path, model)
    counts = set()
    for scale in (0.1, 1.0, 30.0):
        acc0 = np.full(3, -scale, np.float32)
        got = _check(sess, model, {"acc0": acc0, "w": np.abs(_vec()) * np.float32(scale / 10)}, "while")
        counts.add(got[1].shape[0])
    assert len(counts) > 1, f"every run made the same number of iterations {counts}: the test tests nothing"


def test_a_torch_style_while_with_a_huge_trip_count(tmp_path):
    # torch exports `while` as Loop(M=INT64_MAX, cond): the room stays the default
    model = _loop_model(trip_input=False, cond_from_data=True, max_trip=np.iinfo(np.int64).max)
    sess = _session(tmp_path, model)
    _check(sess, model, {"acc0": np.full(3, -3.0, np.float32), "w": np.full(3, 0.25, np.float32)}, "while M=max")
    (plan,) = sess.plans()
    assert plan.first.bounded.capacity >= INITIAL_CAPACITY


def test_a_plan_time_trip_count_with_a_run_time_condition_has_room_for_exactly_it(tmp_path):
    model = _loop_model(trip_input=False, cond_from_data=True, max_trip=5)
    sess = _session(tmp_path, model)
    for scale in (0.1, 30.0):
        _check(sess, model, {"acc0": np.full(3, -scale, np.float32), "w": np.full(3, scale / 10, np.float32)},
               "Loop M=5 while")
    (plan,) = sess.plans()
    assert plan.first.bounded.capacity == 5 and plan.builds == 0


def test_a_while_loop_after_a_cut_grows_its_own_segment(tmp_path):
    # two while loops in a row: the second starts a later segment (after the
    # first's cut) and outgrows its room there: that segment is re-planned.
    first, second = _body(True), _body(True)
    second.initializer[1].CopyFrom(helper.make_tensor("limit", F, [], [400.0]))
    nodes = [helper.make_node("Loop", ["", "go", "acc0"], ["acc", "accs", "squares"], body=first),
             helper.make_node("Loop", ["", "go", "acc"], ["acc2", "accs2", "squares2"], body=second)]
    model = _model(nodes, [_vi("acc0", F, [3]), _vi("w", F, [3])],
                   [_vi("acc2", F, [3]), _vi("accs", F, ["n", 3]), _vi("accs2", F, ["m", 3]),
                    _vi("squares2", I64, ["m"])], [helper.make_tensor("go", B, [], [True])])
    sess = _session(tmp_path, model)
    feeds = {"acc0": np.full(3, -1.0, np.float32), "w": np.full(3, 0.5, np.float32)}
    got = _check(sess, model, feeds, "two loops")
    assert got[1].shape[0] <= INITIAL_CAPACITY < got[2].shape[0], "the test should grow the second loop only"
    (plan,) = sess.plans()
    assert len(plan.capacities) == 1 and plan.first.bounded.capacity == INITIAL_CAPACITY
    _check(sess, model, feeds, "two loops again")


def test_trip_count_computed_from_data_feeds_more_ops(tmp_path):
    # M = how many of v are positive; the loop gathers v[i] (a run-time
    # index) into its state; its outputs feed a ReduceSum and an Add after the cut.
    body = helper.make_graph(
        [helper.make_node("Gather", ["v", "i"], ["vi"], axis=0), helper.make_node("Add", ["acc", "vi"], ["acc_out"]),
         helper.make_node("Mul", ["acc_out", "vi"], ["y"]), helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body", [_vi("i", I64, []), _vi("c_in", B, []), _vi("acc", F, [])],
        [_vi("c_out", B, []), _vi("acc_out", F, []), _vi("y", F, [])])
    nodes = [helper.make_node("Greater", ["v", "zero"], ["pos"]), helper.make_node("Cast", ["pos"], ["pos_i"], to=I64),
             helper.make_node("ReduceSum", ["pos_i"], ["m"], keepdims=0),
             helper.make_node("Loop", ["m", "", "acc0"], ["acc", "ys"], body=body),
             helper.make_node("ReduceSum", ["ys"], ["ys_sum"], keepdims=1),
             helper.make_node("Add", ["ys_sum", "acc"], ["total"]),
             helper.make_node("Shape", ["ys"], ["ys_len"])]
    model = _model(nodes, [_vi("v", F, [40]), _vi("acc0", F, [])],
                   [_vi("total", F, [1]), _vi("ys", F, ["n"]), _vi("ys_len", I64, [1])],
                   [helper.make_tensor("zero", F, [], [0.0])])
    sess = _session(tmp_path, model)
    for p_pos in (0.0, 0.2, 1.0):
        v = np.abs(RNG.standard_normal(40)).astype(np.float32) * np.where(RNG.random(40) < p_pos, 1, -1)
        got = _check(sess, model, {"v": v.astype(np.float32), "acc0": np.array(0.5, np.float32)}, f"p={p_pos}")
        assert got[1].shape == (int((v > 0).sum()),)
    (plan,) = sess.plans()
    # the count is computed in the plan: it is cut before the loop, whose segment reads it before running
    loops = [s for s in plan.cache.plans() if s.bounded is not None]
    assert plan.first.bounded is None and loops and all(s.bounded.trip is not None for s in loops)


# -- nested control flow --

def test_an_if_in_a_loop_body_and_outer_scope_values(tmp_path):
    # The body picks a branch per iteration from data (same shapes in both),
    # reading the graph's input `w`, an initializer and a value computed outside.
    then_g = helper.make_graph([helper.make_node("Mul", ["acc", "w2"], ["t"])], "then", [], [_vi("t", F, [3])])
    else_g = helper.make_graph([helper.make_node("Sub", ["acc", "bias"], ["e"])], "else", [], [_vi("e", F, [3])])
    body = helper.make_graph(
        [helper.make_node("ReduceSum", ["acc"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["pos"]),
         helper.make_node("If", ["pos"], ["nxt"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Identity", ["nxt"], ["acc_t"]),
         helper.make_node("ReduceSum", ["nxt"], ["t2"], keepdims=0), helper.make_node("Less", ["t2", "limit"], ["c"])],
        "body", [_vi("i", I64, []), _vi("c_in", B, []), _vi("acc", F, [3])],
        [_vi("c", B, []), _vi("nxt", F, [3]), _vi("acc_t", F, [3])])
    nodes = [helper.make_node("Mul", ["w", "two"], ["w2"]),
             helper.make_node("Loop", ["M", "", "acc0"], ["acc", "accs"], body=body)]
    model = _model(nodes, [_vi("M", I64, []), _vi("acc0", F, [3]), _vi("w", F, [3])],
                   [_vi("acc", F, [3]), _vi("accs", F, ["n", 3])],
                   [helper.make_tensor("two", F, [], [2.0]), helper.make_tensor("bias", F, [3], [0.5, -0.25, 1.0]),
                    helper.make_tensor("zero", F, [], [0.0]), helper.make_tensor("limit", F, [], [50.0])])
    sess = _session(tmp_path, model)
    for m in (0, 3, 40):
        _check(sess, model, {"M": np.array(m, np.int64), "acc0": _vec(), "w": np.abs(_vec()) + 0.6}, f"M={m}")
    assert len(sess.plans()) == 1, "one loop plan for every trip count (unrolled would be one per count)"


def _if_model(then_nodes, then_out, else_nodes, else_out, after=True, y_shape=("k",)):
    then_g = helper.make_graph(then_nodes, "then", [], [then_out])
    else_g = helper.make_graph(else_nodes, "else", [], [else_out])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    outs = [_vi("y", F, list(y_shape))]
    if after:   # the If's output feeds more ops: planned after the cut for the branch taken
        nodes += [helper.make_node("ReduceSum", ["y"], ["ys"], keepdims=0), helper.make_node("Mul", ["y", "ys"], ["z"])]
        outs.append(_vi("z", F, list(y_shape)))
    return _model(nodes, [_vi("x", F, [4]), _vi("M", I64, [])], outs, [helper.make_tensor("zero", F, [], [0.0])])


def test_if_with_branches_of_different_shapes(tmp_path):
    model = _if_model([helper.make_node("Neg", ["x"], ["t"])], _vi("t", F, [4]),
                      [helper.make_node("Concat", ["x", "x", "x"], ["e"], axis=0)], _vi("e", F, [12]))
    sess = _session(tmp_path, model)
    for sign in (1, -1, 1):
        x = (np.abs(RNG.standard_normal(4)) * sign).astype(np.float32)
        got = _check(sess, model, {"x": x, "M": np.array(0, np.int64)}, f"If sign {sign}")
        assert got[0].shape == ((4,) if sign > 0 else (12,))
    (plan,) = sess.plans()
    assert plan.builds == 2, "one plan per branch's shapes after the cut, reused"


def test_a_loop_in_an_if_branch_with_another_shape_in_the_other(tmp_path):
    # then: a `for` Loop stacking M rows (M a graph input: the plan is keyed
    # by it); else: two rows. The If picks at run time: a cut after it.
    body = helper.make_graph([helper.make_node("Cast", ["i"], ["i_f"], to=F),
                              helper.make_node("Mul", ["x", "i_f"], ["r"]),
                              helper.make_node("Identity", ["c_in"], ["c_out"])],
                             "body", [_vi("i", I64, []), _vi("c_in", B, [])], [_vi("c_out", B, []), _vi("r", F, [4])])
    then_nodes = [helper.make_node("Loop", ["M", ""], ["rows"], body=body)]
    else_nodes = [helper.make_node("Unsqueeze", ["x", "ax"], ["x1"]),
                  helper.make_node("Concat", ["x1", "x1"], ["rows2"], axis=0)]
    model = _if_model(then_nodes, _vi("rows", F, ["m", 4]), else_nodes, _vi("rows2", F, [2, 4]), y_shape=("k", 4))
    model.graph.initializer.append(helper.make_tensor("ax", I64, [1], [0]))
    sess = _session(tmp_path, model)
    for sign, m in ((1, 5), (-1, 5), (1, 2), (1, 0)):
        x = (np.abs(RNG.standard_normal(4)) * sign).astype(np.float32)
        _check(sess, model, {"x": x, "M": np.array(m, np.int64)}, f"If sign {sign} M={m}")


def _up():
    # positive weights: the body's sum grows past its limit, so a while loop ends
    return (np.abs(RNG.standard_normal(3)) + 0.5).astype(np.float32)


def test_a_run_time_length_loop_inside_a_branch_runs_the_branch_on_the_host(tmp_path):
    # the stacked output's length is known only after the run, and a
    # subgraph cannot cut the plan: the If runs on the host, its branch a plan of its own
    then_nodes = [helper.make_node("Loop", ["", "c", "acc0"], ["acc_final", "accs", "squares"], body=_body(True))]
    model = _if_model(then_nodes, _vi("accs", F, ["n", 3]), [helper.make_node("Neg", ["w"], ["e"]),
                                                           helper.make_node("Unsqueeze", ["e", "ax"], ["e2"])],
                      _vi("e2", F, ["n", 3]), y_shape=("n", 3))
    model.graph.initializer.append(helper.make_tensor("ax", I64, [1], [0]))
    model.graph.input.extend([_vi("acc0", F, [3]), _vi("w", F, [3])])
    sess = _session(tmp_path, model)
    for sign in (1, -1, 1):
        feeds = {"x": np.full(4, sign, np.float32), "M": np.array(0, np.int64), "acc0": _vec(), "w": _up()}
        _check(sess, model, feeds, f"If sign {sign}")
    (plan,) = sess.plans()
    assert isinstance(plan, SegmentedPlan) and plan.builds >= 2


def test_different_branch_shapes_inside_a_loop_body_run_the_loop_on_the_host(tmp_path):
    then_g = helper.make_graph([helper.make_node("Identity", ["acc"], ["t"])], "then", [], [_vi("t", F, [3])])
    else_g = helper.make_graph([helper.make_node("Concat", ["acc", "acc"], ["e"], axis=0)], "else", [],
                               [_vi("e", F, [6])])
    body = helper.make_graph([helper.make_node("ReduceSum", ["acc"], ["s"], keepdims=0),
                              helper.make_node("Greater", ["s", "zero"], ["pos"]),
                              helper.make_node("If", ["pos"], ["y"], then_branch=then_g, else_branch=else_g),
                              helper.make_node("Identity", ["c_in"], ["c_out"])],
                             "body", [_vi("i", I64, []), _vi("c_in", B, []), _vi("acc", F, [3])],
                             [_vi("c_out", B, []), _vi("acc", F, [3]), _vi("y", F, ["k"])],
                             [helper.make_tensor("zero", F, [], [0.0])])
    node = helper.make_node("Loop", ["M", "go", "acc0"], ["acc", "ys"], body=body)
    model = _model([node], [_vi("M", I64, []), _vi("go", B, []), _vi("acc0", F, [3])],
                   [_vi("acc", F, [3]), _vi("ys", F, ["n", "k"])])
    sess = _session(tmp_path, model)
    for sign, m in ((1, 2), (-1, 3), (1, 1)):
        feeds = {"M": np.array(m, np.int64), "go": np.array(True), "acc0": np.abs(_vec()) * sign}
        _check(sess, model, feeds, f"Loop M={m} If sign {sign}")


def test_a_run_time_length_loop_two_levels_down_runs_on_the_host(tmp_path):
    # If 'outer' > Loop 'middle' (two iterations) > Loop 'inner' (a while loop with scan outputs)
    inner = helper.make_node("Loop", ["", "go", "acc"], ["acc_out", "accs", "squares"], body=_body(True), name="inner")
    middle_body = helper.make_graph(
        [inner, helper.make_node("ReduceSum", ["accs"], ["s"], keepdims=0),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "middle_body", [_vi("j", I64, []), _vi("c_in", B, []), _vi("acc", F, [3])],
        [_vi("c_out", B, []), _vi("acc_out", F, [3]), _vi("s", F, [])])
    middle = helper.make_node("Loop", ["two", "", "acc0"], ["acc_m", "sums"], body=middle_body, name="middle")
    then_g = helper.make_graph([middle], "then", [], [_vi("sums", F, [2])])
    else_g = helper.make_graph([helper.make_node("ReduceSum", ["acc0"], ["e"], keepdims=1),
                                helper.make_node("Concat", ["e", "e"], ["ee"], axis=0)],
                               "else", [], [_vi("ee", F, [2])])
    outer = helper.make_node("If", ["p"], ["y"], then_branch=then_g, else_branch=else_g, name="outer")
    model = _model([outer], [_vi("p", B, []), _vi("acc0", F, [3]), _vi("w", F, [3])], [_vi("y", F, [2])],
                   [helper.make_tensor("two", I64, [], [2]), helper.make_tensor("go", B, [], [True])])
    sess = _session(tmp_path, model)
    for p in (True, False):
        _check(sess, model, {"p": np.array(p), "acc0": _vec(), "w": _up()}, f"If {p} > Loop > while Loop")


def test_a_run_time_length_loop_in_a_scan_body_names_both(tmp_path):
    # Scan is not run on the host: one clear line naming the Scan and the Loop in it
    inner = helper.make_node("Loop", ["", "go", "x_t"], ["acc_out", "accs", "squares"], body=_body(True), name="inner")
    body = helper.make_graph([inner, helper.make_node("ReduceSum", ["accs"], ["s"], keepdims=0),
                              helper.make_node("Add", ["st", "s"], ["st_out"]),
                              helper.make_node("Identity", ["s"], ["s2"])],
                             "scan_body", [_vi("st", F, []), _vi("x_t", F, [3])],
                             [_vi("st_out", F, []), _vi("s2", F, [])])
    scan = helper.make_node("Scan", ["st0", "xs"], ["st", "ss"], body=body, num_scan_inputs=1, name="outer")
    model = _model([scan], [_vi("st0", F, []), _vi("xs", F, [2, 3]), _vi("w", F, [3])],
                   [_vi("st", F, []), _vi("ss", F, [2])], [helper.make_tensor("go", B, [], [True])])
    sess = _session(tmp_path, model)
    nested = r"Loop \(node 'inner'.*inside a subgraph of Scan \(node 'outer'\)"
    with pytest.raises(UnsupportedOperatorError, match=nested):
        sess.run(None, {"st0": np.array(0, np.float32), "xs": np.ones((2, 3), np.float32), "w": _up()})


# -- a trip count known before the loop sizes its room: one run per call --

@pytest.mark.parametrize("m", [0, 1, 7, 300, 1000])
def test_a_given_trip_count_runs_its_segment_once(tmp_path, m):
    model = _loop_model()
    sess = _session(tmp_path, model)
    _check(sess, model, {"M": np.array(3, np.int64), "acc0": _vec(), "w": _vec()}, "Loop M=3")
    (plan,) = sess.plans()
    runs = plan.segment_runs
    _check(sess, model, {"M": np.array(m, np.int64), "acc0": _vec(), "w": _vec()}, f"Loop M={m}")
    assert plan.segment_runs - runs == 1, f"M={m}: the loop's segment ran {plan.segment_runs - runs} times"
    assert plan.first.bounded.capacity >= m


def test_a_trip_count_too_large_to_hold_its_outputs_is_one_clear_line(tmp_path):
    model = _loop_model()
    sess = _session(tmp_path, model)
    with pytest.raises(InvalidArgument, match=r"Loop producing 'acc', 'accs', 'squares' has a trip count of "
                                              r"1000000000000: its outputs would take \d+ bytes, more than"):
        sess.run(None, {"M": np.array(10**12, np.int64), "acc0": _vec(), "w": _vec()})
    _check(sess, model, {"M": np.array(4, np.int64), "acc0": _vec(), "w": _vec()}, "Loop M=4 after the refusal")


def test_a_trip_count_computed_by_an_earlier_segment_runs_the_loop_once(tmp_path):
    # M = sum(k) is computed from data after NonZero's cut; the plan is cut
    # again before the loop, whose segment reads M before it runs
    node = _loop_model().graph.node[0]
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("ReduceSum", ["k"], ["M"], keepdims=0), node]
    model = _model(nodes, [_vi("x", F, [5]), _vi("k", I64, [2]), _vi("acc0", F, [3]), _vi("w", F, [3])],
                   [_vi("nz", I64, [1, "z"]), _vi("acc", F, [3]), _vi("accs", F, ["n", 3]),
                    _vi("squares", I64, ["n"])], [helper.make_tensor("go", B, [], [True])])
    sess = _session(tmp_path, model)
    for k in ((1, 2), (100, 200), (0, 0), (400, 600)):
        x = np.where(RNG.random(5) < 0.5, 0, 1).astype(np.float32)
        feeds = {"x": x, "k": np.array(k, np.int64), "acc0": _vec(), "w": _vec()}
        (plan,) = sess.plans() or (None,)
        runs = plan.segment_runs if plan is not None else 0
        _check(sess, model, feeds, f"M={sum(k)} after a cut")
        (plan,) = sess.plans()
        # NonZero | ReduceSum (a cut before the loop, which reads M before it starts) | Loop
        assert plan.segment_runs - runs == 3, f"k={k}: {plan.segment_runs - runs} segment runs for 3 segments"


# -- out= with output shapes only the run tells --

def test_out_arrays_for_a_segmented_plan(tmp_path):
    model = _loop_model()
    sess = _session(tmp_path, model)
    m = 9
    feeds = {"M": np.array(m, np.int64), "acc0": _vec(), "w": _vec()}
    want = reference_outputs(model, feeds, "onnxruntime")
    out = [np.empty(3, np.float32), np.empty((m, 3), np.float32), np.empty(m, np.int64)]
    got = sess.run(None, feeds, out=out)
    assert all(g is o for g, o in zip(got, out))
    assert_outputs_match(got, want, "out= all outputs", 1e-5, 1e-6)
    squares = np.empty(m, np.int64)
    (got,) = sess.run(["squares"], feeds, out=[squares])
    assert got is squares and np.array_equal(squares, want[2])
    # a shape that is not what this run produced: named, nothing written
    short = [np.zeros(3, np.float32), np.zeros((m - 1, 3), np.float32), np.zeros(m, np.int64)]
    with pytest.raises(InvalidArgument, match=r"output 'accs' is float32 \[8, 3\]; this run produced float32 \[9, 3\]"):
        sess.run(None, feeds, out=short)
    assert not any(a.any() for a in short)
    with pytest.raises(InvalidArgument, match="output 'squares' is int32"):
        sess.run(["squares"], feeds, out=[np.empty(m, np.int32)])
    with pytest.raises(InvalidArgument, match="non-contiguous"):
        sess.run(["accs"], feeds, out=[np.empty((3, m), np.float32).T])
    with pytest.raises(InvalidArgument, match="list of 1 arrays"):
        sess.run(["accs"], feeds, out=np.empty((m, 3), np.float32))
    # a binding prepared once cannot know these shapes: one clear line
    binding = sess.io_binding()
    for name, a in feeds.items():
        binding.bind_cpu_input(name, a)
    binding.bind_output("accs")
    with pytest.raises(InvalidArgument, match="pass out= to run"):
        sess.run_with_iobinding(binding)


# -- one session, two threads, rooms learned while both run --

def _feeds_growing(trip_input: bool) -> list[dict]:
    if trip_input:
        return [{"M": np.array(m, np.int64), "acc0": _vec(), "w": _vec()} for m in (2, 20, 50, 130, 700, 5)]
    return [{"acc0": np.full(3, -s, np.float32), "w": np.full(3, s / 10, np.float32)}
            for s in (0.1, 3.0, 30.0, 100.0, 300.0, 1.0)]


@pytest.mark.parametrize("trip_input", [True, False], ids=["for", "while"])
def test_one_session_learns_its_rooms_from_two_threads(tmp_path, trip_input):
    model = _loop_model(trip_input=trip_input, cond_from_data=not trip_input)
    feeds = _feeds_growing(trip_input)
    want = [reference_outputs(model, f, "onnxruntime") for f in feeds]
    lengths = sorted({w[1].shape[0] for w in want})
    assert lengths[0] < INITIAL_CAPACITY and lengths[-1] > 4 * INITIAL_CAPACITY, lengths
    sess = _session(tmp_path, model)
    start, errors = threading.Barrier(2, timeout=60), []

    def worker(order):
        try:
            start.wait()
            for _ in range(3):
                for i in order:
                    assert_outputs_match(sess.run(None, feeds[i]), want[i], f"feeds {i}", 1e-5, 1e-6)
        except BaseException as exc:   # reported by the main thread
            errors.append(exc)

    n = len(feeds)
    threads = [threading.Thread(target=worker, args=(order,)) for order in (range(n), range(n - 1, -1, -1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a run did not finish within 2 minutes"
    assert not errors, errors[0]
    (plan,) = sess.plans()
    assert list(plan.capacities.values())[0] >= lengths[-1]
