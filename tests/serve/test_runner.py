"""engine.server.runner.InstanceRunner: inferences on a C thread, completion
through an eventfd watched by the event loop (no executor thread, no GIL
hand-off). Real zoo model, real event loop; every answer compared with the
same session run directly."""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np
import pytest

from engine.errors import InvalidArgument
from engine.server.runner import InstanceRunner


class _Req:
    """The fields the runner reads from a scheduler request."""

    def __init__(self, inputs: dict, batch: int, out: dict | None = None):
        self.inputs, self.batch, self.out = inputs, batch, out


class _Model:
    def __init__(self, session):
        self.outputs = session.get_outputs()


def _eventfds() -> set[str]:
    """The process's open eventfds. Counting every fd made the test fail when
    an earlier test's leftovers (a socket, a pipe) opened or closed while it
    ran; only the runner makes eventfds here."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventfd]":
                out.add(fd)
        except OSError:  # closed between the listing and the readlink
            pass
    return out


def test_runner_answers_match_the_session(zoo_mlp):
    session = zoo_mlp.session()
    model = _Model(session)
    rng = np.random.default_rng(0)
    before = _eventfds()

    async def main():
        runner = InstanceRunner(asyncio.get_running_loop())
        assert len(_eventfds() - before) == 1, "the runner waits on one eventfd of its own"
        try:
            for i in range(200):
                # single requests and batches of several requests (joined, then split)
                sizes = [1] if i % 3 else [1, 2, 3]
                batch = [_Req({zoo_mlp.input: zoo_mlp.inputs(rng, n)}, n) for n in sizes]
                per_request, join_ns, infer_ns, split_ns = await runner.run(session, model, batch)
                assert len(per_request) == len(batch) and min(join_ns, infer_ns, split_ns) >= 0
                for req, out in zip(batch, per_request):
                    want = session.run(None, req.inputs)[0]
                    assert np.array_equal(out[zoo_mlp.output], want), f"run {i}"
        finally:
            runner.close()

    asyncio.run(main())
    assert _eventfds() <= before, "the runner's eventfd must be closed"


def test_runner_reports_bad_feeds_and_keeps_working(zoo_mlp):
    session = zoo_mlp.session()
    model = _Model(session)
    good = zoo_mlp.inputs(np.random.default_rng(1), 1)

    async def main():
        runner = InstanceRunner(asyncio.get_running_loop())
        try:
            with pytest.raises(InvalidArgument, match=zoo_mlp.input):
                await runner.run(session, model, [_Req({zoo_mlp.input: good[:, :5]}, 1)])
            out, *_ = await runner.run(session, model, [_Req({zoo_mlp.input: good}, 1)])
            assert np.array_equal(out[0][zoo_mlp.output], session.run(None, {zoo_mlp.input: good})[0])
        finally:
            runner.close()

    asyncio.run(main())


def test_close_with_a_run_in_flight_does_not_block_the_loop(zoo_mlp):
    """A drain that timed out closes a runner whose C thread is still busy:
    close() returns at once and the run finishes on its own (its buffers kept
    alive), instead of freeing them under the running thread."""
    session = zoo_mlp.session()
    model = _Model(session)
    x = zoo_mlp.inputs(np.random.default_rng(2), 4096)  # long enough to be in flight

    async def main():
        runner = InstanceRunner(asyncio.get_running_loop())
        task = asyncio.ensure_future(runner.run(session, model, [_Req({zoo_mlp.input: x}, 4096)]))
        for _ in range(1000):  # yield to the loop until the run is handed to the C thread
            if runner._pending is not None:
                break
            await asyncio.sleep(0)
        assert runner._pending is not None, "the run never started"
        t0 = time.monotonic()
        runner.close()
        closed_in = time.monotonic() - t0
        with pytest.raises(asyncio.CancelledError):
            await task
        return closed_in

    closed_in = asyncio.run(main())
    assert closed_in < 0.05, f"close() blocked the loop for {closed_in:.3f} s"
    # the session still works afterwards (its arena came back or a new one was made)
    y = session.run(None, {zoo_mlp.input: x[:2]})[0]
    assert y.shape == (2, zoo_mlp.classes)
