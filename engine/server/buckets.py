"""Shape buckets of a served model (engine.yaml models[].buckets): the
server's side of engine.session.ShapeBuckets.

A request is padded when it is admitted (ServerState.infer, after its
inputs are validated), before it is queued, so requests padded to one
bucket have one shape and the batch policy joins them like any requests
of equal shape (engine.server.batching keys batches on the shapes); each
request's outputs are cut back to its own size when its answer comes
back. The sessions themselves run unbucketed: they only ever see bucket
sizes (or sizes above the largest bucket, which run as they come).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from engine.errors import InvalidArgument
from engine.server.errors import ServeError
from engine.shape_buckets import ShapeBuckets, bucket_axes, cut_from_bucket, pad_to_bucket


def _json_number(pad):
    """A pad as strict JSON can hold it: NaN and +-infinity (a float input
    may be padded with -inf for a max over the axis) as the strings
    protobuf's JSON mapping uses, since JSON has no literal for them and
    json.dumps' NaN/Infinity are refused by strict parsers (JSON.parse)."""
    value = pad.item() if hasattr(pad, "item") else pad
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


class ServedBuckets:
    def __init__(self, spec: dict, session, batchable: bool):
        """`spec`: the model's buckets key; `session`: one of its sessions
        (get_inputs/get_outputs are all that is read). ServeError naming the
        key when the spec does not fit the model."""
        self.shape_buckets = ShapeBuckets.from_config(spec)
        inputs, outputs = session.get_inputs(), session.get_outputs()
        try:
            self._padded, cut = bucket_axes(SimpleNamespace(inputs=inputs, outputs=outputs), self.shape_buckets)
        except InvalidArgument as exc:
            raise ServeError(f"buckets: {exc}") from None
        if batchable:
            batch_axis = [inputs[i].name for i, axis, _ in self._padded if axis == 0]
            if batch_axis:
                raise ServeError(f"buckets: input {batch_axis[0]!r} axis 0 is the batch axis requests are joined "
                                 "along; expected another axis", hint="or set the model's max_batch_size to 0")
        self._names = [t.name for t in inputs]
        self._cut = {t.name: axis % len(t.shape) for t, axis in zip(outputs, cut) if axis is not None}

    def as_config(self) -> dict:
        """What the model config reports: engine.yaml's buckets key with every
        axis counted from 0 over the model's dims (the batch dim included) and
        each pad as the value of its input's dtype."""
        return {"sizes": list(self.shape_buckets.sizes),
                "inputs": {self._names[i]: {"axis": axis, "pad": _json_number(pad)} for i, axis, pad in self._padded},
                "outputs": dict(self._cut)}

    def pad(self, inputs: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], int | None]:
        """The request's inputs padded to their bucket, and the size they had
        (None: already a bucket size, or above them all)."""
        try:
            arrays, n = pad_to_bucket(self.shape_buckets, self._padded, [inputs[name] for name in self._names])
        except InvalidArgument as exc:
            raise ServeError(str(exc)) from None
        return (inputs, None) if n is None else (dict(zip(self._names, arrays)), n)

    def cut(self, outputs: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
        return {name: cut_from_bucket(a, self._cut.get(name), n) for name, a in outputs.items()}

    def warm_shapes(self, shapes: list[dict], inputs, batches: list[int], limit: int | None
                    ) -> tuple[list[dict], str | None]:
        """The shapes warm-up builds plans for, and a note when `limit` (the
        plan cache size) cut them short: the declared ones padded to their
        buckets (the server never runs them unpadded), then every bucket at
        each of `batches` in turn (dim 0, most wanted first; empty: a model
        that does not batch), their other dims from the first declared
        shape (else 1 for each symbolic dim). Warming more plans than the
        cache holds would only evict the first ones again."""
        template = shapes[0] if shapes else {t.name: [d if d > 0 else 1 for d in t.shape] for t in inputs}
        out: list[dict] = []
        for shape in shapes:
            self._add(out, shape, self.shape_buckets.bucket(shape[self._names[self._padded[0][0]]][self._padded[0][1]]))
        sizes = self.shape_buckets.sizes
        wanted = [(batch, size) for batch in batches or [None] for size in sizes]
        for done, (batch, size) in enumerate(wanted):
            if limit is not None and len(out) >= limit:
                plans = f"{len(sizes)} sizes x batch sizes {batches}" if batches else f"{len(sizes)} sizes"
                return out, (f"buckets: {plans} are {len(wanted)} plans, more than engine.plan_cache_size ({limit}) "
                             f"holds: warm-up built {done} of them, the others build on first use (raise "
                             f"plan_cache_size or list fewer preferred_batch_sizes)")
            self._add(out, template, size, batch)
        return out, None

    def _add(self, out: list, shape: dict, size: int, batch: int | None = None) -> None:
        padded = {name: list(dims) for name, dims in shape.items()}
        for i, axis, _ in self._padded:
            padded[self._names[i]][axis] = size
        if batch is not None:
            for dims in padded.values():
                dims[0] = batch
        if padded not in out:
            out.append(padded)
