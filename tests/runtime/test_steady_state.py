"""Steady state: no minor page faults per inference after warm-up, a
bounded number of arenas, and flat RSS (the 10,000-run RSS check lives in
benchmarks/bench_models.py --steady-state; 1,000 runs here keep make test short)."""

from __future__ import annotations

import resource

import numpy as np

from engine.session import InferenceSession


def test_no_page_faults_after_warmup(zoo):
    sess = InferenceSession(zoo("cnn_bn"), threads=1)
    x = {"input": np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)}
    for _ in range(50):
        sess.run(None, x)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(1000):
        sess.run(None, x)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    # Python itself may fault a few pages (allocator arenas); inference
    # memory must not: well under one fault per run.
    assert faults < 20, f"{faults} minor page faults over 1000 runs"
    [plan] = sess.plans()
    assert plan.arenas_created == 1
