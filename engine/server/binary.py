"""The binary TCP protocol: frames with a fixed 16-byte little-endian header

    u32 magic "AIEB" | u8 version | u8 op | u16 flags | u32 payload length | u32 crc32(payload)

followed by the payload. INFER and RESULT payloads carry tensor descriptors
and then the raw tensor bytes, each tensor 64-byte aligned so the receiver
uses them in place (numpy views, no parsing, no copy). The server reads each
payload straight into a buffer allocated at its announced size
(asyncio.BufferedProtocol), after checking the size against the limit.

Errors: a request that fails gets an ERROR frame (status codes as HTTP) and
the connection stays open; a malformed header, a bad checksum, an oversize
length or a malformed payload gets an ERROR frame (request id 0) and the
connection is closed, because the stream can no longer be trusted.

Requests may be pipelined on one connection; answers carry the request id
and may come back in any order.

Shutdown: a GOODBYE frame (payload: a UTF-8 reason) tells the client to send
no new request on this connection; requests sent before it arrived are still
answered, and then the client closes (engine.client reconnects, reaching
another server once this one has stopped accepting). HTTP's counterpart is
`Connection: close` on every response during the drain.
"""

from __future__ import annotations

import asyncio
import struct
import time
import zlib

import numpy as np

from engine.errors import EngineError
from engine.server.http import set_nodelay

MAGIC = int.from_bytes(b"AIEB", "little")
VERSION = 1
HEADER = struct.Struct("<IBBHII")
assert HEADER.size == 16
OP_INFER, OP_RESULT, OP_ERROR, OP_GOODBYE = 1, 2, 3, 4
ALIGN = 64  # cache line; also what AVX-512 loads like
LINGER_S = 1.0  # how long a failed connection keeps discarding input before it closes

# request: id, priority, reserved, name len, version len, token len, timeout us, tensor count
_INFER = struct.Struct("<QBBHHHIH")
# result: id, tensor count, reserved
_RESULT = struct.Struct("<QHHI")
# error: id, status, reserved, message length
_ERROR = struct.Struct("<QHHI")
# tensor descriptor: name length, dtype code, ndim (then name, then ndim u64 dims)
_TENSOR = struct.Struct("<HBB")

DTYPE_CODES = {np.dtype(t): i for i, t in enumerate(
    (np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64,
     np.float16, np.float32, np.float64), start=1)}
CODE_DTYPES = {i: d for d, i in DTYPE_CODES.items()}


class FrameError(EngineError):
    """A frame or payload is malformed; `status` is the code sent in the error frame."""

    def __init__(self, message: str, status: int = 400):
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
        raise FrameError(f"protocol version {version} not supported (this server speaks {VERSION})", 505)
    if op not in (OP_INFER, OP_RESULT, OP_ERROR, OP_GOODBYE):
        raise FrameError(f"unknown op {op}")
    if length > max_payload:
        raise FrameError(f"payload of {length} bytes exceeds the limit of {max_payload} bytes", 413)
    return op, length, crc


def _encode_tensors(tensors: dict[str, np.ndarray], used: int) -> list[bytes]:
    desc, data = [], []
    for name, arr in tensors.items():
        code = DTYPE_CODES.get(arr.dtype)
        if code is None:
            raise FrameError(f"tensor {name!r}: dtype {arr.dtype} has no wire code")
        raw_name = name.encode()
        desc.append(_TENSOR.pack(len(raw_name), code, arr.ndim) + raw_name + struct.pack(f"<{arr.ndim}Q", *arr.shape))
    head = b"".join(desc)
    parts = [head, b"\0" * _pad(used + len(head))]
    for arr in tensors.values():
        raw = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).data.cast("B")
        parts.append(raw)
        parts.append(b"\0" * _pad(len(raw)))
    return parts


def _decode_tensors(buf: memoryview, offset: int, count: int) -> dict[str, np.ndarray]:
    specs = []
    try:
        for _ in range(count):
            name_len, code, ndim = _TENSOR.unpack_from(buf, offset)
            offset += _TENSOR.size
            name = bytes(buf[offset:offset + name_len]).decode()
            offset += name_len
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
        nbytes = int(np.prod(dims, dtype=np.uint64)) * dtype.itemsize if dims else dtype.itemsize
        if offset + nbytes > len(buf):
            raise FrameError(f"tensor {name!r}: {nbytes} bytes announced, payload ends first")
        if name in tensors:
            raise FrameError(f"tensor {name!r} given twice")
        tensors[name] = np.frombuffer(buf[offset:offset + nbytes], dtype=dtype.newbyteorder("<")).reshape(dims)
        offset += nbytes + _pad(nbytes)
    if offset < len(buf) and any(buf[offset:]):
        raise FrameError(f"{len(buf) - offset} trailing bytes after the last tensor")
    return tensors


