"""Python client for the engine's binary TCP protocol (engine.wire).

    from engine.client import Client
    with Client("127.0.0.1", 8001) as c:
        outputs = c.infer("mlp", {"x": x})        # {"y": ndarray}

        # Pipelined: several requests in flight on the one connection,
        # answered by request id in whatever order they finish.
        outs = c.infer_many("mlp", [{"x": x0}, {"x": x1}, ...], window=16)
        rid = c.send("mlp", {"x": x}); ...; rid, outputs_or_error = c.receive()

The server answers each request by its id as soon as it is done, so requests
sent back to back share its batches. When the server drains (SIGTERM) it sends
GOODBYE: the answers still due are read, and the next request goes on a new
connection; a server that has stopped accepting then refuses it before any
byte of the request is sent (ConnectionRefusedError: safe to retry elsewhere).
A request sent before the GOODBYE arrived may find the connection closed
unread: infer() sends it once more on a new connection (send() and
infer_many() leave that to the caller: ConnectionError). A Client is not
thread-safe (one per thread). Answers are read into a buffer allocated at
the announced size and returned as numpy views of it.
"""

from __future__ import annotations

import itertools
import socket
import ssl
import zlib
from collections.abc import Iterable

import numpy as np

from engine.errors import EngineError
from engine import wire


class ServerError(EngineError):
    """The server answered with an error frame; `status` is its HTTP-like code."""

    def __init__(self, status: int, message: str):
        super().__init__(message, where=f"server status {status}")
        self.status = status


