"""Shape buckets: a dimension that changes every call padded up to a few
sizes, so a few plans serve every size of it (engine.session runs them for
the Python API, engine.server.buckets for the server; the deployer and the
spec checks hold a model's buckets key to the same rules here). No kernels
are loaded by this module: a spec check imports it on a machine that has
not built them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.errors import InvalidArgument
from engine.ir import TYPE_STRING_TO_NUMPY, Graph

# What a refusal of buckets that do not fit the model suggests (conversion, spec checks).
FIT_HINT = "name the model's inputs and outputs, a symbolic axis of each, and a pad value of each input's dtype"


@dataclass(frozen=True)
class ShapeBuckets:
    """Pad one dimension up to the next bucket size, so a few plans serve
    every size of it instead of one plan built per size.

        ShapeBuckets(sizes=(16, 32, 64, 128),
                     inputs={"input_ids": (1, 0), "attention_mask": (1, 0)},   # name -> (axis, pad value)
                     outputs={"last_hidden_state": 1})                         # name -> axis cut back

    Opt-in, because padding changes what most models compute: only where
    the padded positions cannot reach the others (a key-padding attention
    mask padded with 0 does that for an encoder like bert_mini; a conv over
    a padded width does not: its edge columns see the padding). The
    `inputs` share the padded size; `outputs` are cut back to it along
    their axis, the rest returned as computed. A size above the largest
    bucket runs unpadded (its own plan, as without buckets)."""

    sizes: tuple[int, ...]
    inputs: dict
    outputs: dict

    def bucket(self, n: int) -> int:
        return next((b for b in self.sizes if b >= n), n)

    @classmethod
    def from_config(cls, spec: dict) -> "ShapeBuckets":
        """From a model's engine.yaml buckets key ({sizes, inputs: {name:
        {axis, pad}}, outputs: {name: axis}}, engine/config.schema.json)."""
        return cls(sizes=tuple(spec["sizes"]),
                   inputs={name: (int(i["axis"]), i.get("pad", 0)) for name, i in spec["inputs"].items()},
                   outputs={name: int(axis) for name, axis in (spec.get("outputs") or {}).items()})

    def largest_shapes(self, shapes: dict | None) -> dict | None:
        """`shapes` ({input: dims}) with the padded axes raised to the largest
        bucket: what the converter plans so the arena of the largest padded
        run is counted (deploy's max_shapes)."""
        if not shapes:
            return shapes
        out = {name: list(dims) for name, dims in shapes.items()}
        for name, (axis, _) in self.inputs.items():
            dims = out.get(name)
            if dims is not None and -len(dims) <= axis < len(dims):
                dims[axis] = max(dims[axis], self.sizes[-1])
        return out


def bucket_axes(graph: Graph, buckets: ShapeBuckets) -> tuple[list, list]:
    """[(input index, axis, pad value)] and, per output, the axis cut back
    (or None), checked against the graph: a padded axis must be symbolic
    and each pad a value of its input's dtype (bucket_pad)."""
    sizes = list(buckets.sizes)
    if not sizes or sizes != sorted(set(sizes)) or sizes[0] < 1:
        raise InvalidArgument(f"bucket sizes must be ascending positive sizes, got {sizes}")
    index = {t.name: i for i, t in enumerate(graph.inputs)}
    padded = []
    for name, (axis, pad) in buckets.inputs.items():
        t = graph.inputs[index[name]] if name in index else None
        if t is None or t.shape is None or not -len(t.shape) <= axis < len(t.shape) \
                or isinstance(t.shape[axis], int) and t.shape[axis] > 0:
            got = "no such input" if t is None else f"dims {list(t.shape or [])}"
            raise InvalidArgument(f"bucket input {name!r} axis {axis}: expected an input with a symbolic dim "
                                  f"there ({got}; inputs: {', '.join(index)})")
        padded.append((index[name], axis % len(t.shape), bucket_pad(name, pad, _dtype(t))))
    if not padded:
        raise InvalidArgument("shape buckets name no input to pad")
    outs = {t.name: t for t in graph.outputs}
    unknown = sorted(set(buckets.outputs) - set(outs))
    if unknown:
        raise InvalidArgument(f"bucket outputs {unknown} are not outputs of the model ({', '.join(outs)})")
    for name, axis in buckets.outputs.items():
        shape = list(outs[name].shape or [])
        if not -len(shape) <= axis < len(shape) or isinstance(shape[axis], int) and shape[axis] > 0:
            raise InvalidArgument(f"bucket output {name!r} axis {axis}: expected an output with a symbolic dim "
                                  f"there (dims {shape})")
    cut = [buckets.outputs.get(t.name) for t in graph.outputs]
    return padded, cut


def _dtype(t) -> np.dtype | None:
    """A graph input's dtype (TensorInfo), or a session input's (NodeArg:
    its type string, 'tensor(int64)')."""
    dtype = getattr(t, "dtype", None)
    return dtype if dtype is not None else TYPE_STRING_TO_NUMPY.get(str(getattr(t, "type", "")))


def bucket_pad(name: str, pad, dtype: np.dtype | None):
    """The pad value of bucket input `name` as a scalar of its dtype, refused
    where numpy would change it silently: np.full(shape, 0.5, int64) fills
    with 0, 300 on uint8 wraps to 44, NaN on int32 is undefined."""
    if dtype is None:
        return pad
    dtype = np.dtype(dtype)
    try:
        value = float(pad)
    except OverflowError:  # an integer beyond any float is beyond every dtype too
        value = math.nan
    if dtype == np.bool_:
        ok, expected = value in (0.0, 1.0), "0 or 1"
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        ok = math.isfinite(value) and value.is_integer() and info.min <= int(pad) <= info.max
        expected = f"an integer in {info.min}..{info.max}"
    else:
        largest = float(np.finfo(dtype).max)
        ok = not math.isfinite(value) and not isinstance(pad, int) or abs(value) <= largest
        expected = f"a number within +-{largest:g}"
    if not ok:
        raise InvalidArgument(f"bucket input {name!r} pad {pad!r}: not a value of its dtype {dtype.name} "
                              f"(expected {expected})")
    return dtype.type(pad)


def pad_to_bucket(buckets: ShapeBuckets, padded: list, arrays: list[np.ndarray]) -> tuple[list[np.ndarray], int | None]:
    """The arrays with the bucketed axis padded to its bucket, and the size
    they had; (arrays, None) when the size is a bucket or above them all."""
    sizes = {arrays[i].shape[axis] for i, axis, _ in padded}
    if len(sizes) != 1:
        raise InvalidArgument("the bucketed inputs must agree in size along their bucketed axes, got "
                              + ", ".join(f"{list(arrays[i].shape)}" for i, _, _ in padded))
    [n] = sizes
    size = buckets.bucket(n)
    if size == n:
        return arrays, None
    out = list(arrays)
    for i, axis, pad in padded:
        a = arrays[i]
        shape = list(a.shape)
        shape[axis] = size
        full = np.full(shape, pad, a.dtype)
        full[(slice(None),) * axis + (slice(0, n),)] = a
        out[i] = full
    return out, n


def cut_from_bucket(array: np.ndarray, axis: int | None, n: int) -> np.ndarray:
    if axis is None:
        return array
    return np.ascontiguousarray(array[(slice(None),) * (axis % array.ndim) + (slice(0, n),)])
