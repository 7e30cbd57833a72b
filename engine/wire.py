"""The binary TCP protocol that engine.client and engine.server speak: frames
with a fixed 16-byte little-endian header

    u32 magic "AIEB" | u8 version | u8 op | u16 flags | u32 payload length | u32 crc32(payload)

followed by the payload. INFER and RESULT payloads carry tensor descriptors
and then the raw tensor bytes, each tensor 64-byte aligned so the receiver
uses them in place (numpy views, no parsing, no copy).

Requests may be pipelined on one connection; answers carry the request id
and may come back in any order. A request that fails gets an ERROR frame
with its id (status codes as HTTP); request id 0 in an ERROR frame means the
stream can no longer be trusted and the connection closes.

Shutdown: a GOODBYE frame (payload: a UTF-8 reason) tells the client to send
no new request on this connection; requests sent before it arrived are still
answered, and then the client closes (engine.client reconnects, reaching
another server once this one has stopped accepting).

How the server reads, bounds and answers frames: engine.server.binary.
"""

from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass

import numpy as np

from engine.errors import EngineError

MAGIC = int.from_bytes(b"AIEB", "little")
VERSION = 1
HEADER = struct.Struct("<IBBHII")
assert HEADER.size == 16
OP_INFER, OP_RESULT, OP_ERROR, OP_GOODBYE = 1, 2, 3, 4
ALIGN = 64  # cache line; also what AVX-512 loads like
MAX_DIMS = 64  # numpy's limit on an array's dims (NPY_MAXDIMS); what a request may ask for

# INFER fixed part: id, priority, reserved, name len, version len, token len, timeout us, tensor count
INFER_FIXED = struct.Struct("<QBBHHHIH")
# result: id, tensor count, reserved
_RESULT = struct.Struct("<QHHI")
# error: id, status, reserved, message length
_ERROR = struct.Struct("<QHHI")
# tensor descriptor: name length, dtype code, ndim (then name, then ndim u64 dims)
TENSOR_DESC = struct.Struct("<HBB")

DTYPE_CODES = {np.dtype(t): i for i, t in enumerate(
    (np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64,
     np.float16, np.float32, np.float64), start=1)}
CODE_DTYPES = {i: d for d, i in DTYPE_CODES.items()}


class FrameError(EngineError):
    """A frame or payload is malformed; `status` is the code sent in the error frame."""

    def __init__(self, message: str, *, status: int = 400):
        super().__init__(message)
        self.status = status


def _pad(n: int) -> int:
    return -n % ALIGN


def frame(op: int, payload_parts: list[bytes]) -> list[bytes]:
    payload_len = sum(len(p) for p in payload_parts)
    crc = 0
    for p in payload_parts:
        crc = zlib.crc32(p, crc)
    return [HEADER.pack(MAGIC, VERSION, op, 0, payload_len, crc), *payload_parts]


def parse_header(data: bytes, max_payload: int) -> tuple[int, int, int]:
    """(op, payload length, crc) or FrameError."""
    magic, version, op, _flags, length, crc = HEADER.unpack(data)
    if magic != MAGIC:
        raise FrameError(f"bad magic 0x{magic:08x} (expected 0x{MAGIC:08x} 'AIEB')")
    if version != VERSION:
        raise FrameError(f"protocol version {version} not supported (this server speaks {VERSION})", status=505)
    if op not in (OP_INFER, OP_RESULT, OP_ERROR, OP_GOODBYE):
        raise FrameError(f"unknown op {op}")
    if length > max_payload:
        raise FrameError(f"payload of {length} bytes exceeds the limit of {max_payload} bytes", status=413)
    return op, length, crc


def encode_tensors(tensors: dict[str, np.ndarray], used: int) -> list[bytes]:
    desc, data = [], []
    for name, arr in tensors.items():
        code = DTYPE_CODES.get(arr.dtype)
        if code is None:
            raise FrameError(f"tensor {name!r}: dtype {arr.dtype} has no wire code")
        raw_name = name.encode()
        dims = struct.pack(f"<{arr.ndim}Q", *arr.shape)
        desc.append(TENSOR_DESC.pack(len(raw_name), code, arr.ndim) + raw_name + dims)
    head = b"".join(desc)
    parts = [head, b"\0" * _pad(used + len(head))]
    for arr in tensors.values():
        raw = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).data.cast("B")
        parts.append(raw)
        parts.append(b"\0" * _pad(len(raw)))
    return parts