class Client:
    def __init__(self, host: str = "127.0.0.1", port: int = 8001, *, timeout: float = 30.0, token: str = "",
                 ssl_context: ssl.SSLContext | None = None, server_hostname: str | None = None):
        """`ssl_context`: speak TLS (a server with engine.tls); the certificate
        is checked against `server_hostname`, by default `host`."""
        self.host, self.port, self.timeout, self.token = host, port, timeout, token
        self.ssl_context, self.server_hostname = ssl_context, server_hostname or host
        self._sock: socket.socket | None = None
        # From 1: id 0 marks a connection error in the server's error frames
        # (and the server refuses requests numbered 0).
        self._ids = itertools.count(1)
        self._header = bytearray(wire.HEADER.size)
        self._waiting: set[int] = set()                     # ids sent, answer not read yet
        self._answers: dict[int, object] = {}               # read by infer() for another id
        self._goodbye = False                               # the server asked for a new connection
        self._between = False   # reading a frame, none of it arrived yet (_read_frame)
        self._unread = False    # the last connection lost: closed after GOODBYE between two frames (_read_answer)

    def connect(self) -> None:
        if self._sock is None:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.ssl_context is not None:
                try:
                    sock = self.ssl_context.wrap_socket(sock, server_hostname=self.server_hostname)
                except BaseException:
                    sock.close()
                    raise
            self._sock = sock

    def close(self) -> None:
        self._waiting.clear()
        self._answers.clear()
        self._close_socket()

    def _close_socket(self) -> None:
        self._goodbye = False
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self):
        self.connect()
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def in_flight(self) -> int:
        """Requests sent whose answers have not been returned yet."""
        return len(self._waiting) + len(self._answers)

    def send(self, model: str, inputs: dict[str, np.ndarray], *, version: str = "", priority: int = 0,
             timeout_us: int = 0) -> int:
        """Send one request without waiting for its answer; its request id."""
        self._leave_if_told()
        self.connect()
        rid = next(self._ids)
        parts = wire.encode_infer(rid, model, inputs, version=version, token=self.token, priority=priority,
                                  timeout_us=timeout_us)
        try:
            self._sock.sendall(b"".join(parts))
        except OSError:
            self._lost()
            raise
        self._waiting.add(rid)
        return rid

    def receive(self) -> tuple[int, dict[str, np.ndarray] | ServerError]:
        """The next answer, in completion order: (request id, outputs), or
        (request id, ServerError) for a request the server refused or failed."""
        if self._answers:
            rid = next(iter(self._answers))
            return rid, self._answers.pop(rid)
        if not self._waiting:
            raise EngineError("receive() with no request in flight", where=f"{self.host}:{self.port}")
        return self._read_answer()

    def infer(self, model: str, inputs: dict[str, np.ndarray], *, version: str = "", priority: int = 0,
              timeout_us: int = 0) -> dict[str, np.ndarray]:
        """One request and its answer; ServerError if refused. Answers to other
        requests in flight that arrive meanwhile are kept for receive().

        Sent once more, on a new connection, when the server had said GOODBYE
        and closed the connection before any byte of an answer to it: the
        GOODBYE crossed the request on the wire, and a draining server closes
        only a connection that holds no byte of an unanswered request
        (engine.server.binary), so it never saw this one -- as HTTP clients
        resend on a new connection a request whose keep-alive connection the
        server closed."""
        alone = not self._waiting and not self._answers
        rid = self.send(model, inputs, version=version, priority=priority, timeout_us=timeout_us)
        try:
            return self._answer_to(rid)
        except OSError:
            if not (alone and self._unread):
                raise
        rid = self.send(model, inputs, version=version, priority=priority, timeout_us=timeout_us)
        return self._answer_to(rid)

    def _answer_to(self, rid: int) -> dict[str, np.ndarray]:
        while True:
            got, answer = self._read_answer()
            if got == rid:
                if isinstance(answer, ServerError):
                    raise answer
                return answer
            self._answers[got] = answer

    def infer_many(self, model: str, inputs: Iterable[dict[str, np.ndarray]], *, window: int = 16,
                   return_errors: bool = False, version: str = "", priority: int = 0,
                   timeout_us: int = 0) -> list:
        """Pipeline `inputs` over this connection, at most `window` in flight;
        outputs in input order. A refused request raises its ServerError once
        all the others are answered (the connection stays usable), or with
        return_errors=True stands in the list in its place."""
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if self._waiting or self._answers:
            raise EngineError("infer_many() needs a connection with no request in flight",
                              where=f"{self.host}:{self.port}")
        order: dict[int, int] = {}
        results: list = []
        for i, item in enumerate(inputs):
            if len(self._waiting) >= window:
                rid, answer = self._read_answer()
                results[order.pop(rid)] = answer
            order[self.send(model, item, version=version, priority=priority, timeout_us=timeout_us)] = i
            results.append(None)
        while self._waiting:
            rid, answer = self._read_answer()
            results[order.pop(rid)] = answer
        if not return_errors:
            failed = next((r for r in results if isinstance(r, ServerError)), None)
            if failed is not None:
                raise failed
        return results

    def _leave_if_told(self) -> None:
        """Before a request: move to a new connection when the server said
        GOODBYE, or closed this one while it was idle (both may be waiting
        unread in the socket), keeping the answers still due on the old one."""
        if self._sock is None:
            return
        if not self._waiting and not self._goodbye:
            got = self._peek_idle()
            if got is None:
                return
            if got != wire.OP_GOODBYE:
                self._close_socket()  # closed (or an error frame) while idle: nothing of ours was lost
                return
            self._goodbye = True
        if self._goodbye:
            while self._waiting:
                rid, answer = self._read_answer()
                self._answers[rid] = answer
            self._close_socket()

    def _peek_idle(self) -> int | None:
        """With nothing in flight: the op of a frame the server sent on its
        own, -1 if it closed the connection, None if nothing arrived. (A
        non-blocking read, not select(): TLS may hold decrypted bytes, or
        deliver records that carry none.)"""
        self._sock.settimeout(0)
        try:
            n = self._sock.recv_into(self._header)
        except (BlockingIOError, ssl.SSLWantReadError):
            return None
        except OSError:
            return -1
        finally:
            self._sock.settimeout(self.timeout)
        if n == 0:
            return -1
        try:
            return self._read_frame(n)[0]
        except (OSError, EngineError):
            return -1

    def _read_answer(self) -> tuple[int, dict[str, np.ndarray] | ServerError]:
        self._unread = False
        try:
            op, payload = self._read_frame()
            while op == wire.OP_GOODBYE:  # answers still due follow it
                self._goodbye = True
                op, payload = self._read_frame()
        except (OSError, EngineError) as exc:
            # Closed (or reset: the close found our request unread) after
            # GOODBYE, with no byte of a further frame: the server read none
            # of what is still in flight (infer() resends it).
            self._unread = self._goodbye and self._between and isinstance(exc, ConnectionError)
            self._lost()  # the stream's position is unknown now
            raise
        if op == wire.OP_ERROR:
            rid, status, message = wire.decode_error(payload)
            if rid == 0:
                self._lost()  # protocol error: the server closed the connection
                raise ServerError(status, message)
            answer: dict[str, np.ndarray] | ServerError = ServerError(status, message)
        elif op == wire.OP_RESULT:
            rid, answer = wire.decode_result(payload)
        else:
            self._lost()
            raise EngineError(f"unexpected frame op {op} from the server", where=f"{self.host}:{self.port}")
        if rid not in self._waiting:
            self._lost()
            raise EngineError(f"answer for request {rid}, which is not in flight", where=f"{self.host}:{self.port}")
        self._waiting.discard(rid)
        return rid, answer

    def _lost(self) -> None:
        """The connection is unusable: every request in flight on it is lost."""
        self._waiting.clear()
        self._answers.clear()
        self.close()

    def _read_frame(self, have: int = 0) -> tuple[int, memoryview]:
        """The next frame; `have` bytes of its header are already read.
        Until its first byte arrives, self._between says so."""
        view = memoryview(self._header)[have:]
        self._between = not have
        if not have:
            n = self._sock.recv_into(view)   # ConnectionResetError: reset where a frame would begin
            if n == 0:
                raise ConnectionError(f"{self.host}:{self.port} closed the connection")
            self._between = False
            view = view[n:]
        self._recv_into(view)
        op, length, crc = wire.parse_header(bytes(self._header), 1 << 40)
        payload = memoryview(bytearray(length))
        self._recv_into(payload)
        if zlib.crc32(payload) != crc:
            raise EngineError("answer checksum mismatch", where=f"{self.host}:{self.port}")
        return op, payload

    def _recv_into(self, view: memoryview) -> None:
        while len(view):
            n = self._sock.recv_into(view)
            if n == 0:
                raise ConnectionError(f"{self.host}:{self.port} closed the connection")
            view = view[n:]
