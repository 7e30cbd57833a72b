"""Python client for the engine's binary TCP protocol (engine.server.binary).

    from engine.client import Client
    with Client("127.0.0.1", 8001) as c:
        outputs = c.infer("mlp", {"x": x})        # {"y": ndarray}

        # Pipelined: several requests in flight on the one connection,
        # answered by request id in whatever order they finish.
        outs = c.infer_many("mlp", [{"x": x0}, {"x": x1}, ...], window=16)
        rid = c.send("mlp", {"x": x}); ...; rid, outputs_or_error = c.receive()

The server answers each request by its id as soon as it is done, so requests
sent back to back share its batches. A Client is not thread-safe (one per
thread). Answers are read into a buffer allocated at the announced size and
returned as numpy views of it.
"""

from __future__ import annotations

import itertools
import socket
import zlib
from collections.abc import Iterable

import numpy as np

from engine.errors import EngineError
from engine.server import binary as wire


class ServerError(EngineError):
    """The server answered with an error frame; `status` is its HTTP-like code."""

    def __init__(self, status: int, message: str):
        super().__init__(message, where=f"server status {status}")
        self.status = status


class Client:
    def __init__(self, host: str = "127.0.0.1", port: int = 8001, *, timeout: float = 30.0, token: str = ""):
        self.host, self.port, self.timeout, self.token = host, port, timeout, token
        self._sock: socket.socket | None = None
        # From 1: id 0 marks a connection error in the server's error frames
        # (and the server refuses requests numbered 0).
        self._ids = itertools.count(1)
        self._header = bytearray(wire.HEADER.size)
        self._waiting: set[int] = set()                     # ids sent, answer not read yet
        self._answers: dict[int, object] = {}               # read by infer() for another id

    def connect(self) -> None:
        if self._sock is None:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        self._waiting.clear()
        self._answers.clear()
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
        requests in flight that arrive meanwhile are kept for receive()."""
        rid = self.send(model, inputs, version=version, priority=priority, timeout_us=timeout_us)
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

    def _read_answer(self) -> tuple[int, dict[str, np.ndarray] | ServerError]:
        try:
            op, payload = self._read_frame()
        except (OSError, EngineError):
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

    def _read_frame(self) -> tuple[int, memoryview]:
        self._recv_into(memoryview(self._header))
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
