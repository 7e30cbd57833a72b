"""The request path run once per declared shape before a model reports ready.

Warm plans (engine.server.models) leave the first request no plan to build,
yet on a quiet host a fresh server's first request still took 1.3x (HTTP)
and 2.3x (binary) a steady one (docs/PERFORMANCE.md, session 4): the first
pass of the process through the codecs, the scheduler, the instance's C
runner thread and its eventfd completion, with cold caches. So the registry
hands each new scheduler here before it switches the model in: one
synthetic request per declared shape and protocol goes through the
functions the handlers call -- HTTP JSON: kserve.decode_infer, submit,
kserve.encode_infer; binary: the wire codec both ways -- on the event loop,
without a socket (a connection's set-up is not a model's to warm). The
registry counts them into the model's plan report (`warm_requests`).
"""

from __future__ import annotations

import json

import numpy as np

from engine import wire
from engine.server.kserve import decode_infer, encode_infer
from engine.server.models import NUMPY_TO_KSERVE
from engine.server.scheduler import ModelScheduler

_REQUEST_ID = 1


async def warm_request_path(scheduler: ModelScheduler, max_json_elements: int) -> int:
    """Run one request of each declared shape through each protocol's
    codecs and the scheduler; the number run. A failure is the model's and
    surfaces as the warm plans' did (the model still serves)."""
    model = scheduler.model
    runs = 0
    for shape in filter(model.schedulable, model.warm.shapes):
        feeds = {t.name: np.zeros(shape[t.name], t.dtype) for t in model.inputs}
        body = json.dumps({"id": "warm-up", "inputs": [
            {"name": n, "shape": list(a.shape), "datatype": NUMPY_TO_KSERVE[a.dtype], "data": a.ravel().tolist()}
            for n, a in feeds.items()]}).encode()
        inputs, requested, _, rid = decode_infer(body, None, model, max_json_elements)
        encode_infer(model, await _through_scheduler(scheduler, inputs), requested, rid)

        frame = memoryview(b"".join(wire.encode_infer(_REQUEST_ID, model.name, feeds)))
        _, length, _ = wire.parse_header(frame[:wire.HEADER.size], len(frame))
        payload = frame[wire.HEADER.size:wire.HEADER.size + length]
        head = wire.decode_infer_head(payload)
        inputs = wire.decode_tensors(payload, head.tensors_at, head.tensor_count)
        b"".join(wire.encode_result(head.request_id, await _through_scheduler(scheduler, inputs)))
        runs += 2
    return runs


async def _through_scheduler(scheduler: ModelScheduler, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What ServerState.infer does with a request once decoded, less the
    principal (the registry's own request has none)."""
    model = scheduler.model
    batch = model.validate(inputs)
    inputs, size = model.pad(inputs)
    request = scheduler.submit(inputs, batch, scheduler.resolve_priority(None), scheduler.resolve_timeout_us(None))
    return model.cut(await request.future, size)
