"""KServe v2 gRPC messages <-> numpy: ModelInferRequest to the inputs
state.infer takes, its outputs to a ModelInferResponse. The checks and
their messages are the HTTP decoder's (engine.server.kserve), so a client
reads the same refusal over either protocol.

Inputs come as `raw_input_contents` (one little-endian buffer per input, in
order) or as the typed `contents` field of their datatype. Outputs always go
out raw, as Triton sends them: a typed output list would cost a Python
object per value.

The raw tensors bypass protobuf both ways (InferRequest.parser,
InferResponse.serializer): protobuf would copy a raw input into its arena on
parsing and again into a new bytes object on every access, and a raw output
from the array into bytes, into the message and into the serialised message.
Here an input is a view of the bytes grpc hands over, and an output is
copied once, into the message grpc sends. The wire format allows it: a
message is its fields in any order, and a repeated field is the
concatenation of its entries, so the raw entries are cut out of (and
appended to) an otherwise ordinary protobuf message.
"""

from __future__ import annotations

import numpy as np

from engine.server.errors import ServeError
from engine.server.models import KSERVE_TO_NUMPY, NUMPY_TO_KSERVE, LoadedModel, element_count
from engine.server.shm import OutputTarget
from engine.wire import MAX_DIMS

_MAX_INT = (1 << 63) - 1
# The InferTensorContents field that carries each datatype (grpc_service.proto).
CONTENTS_FIELD = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents",
}


def param_value(p):
    """An InferParameter's value as a Python value (None when unset)."""
    which = p.WhichOneof("parameter_choice")
    return None if which is None else getattr(p, which)


def params_dict(params) -> dict:
    return {k: param_value(v) for k, v in params.items()}


def _shape(name: str, dims) -> list[int]:
    shape = list(dims)
    if not all(0 <= d <= _MAX_INT for d in shape):
        raise ServeError(f"input {name!r}: shape must be a list of non-negative integers, got {str(shape)[:100]}")
    if len(shape) > MAX_DIMS:
        raise ServeError(f"input {name!r}: shape has {len(shape)} dims, at most {MAX_DIMS} are supported")
    return shape


def _reshape(arr: np.ndarray, name: str, shape) -> np.ndarray:
    try:
        return arr.reshape(shape)
    except ValueError as exc:
        raise ServeError(f"input {name!r}: shape {str(shape)[:100]}: {exc}") from None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def split_field(data: bytes, number: int) -> tuple[bytes, list[memoryview]]:
    """A serialised message -> (the message without field `number`, that
    field's length-delimited entries as views of `data`, in order).
    ValueError/IndexError when `data` is not a well-formed message."""
    view = memoryview(data)
    keep, entries, kept_from, pos, end = [], [], 0, 0, len(data)
    while pos < end:
        at = pos
        key, pos = _varint(data, pos)
        wire = key & 7
        if wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > end:
                raise ValueError("length-delimited field runs past the message")
            if key >> 3 == number:
                keep.append(view[kept_from:at])
                entries.append(view[pos:pos + length])
                kept_from = pos + length
            pos += length
        elif wire == 0:
            _, pos = _varint(data, pos)
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:   # groups (3, 4) are not in these messages
            raise ValueError(f"wire type {wire}")
    if pos != end:
        raise ValueError("field runs past the message")
    if not entries:
        return data, entries
    keep.append(view[kept_from:])
    return b"".join(keep), entries


class InferRequest:
    """A ModelInferRequest as grpc delivered it: `message` without its raw
    contents, `raw` (views of the received bytes), `nbytes` received."""

    __slots__ = ("message", "raw", "nbytes")

    def __init__(self, message, raw, nbytes: int):
        self.message, self.raw, self.nbytes = message, raw, nbytes

    @classmethod
    def parser(cls, message_type):
        """grpc's request_deserializer for `message_type` (ModelInferRequest)."""
        number = message_type.DESCRIPTOR.fields_by_name["raw_input_contents"].number

        def parse(data: bytes) -> InferRequest:
            try:
                rest, raw = split_field(data, number)
            except (ValueError, IndexError):
                # protobuf's own parser then names what is wrong (grpc answers INTERNAL, as before)
                message = message_type.FromString(data)
                return cls(message, list(message.raw_input_contents), len(data))
            return cls(message_type.FromString(rest), raw, len(data))
        return parse


class InferResponse:
    """A ModelInferResponse whose raw outputs (`raw`: C-contiguous
    little-endian arrays, or b"") are kept out of `message` until it is
    serialised."""

    __slots__ = ("message", "raw")

    def __init__(self, message, raw: list):
        self.message, self.raw = message, raw

    @staticmethod
    def serializer(message_type):
        """grpc's response_serializer for `message_type` (ModelInferResponse):
        the message, then each raw output as a raw_output_contents entry."""
        tag = _encode_varint(message_type.DESCRIPTOR.fields_by_name["raw_output_contents"].number << 3 | 2)

        def serialize(resp: InferResponse) -> bytes:
            parts = [resp.message.SerializeToString()]
            for arr in resp.raw:
                nbytes = arr.nbytes if isinstance(arr, np.ndarray) else len(arr)
                parts += (tag, _encode_varint(nbytes), arr.data if isinstance(arr, np.ndarray) else arr)
            return b"".join(parts)
        return serialize

    def materialize(self):
        """The whole ModelInferResponse (for ModelStreamInfer, which nests it)."""
        self.message.raw_output_contents.extend(
            a.tobytes() if isinstance(a, np.ndarray) else bytes(a) for a in self.raw)
        self.raw = []
        return self.message


