"""The server side of the binary TCP protocol (frames and codecs: engine.wire).

The server reads a payload in steps (asyncio.BufferedProtocol): first the
INFER fixed part and names, at most PREFIX_MAX bytes, then it checks the
token; only an authenticated request's payload is read on, into a buffer
that grows as bytes arrive (never sized from the length field alone) and is
charged to the server's buffer budget (limits.max_buffered_bytes). A
connection whose answers the client does not read (limits.max_unsent_bytes),
or whose unanswered requests hold limits.max_body bytes, is not read until
that drains; one that takes no answer bytes for limits.write_timeout_s is
closed.

Errors: a request that fails or is refused gets an ERROR frame with its id
(status codes as HTTP) and the connection stays open (a refused payload is
read and discarded, not buffered); a malformed header, a bad checksum, an
oversize length, a malformed payload or request id 0 gets an ERROR frame
with request id 0 and the connection is closed, because the stream can no
longer be trusted.

Shutdown: the drain sends GOODBYE on every connection (engine.wire); HTTP's
counterpart is `Connection: close` on every response during the drain. A
client may have sent a request before the GOODBYE reached it; the server
closes a connection only between requests (close_idle), so a request that
arrives after that close was not read at all, and the client, which saw
GOODBYE and then the close with no byte of an answer, sends it again on a new
connection (as HTTP/2 clients do with requests past a GOAWAY).
"""

from __future__ import annotations

import asyncio
import zlib

from engine.server import timing
from engine.server.http import set_nodelay
from engine.server.timing import clock
from engine.server.errors import ServeError
from engine.wire import (HEADER, INFER_FIXED, OP_INFER, FrameError, InferHead, decode_infer_head, decode_tensors,
                         encode_error, encode_goodbye, encode_result, infer_prefix_length, parse_header)

LINGER_S = 1.0  # how long a failed connection keeps discarding input before it closes
PREFIX_MAX = 8 << 10   # INFER fixed part + model, version, token: all that is read before the token is checked
GROW_MIN = 64 << 10    # first payload buffer after the prefix; it doubles as bytes arrive
PIPELINE_MAX = 64      # requests in flight per connection before it is not read (4x the client's default window)
_DISCARD = memoryview(bytearray(64 << 10))  # input that is read only to be dropped (shared: never looked at)

_HEADER, _PREFIX, _PAYLOAD, _DISCARDING = range(4)   # what the connection is reading


