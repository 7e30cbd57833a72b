"""A model instance's inferences on a C thread of their own (aie_exec_runner),
their completion seen by the event loop through an eventfd.

Why not a Python executor thread: handing a run to a ThreadPoolExecutor and
back costs two thread wake-ups and two GIL hand-overs, measured at ~50 us
per request on the 2-core test VM (the MLP computes in ~95 us). Here the
loop binds the run (feeds checked, arena taken: microseconds), a C thread
that never touches Python runs it, and the loop wakes on the eventfd: the
loop still never blocks on compute, and the GIL never changes hands.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from engine.errors import KernelError
from engine.runtime import ExecThread

def join_feeds(batch) -> dict[str, np.ndarray]:
    """One request's inputs as they are; a batch's concatenated along axis 0."""
    if len(batch) == 1:
        return batch[0].inputs
    return {name: np.concatenate([r.inputs[name] for r in batch]) for name in batch[0].inputs}


def split_outputs(names: list[str], results: list[np.ndarray], batch) -> list[dict[str, np.ndarray]]:
    if len(batch) == 1:
        return [dict(zip(names, results))]
    per_request, offset = [], 0
    for r in batch:
        per_request.append({n: a[offset:offset + r.batch] for n, a in zip(names, results)})
        offset += r.batch
    return per_request


def _run_on_thread(session, model, batch):
    t0 = time.perf_counter_ns()
    feeds = join_feeds(batch)
    t1 = time.perf_counter_ns()
    results = session.run(None, feeds)
    t2 = time.perf_counter_ns()
    per_request = split_outputs([t.name for t in model.outputs], [np.asarray(a) for a in results], batch)
    return per_request, t1 - t0, t2 - t1, time.perf_counter_ns() - t2


class InstanceRunner:
    """One run at a time (an instance's worker awaits each batch)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            self._exec: ExecThread | None = ExecThread(self._fd)
        except KernelError:
            os.close(self._fd)
            raise
        self._pending = None  # (future, BoundRun, session) while a run is out
        self._thread = None
        loop.add_reader(self._fd, self._done)

    async def run(self, session, model, batch) -> tuple[list[dict], int, int, int]:
        """Join, run, split: per-request outputs and (join, infer, split) ns."""
        if not hasattr(session, "bind"):
            # a session type substituted through AIE_SERVE_SESSION_FACTORY
            # (no plan to bind): it runs on a Python thread instead
            if self._thread is None:
                self._thread = ThreadPoolExecutor(1, thread_name_prefix="infer")
            return await self._loop.run_in_executor(self._thread, _run_on_thread, session, model, batch)
        t0 = time.perf_counter_ns()
        feeds = join_feeds(batch)
        # A request alone writes straight into the arrays it brought (shared
        # memory); a batch's outputs are split and copied by the server.
        bound = session.bind(feeds, out=batch[0].out if len(batch) == 1 else None)
        future = self._loop.create_future()
        t1 = time.perf_counter_ns()
        try:
            self._exec.submit(bound, session.threads)
        except KernelError:
            bound.release()
            raise
        # the session too: its mapped weights must outlive the C thread's run
        self._pending = (future, bound, session)
        # A cancelled worker (the model unloading) leaves the run to finish on
        # its own: _done still collects it and gives the arena back.
        outs = await future
        t2 = time.perf_counter_ns()
        per_request = split_outputs([t.name for t in model.outputs], outs, batch)
        return per_request, t1 - t0, t2 - t1, time.perf_counter_ns() - t2

    def _done(self) -> None:
        try:
            os.eventfd_read(self._fd)
        except BlockingIOError:
            return
        if self._pending is None:
            return
        future, bound, _session = self._pending
        self._pending = None
        error = self._exec.collect()
        bound.release()
        if future.done():
            return
        if error is not None:
            future.set_exception(KernelError(f"inference failed: {error}"))
        else:
            future.set_result(bound.outs)

    def close(self) -> None:
        """Stop the thread and free it. A run still in progress (a drain that
        timed out) is not waited for on the loop: a helper thread joins it,
        keeping its arena and buffers alive until the C thread is done."""
        if self._thread is not None:
            self._thread.shutdown(wait=False, cancel_futures=True)
            self._thread = None
        if self._exec is None:
            return
        self._loop.remove_reader(self._fd)
        runner, pending, fd = self._exec, self._pending, self._fd
        self._exec = self._pending = None
        if pending is not None and not pending[0].done():
            pending[0].cancel()

        def finish():
            runner.free()
            if pending is not None:
                pending[1].release()
            os.close(fd)

        if pending is None:
            finish()  # idle: returns at once
        else:
            threading.Thread(target=finish, name="aie-runner-close", daemon=True).start()
