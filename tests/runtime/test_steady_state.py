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
    windows = []
    for _ in range(2):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(1000):
            sess.run(None, x)
        windows.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    # Python itself may fault pages once (a new 256 KiB allocator arena is
    # 64 pages, needed or not depending on what earlier tests left behind);
    # inference memory must not fault at all, so it would show in both
    # windows of 1000 runs: the quieter one must be well under one per run.
    assert min(windows) < 20, f"{windows} minor page faults over two windows of 1000 runs"
    [plan] = sess.plans()
    assert plan.arenas_created == 1