class BinaryConnection(asyncio.BufferedProtocol):
    """One client connection: a frame header into a fixed 16-byte buffer,
    then the payload's first PREFIX_MAX bytes at most (the fixed part and the
    names, and all of a small frame), then, once the token is accepted, the
    rest into a buffer that doubles as bytes arrive."""

    def __init__(self, server):
        self.server = server            # engine.server.server.Server
        self.state = server.state
        self.transport = None
        self.client = ""
        self.address = ""
        self._admitted = False          # counted against the connection caps
        self._header = bytearray(HEADER.size)
        self._phase = _HEADER
        self._buf = self._header        # what is being filled
        self._target = memoryview(self._header)
        self._filled = 0
        self._want = HEADER.size        # bytes of _buf to fill before the next decision
        self._length = self._crc = 0    # the current frame's payload length and checksum
        self._discard = 0               # payload bytes still to drop (a refused request)
        self._reserved = 0              # budget held by the payload being read
        self._held = 0                  # budget held by requests read and not answered yet
        self._head: InferHead | None = None
        self._principal = None
        self._first_at = 0.0            # engine.server.timing's `first` stamp of the frame being read
        self._progress = self._window_mark = 0   # payload bytes received (for limits.min_body_rate)
        self.busy = 0
        self._closing = False
        self._eof = False
        self._reading_paused = False
        self._writing_paused = False
        self._timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._write_ready = asyncio.Event()
        self._write_ready.set()
        self.fresh = False              # accepted after the drain began
        self._said_goodbye = False

    # ---- asyncio callbacks ------------------------------------------------
    def connection_made(self, transport):
        self.transport = transport
        peer = transport.get_extra_info("peername") or ("?", 0)
        self.client, self.address = f"{peer[0]}:{peer[1]}", peer[0]
        limits = self.state.config.limits
        refused = self.state.connection_caps.admit(self.address, limits)
        if refused is not None:
            self._closing = True
            transport.writelines(encode_error(0, 503, f"too many connections: {refused}"))
            transport.close()
            return
        self._admitted = True
        set_nodelay(transport.get_extra_info("socket"))
        transport.set_write_buffer_limits(high=limits.max_unsent_bytes)
        self.server.connections.add(self)
        self._arm(limits.idle_timeout_s, "idle")
        if self.state.draining:
            self.fresh = True
            self.say_goodbye()

    def connection_lost(self, exc):
        self._closing = True
        for timer in (self._timer, self._write_timer):
            if timer:
                timer.cancel()
        self._release_partial()
        if self._admitted:
            self.state.connection_caps.release(self.address)
            self._admitted = False
        self.server.connections.discard(self)
        self._write_ready.set()
        self.server.connection_idle()

    def eof_received(self):
        # A client may send its requests and half-close: answer them, then close.
        self._eof = True
        return bool(self.busy)

    def pause_writing(self):
        # The client does not read its answers: stop reading its requests, and
        # give it write_timeout_s to start reading again.
        self._writing_paused = True
        self._write_ready.clear()
        self._write_timer = asyncio.get_running_loop().call_later(
            self.state.config.limits.write_timeout_s, self._write_timed_out)
        self._update_reading()

    def resume_writing(self):
        self._writing_paused = False
        if self._write_timer:
            self._write_timer.cancel()
            self._write_timer = None
        self._write_ready.set()
        self._update_reading()

    def get_buffer(self, sizehint):
        if self._closing or self._phase == _DISCARDING:
            return _DISCARD[:min(len(_DISCARD), self._discard or len(_DISCARD))]
        return self._target[self._filled:self._want]

    def buffer_updated(self, nbytes):
        if self._closing:
            return  # lingering after an error: discard
        if self._phase == _HEADER:
            if self._filled == 0:
                # The first byte of a frame: the rest of its header must follow within the header timeout.
                self._first_at = clock()
                self._arm(self.state.config.limits.header_timeout_s, "slow")
        else:
            self._progress += nbytes
            if self._phase == _DISCARDING:
                self._discard -= nbytes
                if not self._discard:
                    self._next_frame()
                return
        self._filled += nbytes
        if self._filled < self._want:
            return
        try:
            if self._phase == _HEADER:
                self._header_done()
            elif self._phase == _PREFIX:
                self._prefix_step()
            else:
                self._payload_step()
        except FrameError as exc:
            self.fail(exc.status, exc.message)

    # ---- reading a frame --------------------------------------------------
    def _header_done(self) -> None:
        limits = self.state.config.limits
        op, length, crc = parse_header(bytes(self._header), limits.max_body)
        if op != OP_INFER:
            raise FrameError(f"op {op} is not a request")
        if length < INFER_FIXED.size:
            raise FrameError(f"INFER payload of {length} bytes is shorter than its fixed part ({INFER_FIXED.size})")
        self._length, self._crc = length, crc
        self._phase, self._head, self._principal = _PREFIX, None, None
        # One read takes the fixed part, the names and, for a small frame,
        # everything: as few reads per frame as before the token check existed.
        self._set_buffer(bytearray(min(length, PREFIX_MAX)), 0)
        self._window_mark = self._progress
        self._arm(limits.header_timeout_s, "body")

    def _prefix_step(self) -> None:
        rid, need = infer_prefix_length(self._target)
        if need > self._length:
            return self._refuse(rid, "", 400, f"INFER payload of {self._length} bytes is shorter than its "
                                              f"names ({need} bytes)")
        if need > PREFIX_MAX:
            return self._refuse(rid, "", 431, f"model, version and token take {need - INFER_FIXED.size} bytes; "
                                              f"at most {PREFIX_MAX - INFER_FIXED.size} are read before the token "
                                              "is checked")
        head = decode_infer_head(self._target[:need])
        if head.request_id == 0:
            raise FrameError("request id 0 is reserved for connection errors; number requests from 1")
        self._head = head
        st = self.state
        try:
            self._principal = st.authenticate(f"Bearer {head.token}" if head.token else None, self.address)
        except ServeError as exc:
            return self._refuse(head.request_id, head.model, exc.status, exc.message)
        self._phase = _PAYLOAD
        self._payload_step()

    def _payload_step(self) -> None:
        if self._filled < self._length:
            return self._grow()
        payload = self._target[:self._length]
        stamps = {"model": self._head.model, "t_first": self._first_at, "t_read": clock()}
        head, principal, held = self._head, self._principal, self._reserved
        self._reserved = 0
        self._held += held
        self._next_frame()
        if zlib.crc32(payload) != self._crc:
            self._unhold(held)
            return self.fail(400, "payload checksum mismatch")
        self.busy += 1
        asyncio.get_running_loop().create_task(self._serve(payload, head, principal, held, stamps))
        self._update_reading()

    def _grow(self) -> None:
        """Double the payload buffer (at most to the announced length),
        charging the server's budget; over budget the request gets 503."""
        st = self.state
        size = min(self._length, max(2 * len(self._buf), GROW_MIN))
        if not st.buffered.reserve(size - self._reserved, st.config.limits):
            head = self._head
            return self._refuse(head.request_id, head.model, 503,
                                f"server busy: {st.buffered.used} bytes of requests buffered, limits."
                                f"max_buffered_bytes is {st.config.limits.max_buffered_bytes}; retry")
        self._reserved = size
        grown = bytearray(size)
        grown[:self._filled] = self._target[:self._filled]
        self._set_buffer(grown, self._filled)

    def _set_buffer(self, buf: bytearray, filled: int) -> None:
        self._buf, self._target, self._filled, self._want = buf, memoryview(buf), filled, len(buf)

    def _next_frame(self) -> None:
        self._phase = _HEADER
        self._set_buffer(self._header, 0)
        self._arm(self.state.config.limits.idle_timeout_s, "idle")

    def _release_partial(self) -> None:
        if self._reserved:
            self.state.buffered.release(self._reserved)
            self._reserved = 0
        self._set_buffer(self._header, 0)

    def _refuse(self, rid: int, model: str, status: int, message: str) -> None:
        """Answer one request with an error frame and drop the rest of its
        payload as it arrives, unbuffered; the connection stays usable."""
        left = self._length - self._filled
        self._release_partial()
        self.transport.writelines(encode_error(rid, status, message))
        self._record(rid, {"model": model}, status, clock() - self._first_at)
        if left:
            self._phase, self._discard = _DISCARDING, left
        else:
            self._next_frame()

    def _update_reading(self) -> None:
        """Read while answers drain, fewer than PIPELINE_MAX requests are in
        flight (each answer computed while the client does not read waits in
        memory) and they hold less than one largest request (limits.max_body)."""
        if self.transport.is_closing():
            return
        pause = (self._writing_paused or self.busy >= PIPELINE_MAX
                 or self._held >= self.state.config.limits.max_body)
        if pause != self._reading_paused:
            self._reading_paused = pause
            (self.transport.pause_reading if pause else self.transport.resume_reading)()

    # ---- work -------------------------------------------------------------
    async def _serve(self, payload: memoryview, head: InferHead, principal, held: int, log: dict) -> None:
        st = self.state
        status = 200
        st.in_flight += 1
        try:
            try:
                inputs = decode_tensors(payload, head.tensors_at, head.tensor_count)
            except FrameError as exc:
                status = exc.status
                return self.fail(exc.status, exc.message)
            try:
                _, outputs = await st.infer(head.model, head.version or None, inputs, priority=head.priority or None,
                                            timeout_us=head.timeout_us or None, principal=principal, info=log)
                parts = encode_result(head.request_id, outputs)
                log["t_encoded"] = clock()
            except Exception as exc:  # noqa: BLE001 - every request gets an answer frame
                status = getattr(exc, "status", 500)
                parts = encode_error(head.request_id, status, getattr(exc, "message", f"{type(exc).__name__}: {exc}"))
            # The request's bytes are free once answered: while the answer
            # waits for a slow reader they no longer count against anyone.
            payload = inputs = None
            self._unhold(held)
            held = 0
            await self._write(parts)
            log["t_written"] = clock()
        finally:
            self._unhold(held)
            st.in_flight -= 1
            self.busy -= 1
            self._update_reading()
            self._record(head.request_id, log, status, log.get("t_written", clock()) - log["t_first"])
            self.server.connection_idle()
            if self._eof and not self.busy and not self._closing:
                self._closing = True
                self.transport.close()

    def _unhold(self, held: int) -> None:
        if held:
            self.state.buffered.release(held)
            self._held -= held
            self._update_reading()

    def _record(self, rid: int, log: dict, status: int, elapsed: float) -> None:
        st = self.state
        model = st.model_label(log["model"]) if log.get("model") else ""
        st.metrics.count_request(model, "binary", status, elapsed)
        spans = timing.phases(log) if status == 200 and model else None
        if spans is not None:
            st.metrics.observe_phases(model, "binary", spans)
        st.logger.info("request", protocol="binary", client=self.client, request_id=rid,
                       model=model or None, batch=log.get("batch"), batch_size=log.get("batch_size"),
                       instance=log.get("instance"), status=status, **timing.log_fields(spans),
                       latency_us=int(elapsed * 1e6))

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
        self._release_partial()
        self.state.metrics.protocol_errors["binary"] += 1
        self.state.logger.warning("binary_protocol_error", client=self.client, status=status, error=message)
        self.transport.writelines(encode_error(0, status, message))
        if self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()
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
        limits = self.state.config.limits
        if self._reading_paused:
            # Not reading is the server's doing (backpressure), not the client's.
            self._window_mark = self._progress
            return self._arm(limits.header_timeout_s if why != "idle" else limits.idle_timeout_s, why)
        if why == "body":
            # Progress, not completion: each window must bring min_body_rate's share.
            if self._progress - self._window_mark >= limits.min_body_rate * limits.header_timeout_s:
                self._window_mark = self._progress
                self._arm(limits.header_timeout_s, "body")
            else:
                self.fail(408, f"frame arrives slower than {limits.min_body_rate} bytes/s (limits.min_body_rate "
                               f"over {limits.header_timeout_s:g} s)")
        elif why == "slow":
            self.fail(408, "frame header not completed within the header timeout")
        elif self.busy:
            self._arm(limits.idle_timeout_s, "idle")
        else:
            self.close_idle()

    def say_goodbye(self) -> None:
        """Drain: no new requests here, please (those already sent are answered)."""
        if not self._said_goodbye and not self._closing and not self.transport.is_closing():
            self._said_goodbye = True
            self.transport.writelines(encode_goodbye("server is shutting down; send new requests on a new "
                                                     "connection"))

    def _write_timed_out(self) -> None:
        self._write_timer = None
        self.state.logger.warning("write_timeout", protocol="binary", client=self.client,
                                  unsent=self.transport.get_write_buffer_size(),
                                  timeout_s=self.state.config.limits.write_timeout_s)
        self.transport.abort()

    @property
    def mid_request(self) -> bool:
        """Some bytes of a request are read, not all: a close now would lose it."""
        return self._phase != _HEADER or self._filled > 0

    def close_idle(self) -> None:
        """Close when no request is in progress: none read and unanswered (busy),
        no byte of one read (mid_request). So a client that sees the close
        after GOODBYE with no answer knows none of its requests in flight was
        read, and sends them again elsewhere (engine.client.Client.infer)."""
        if not self.busy and not self.mid_request and not self._closing:
            self._closing = True
            self.transport.close()
