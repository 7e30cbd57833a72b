"""InferenceSession.profile: per-step times of the plan (benchmarks/profile_model.py reads them).

The profile runs each step as a one-step plan on the same tables and arena, so
it must leave the answers of a normal run unchanged, time every step, and
name every step's kernel."""

from __future__ import annotations

import numpy as np

from engine.session import InferenceSession
from models import zoo as model_zoo


def test_profile_times_every_step_and_keeps_answers(zoo):
    sess = InferenceSession(zoo("cnn_bn"), threads=1)
    feeds = model_zoo.random_inputs("cnn_bn", batch=2, seed=3)
    want = sess.run(None, feeds)
    rows = sess.profile(feeds, repeats=2)
    plan = sess.plans()[0]
    assert [r["index"] for r in rows] == list(range(plan.n_steps))
    assert all(r["ns"] > 0 and r["op_name"] != "?" for r in rows), rows
    names = {r["op_name"] for r in rows}
    assert {"conv", "pool"} <= names, names
    convs = [r for r in rows if r["op_name"] == "conv"]
    # conv steps carry aie_conv2d_params first: N, H, W, C, K, R, S (the
    # classifier's Gemm runs as a 1x1 conv: engine.passes.gemm_conv)
    assert all(r["ints"][0] == 2 for r in convs), [r["ints"][:7] for r in convs]
    assert sum(r["ints"][5:7] == [3, 3] for r in convs) == 3, [r["ints"][:7] for r in convs]
    for got, exp in zip(sess.run(None, feeds), want):
        assert np.array_equal(got, exp)