def decode_tensors(buf: memoryview, offset: int, count: int) -> dict[str, np.ndarray]:
    specs = []
    try:
        for _ in range(count):
            name_len, code, ndim = TENSOR_DESC.unpack_from(buf, offset)
            offset += TENSOR_DESC.size
            name = bytes(buf[offset:offset + name_len]).decode()
            offset += name_len
            if ndim > MAX_DIMS:
                raise FrameError(f"tensor {name!r}: {ndim} dims, at most {MAX_DIMS} are supported")
            dims = struct.unpack_from(f"<{ndim}Q", buf, offset)
            offset += 8 * ndim
            if code not in CODE_DTYPES:
                raise FrameError(f"tensor {name!r}: unknown dtype code {code}")
            specs.append((name, CODE_DTYPES[code], dims))
    except (struct.error, UnicodeDecodeError) as exc:
        raise FrameError(f"truncated or malformed tensor descriptor: {exc}") from None
    offset += _pad(offset)
    tensors = {}
    for name, dtype, dims in specs:
        # Python ints: a product of u64 dims must not wrap (numpy's uint64 prod does).
        nbytes = math.prod(dims) * dtype.itemsize
        if offset + nbytes > len(buf):
            raise FrameError(f"tensor {name!r}: {nbytes} bytes announced, payload ends first")
        if name in tensors:
            raise FrameError(f"tensor {name!r} given twice")
        try:
            tensors[name] = np.frombuffer(buf[offset:offset + nbytes], dtype=dtype.newbyteorder("<")).reshape(dims)
        except ValueError as exc:  # an empty tensor with dims numpy cannot hold ("array is too big")
            raise FrameError(f"tensor {name!r}: dims {list(dims)[:8]}: {exc}") from None
        offset += nbytes + _pad(nbytes)
    if offset < len(buf) and any(buf[offset:]):
        raise FrameError(f"{len(buf) - offset} trailing bytes after the last tensor")
    return tensors


def encode_infer(request_id: int, model: str, inputs: dict[str, np.ndarray], *, version: str = "",
                 token: str = "", priority: int = 0, timeout_us: int = 0) -> list[bytes]:
    names = model.encode(), version.encode(), token.encode()
    head = INFER_FIXED.pack(request_id, priority, 0, len(names[0]), len(names[1]), len(names[2]), timeout_us,
                       len(inputs)) + b"".join(names)
    return frame(OP_INFER, [head, *encode_tensors(inputs, len(head))])


def infer_prefix_length(fixed: memoryview) -> tuple[int, int]:
    """(request id, bytes of fixed part + names) from an INFER payload's fixed part."""
    rid, _, _, nl, vl, tl, _, _ = INFER_FIXED.unpack_from(fixed, 0)
    return rid, INFER_FIXED.size + nl + vl + tl


@dataclass(frozen=True)
class InferHead:
    request_id: int
    model: str
    version: str
    token: str
    priority: int
    timeout_us: int
    tensor_count: int
    tensors_at: int      # payload offset of the first tensor descriptor


def decode_infer_head(payload: memoryview) -> InferHead:
    try:
        rid, prio, _, nl, vl, tl, timeout, count = INFER_FIXED.unpack_from(payload, 0)
    except struct.error:
        raise FrameError("INFER payload shorter than its fixed part") from None
    off = INFER_FIXED.size
    if off + nl + vl + tl > len(payload):
        raise FrameError("INFER payload shorter than its names")
    try:
        model = bytes(payload[off:off + nl]).decode()
        version = bytes(payload[off + nl:off + nl + vl]).decode()
        token = bytes(payload[off + nl + vl:off + nl + vl + tl]).decode()
    except UnicodeDecodeError:
        raise FrameError("model, version or token is not UTF-8") from None
    return InferHead(rid, model, version, token, prio, timeout, count, off + nl + vl + tl)


def decode_infer(payload: memoryview):
    """-> (request id, model, version, token, priority, timeout µs, inputs)."""
    h = decode_infer_head(payload)
    return (h.request_id, h.model, h.version, h.token, h.priority, h.timeout_us,
            decode_tensors(payload, h.tensors_at, h.tensor_count))


def encode_result(request_id: int, outputs: dict[str, np.ndarray]) -> list[bytes]:
    head = _RESULT.pack(request_id, len(outputs), 0, 0)
    return frame(OP_RESULT, [head, *encode_tensors(outputs, len(head))])


def decode_result(payload: memoryview) -> tuple[int, dict[str, np.ndarray]]:
    rid, count, _, _ = _RESULT.unpack_from(payload, 0)
    return rid, decode_tensors(payload, _RESULT.size, count)


def encode_error(request_id: int, status: int, message: str) -> list[bytes]:
    msg = message.encode()[:65536]
    return frame(OP_ERROR, [_ERROR.pack(request_id, status, 0, len(msg)), msg])


def decode_error(payload: memoryview) -> tuple[int, int, str]:
    rid, status, _, n = _ERROR.unpack_from(payload, 0)
    return rid, status, bytes(payload[_ERROR.size:_ERROR.size + n]).decode(errors="replace")


def encode_goodbye(reason: str) -> list[bytes]:
    return frame(OP_GOODBYE, [reason.encode()[:65536]])