def encode_infer(request_id: int, model: str, inputs: dict[str, np.ndarray], *, version: str = "",
                 token: str = "", priority: int = 0, timeout_us: int = 0) -> list[bytes]:
    names = model.encode(), version.encode(), token.encode()
    head = _INFER.pack(request_id, priority, 0, len(names[0]), len(names[1]), len(names[2]), timeout_us,
                       len(inputs)) + b"".join(names)
    return frame(OP_INFER, [head, *_encode_tensors(inputs, len(head))])


def decode_infer(payload: memoryview):
    """-> (request id, model, version, token, priority, timeout µs, inputs)."""
    try:
        rid, prio, _, nl, vl, tl, timeout, count = _INFER.unpack_from(payload, 0)
    except struct.error:
        raise FrameError("INFER payload shorter than its fixed part") from None
    off = _INFER.size
    try:
        model = bytes(payload[off:off + nl]).decode()
        version = bytes(payload[off + nl:off + nl + vl]).decode()
        token = bytes(payload[off + nl + vl:off + nl + vl + tl]).decode()
    except UnicodeDecodeError:
        raise FrameError("model, version or token is not UTF-8") from None
    if off + nl + vl + tl > len(payload):
        raise FrameError("INFER payload shorter than its names")
    return rid, model, version, token, prio, timeout, _decode_tensors(payload, off + nl + vl + tl, count)


def encode_result(request_id: int, outputs: dict[str, np.ndarray]) -> list[bytes]:
    head = _RESULT.pack(request_id, len(outputs), 0, 0)
    return frame(OP_RESULT, [head, *_encode_tensors(outputs, len(head))])


def decode_result(payload: memoryview) -> tuple[int, dict[str, np.ndarray]]:
    rid, count, _, _ = _RESULT.unpack_from(payload, 0)
    return rid, _decode_tensors(payload, _RESULT.size, count)


def encode_error(request_id: int, status: int, message: str) -> list[bytes]:
    msg = message.encode()[:65536]
    return frame(OP_ERROR, [_ERROR.pack(request_id, status, 0, len(msg)), msg])


def decode_error(payload: memoryview) -> tuple[int, int, str]:
    rid, status, _, n = _ERROR.unpack_from(payload, 0)
    return rid, status, bytes(payload[_ERROR.size:_ERROR.size + n]).decode(errors="replace")


def encode_goodbye(reason: str) -> list[bytes]:
    return frame(OP_GOODBYE, [reason.encode()[:65536]])