def decode_request(request, model: LoadedModel, shm=None, owner: str = "", raw=None):
    """ModelInferRequest -> (inputs, {requested output: its OutputTarget in
    shared memory or None}, request parameters). `shm`: the server's
    SystemSharedMemory (inputs and outputs that name a region, in `owner`'s
    namespace), or None. `raw`: the raw input contents when they were split
    off the message (InferRequest), else the message's own."""
    if raw is None:
        raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise ServeError(f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs: give one raw buffer "
                         "per input, in order, or typed contents for all")
    inputs: dict[str, np.ndarray] = {}
    for i, item in enumerate(request.inputs):
        name, datatype = item.name, item.datatype
        if name in inputs:
            raise ServeError(f"input {name!r} given twice")
        spec = model.input_spec(name)
        if datatype not in KSERVE_TO_NUMPY:
            raise ServeError(f"input {name!r}: datatype {datatype!r} unsupported; model expects {spec.datatype}")
        if datatype != spec.datatype:
            raise ServeError(f"input {name!r} has datatype {datatype}, model {model.name!r} expects "
                             f"{spec.datatype}")
        shape = _shape(name, item.shape)
        dtype = KSERVE_TO_NUMPY[datatype]
        iparams = params_dict(item.parameters)
        if shm is not None and "shared_memory_region" in iparams:
            arr = shm.read_input(name, iparams, datatype, shape, owner=owner)
            if arr is not None:
                inputs[name] = arr
                continue
        if raw:
            buf = raw[i]
            need = element_count(shape) * dtype.itemsize
            if len(buf) != need:
                raise ServeError(f"input {name!r}: {len(buf)} raw bytes but shape {shape} of {datatype} "
                                 f"needs {need} bytes")
            inputs[name] = _reshape(np.frombuffer(buf, dtype=dtype.newbyteorder("<")), name, shape)
            continue
        field = CONTENTS_FIELD.get(datatype)
        if field is None:  # FP16 has no typed field in the protocol
            raise ServeError(f"input {name!r}: {datatype} has no typed contents field; send it as "
                             "raw_input_contents")
        values = getattr(item.contents, field)
        if len(values) != element_count(shape):
            raise ServeError(f"input {name!r}: {len(values)} values for shape {shape} "
                             f"({element_count(shape)} expected)")
        if dtype.kind in "iu" and dtype.itemsize < 8:
            # int_contents carries INT8/INT16 as int32 (uint_contents likewise): numpy would wrap what does not fit
            arr = np.array(values, np.int64)
            info = np.iinfo(dtype)
            if arr.size and (arr.min() < info.min or arr.max() > info.max):
                raise ServeError(f"input {name!r}: values outside the {datatype} range")
            arr = arr.astype(dtype)
        else:
            arr = np.array(values, dtype)
        inputs[name] = _reshape(arr, name, shape)
    requested: dict[str, OutputTarget | None] = {}
    for i, out in enumerate(request.outputs):
        if model.output(out.name) is None:
            raise ServeError(f"outputs[{i}]: model {model.name!r} has no output {out.name!r}; it has "
                             + ", ".join(t.name for t in model.outputs))
        oparams = params_dict(out.parameters)
        requested[out.name] = shm.output_target(out.name, oparams, owner=owner) if shm is not None and oparams \
            else None
    if not requested:
        requested = {t.name: None for t in model.outputs}
    return inputs, requested, params_dict(request.parameters)


def encode_response(pb2, model: LoadedModel, outputs: dict[str, np.ndarray],
                    requested: dict[str, OutputTarget | None], request_id: str, shm=None) -> InferResponse:
    """The ModelInferResponse: raw_output_contents, one buffer per output in order;
    outputs a request places in a shared-memory region are written there instead."""
    resp = pb2.ModelInferResponse(model_name=model.name, model_version=model.version, id=request_id)
    raw = []
    for name, target in requested.items():
        arr = outputs[name]
        tensor = resp.outputs.add(name=name, datatype=NUMPY_TO_KSERVE[arr.dtype], shape=arr.shape)
        if target is not None:
            shm.write_output(target, arr)
            for key, value in target.params(arr.nbytes).items():
                _set_param(tensor.parameters[key], value)
            raw.append(b"")  # raw buffers pair with outputs by position, as Triton sends them
            continue
        raw.append(np.ascontiguousarray(arr.astype(arr.dtype.newbyteorder("<"), copy=False)))
    return InferResponse(resp, raw)


def _set_param(p, value) -> None:
    if isinstance(value, bool):
        p.bool_param = value
    elif isinstance(value, int):
        p.int64_param = value
    elif isinstance(value, float):
        p.double_param = value
    else:
        p.string_param = str(value)