class BinaryConnection(asyncio.BufferedProtocol):
    """One client connection. Reads headers into a fixed 16-byte buffer and
    payloads into a buffer of exactly the announced size."""

    def __init__(self, server):
        self.server = server            # engine.server.server.Server
        self.state = server.state
        self.transport = None
        self.client = ""
        self._header = bytearray(HEADER.size)
        self._target = memoryview(self._header)
        self._filled = 0
        self._op = self._crc = 0
        self._in_payload = False
        self.busy = 0
        self._closing = False
        self._timer: asyncio.TimerHandle | None = None
        self._write_ready = asyncio.Event()
        self._write_ready.set()
        self.fresh = False              # accepted after the drain began
        self._said_goodbye = False

    # ---- asyncio callbacks ------------------------------------------------
    def connection_made(self, transport):
        self.transport = transport
        set_nodelay(transport.get_extra_info("socket"))
        peer = transport.get_extra_info("peername") or ("?", 0)
        self.client = f"{peer[0]}:{peer[1]}"
        self.server.connections.add(self)
        self._arm(self.state.config.limits.idle_timeout_s, "idle")
        if self.state.draining:
            self.fresh = True
            self.say_goodbye()

    def connection_lost(self, exc):
        self._closing = True
        if self._timer:
            self._timer.cancel()
        self.server.connections.discard(self)
        self._write_ready.set()
        self.server.connection_idle()

    def pause_writing(self):
        self._write_ready.clear()

    def resume_writing(self):
        self._write_ready.set()

    def get_buffer(self, sizehint):
        return self._target[self._filled:]

    def buffer_updated(self, nbytes):
        if self._closing:
            return  # lingering after an error: discard (the buffer is reused from its start)
        if self._filled == 0 and not self._in_payload:
            # The first byte of a frame: the rest must follow within the header timeout.
            self._arm(self.state.config.limits.header_timeout_s, "slow")
        self._filled += nbytes
        if self._filled < len(self._target):
            return
        if not self._in_payload:
            try:
                self._op, length, self._crc = parse_header(bytes(self._header), self.state.config.limits.max_body)
            except FrameError as exc:
                return self.fail(exc.status, exc.message)
            self._in_payload = True
            self._target = memoryview(bytearray(length))
            self._filled = 0
            if length:
                return
        payload = self._target
        self._target, self._filled, self._in_payload = memoryview(self._header), 0, False
        self._arm(self.state.config.limits.idle_timeout_s, "idle")
        if zlib.crc32(payload) != self._crc:
            return self.fail(400, "payload checksum mismatch")
        if self._op != OP_INFER:
            return self.fail(400, f"op {self._op} is not a request")
        self.busy += 1
        asyncio.get_running_loop().create_task(self._serve(payload))

    # ---- work -------------------------------------------------------------
    async def _serve(self, payload: memoryview) -> None:
        st = self.state
        t0 = time.monotonic()
        rid, log, status = 0, {}, 200
        st.in_flight += 1
        try:
            try:
                rid, model, version, token, prio, timeout, inputs = decode_infer(payload)
            except FrameError as exc:
                status = exc.status
                st.metrics.protocol_errors["binary"] += 1
                self.fail(exc.status, exc.message)
                return
            log["model"] = model
            try:
                principal = st.authenticate(f"Bearer {token}" if token else None, self.client.rsplit(":", 1)[0])
                _, outputs = await st.infer(model, version or None, inputs, priority=prio or None,
                                            timeout_us=timeout or None, principal=principal, info=log)
                parts = encode_result(rid, outputs)
            except Exception as exc:  # noqa: BLE001 - every request gets an answer frame
                status = getattr(exc, "status", 500)
                parts = encode_error(rid, status, getattr(exc, "message", f"{type(exc).__name__}: {exc}"))
            await self._write(parts)
        finally:
            st.in_flight -= 1
            self.busy -= 1
            elapsed = time.monotonic() - t0
            st.metrics.count_request(log.get("model", ""), "binary", status, elapsed)
            st.logger.info("request", protocol="binary", client=self.client, request_id=rid,
                           model=log.get("model"), batch=log.get("batch"), batch_size=log.get("batch_size"),
                           instance=log.get("instance"),
                           queue_us=log.get("queue_us"), compute_us=log.get("compute_us"), status=status,
                           latency_us=int(elapsed * 1e6))
            self.server.connection_idle()

    async def _write(self, parts: list[bytes]) -> None:
        if self._closing or self.transport.is_closing():
            return
        await self._write_ready.wait()
        if not self.transport.is_closing():
            self.transport.writelines(parts)

    def fail(self, status: int, message: str) -> None:
        """Error frame, then close: the stream is no longer trustworthy.
        The close lingers (input discarded, at most LINGER_S) so that unread
        bytes of the bad frame do not turn the close into a reset that
        destroys the error frame before the peer reads it."""
        if self._closing:
            return
        self._closing = True
        self.state.metrics.protocol_errors["binary"] += 1
        self.state.logger.warning("binary_protocol_error", client=self.client, status=status, error=message)
        self.transport.writelines(encode_error(0, status, message))
        self._target, self._filled = memoryview(bytearray(65536)), 0
        if self.transport.can_write_eof():
            self.transport.write_eof()
        if self._timer:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(LINGER_S, self.transport.close)

    def _arm(self, seconds: float, why: str) -> None:
        if self._timer:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(seconds, self._timed_out, why)

    def _timed_out(self, why: str) -> None:
        if self.busy:
            self._arm(self.state.config.limits.idle_timeout_s, "idle")
        elif why == "slow":
            self.fail(408, "frame not completed within the header timeout")
        else:
            self.close_idle()

    def say_goodbye(self) -> None:
        """Drain: no new requests here, please (those already sent are answered)."""
        if not self._said_goodbye and not self._closing and not self.transport.is_closing():
            self._said_goodbye = True
            self.transport.writelines(encode_goodbye("server is shutting down; send new requests on a new "
                                                     "connection"))

    def close_idle(self) -> None:
        if not self.busy and not self._closing:
            self._closing = True
            self.transport.close()
