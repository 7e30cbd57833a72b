"""Python client for the engine's binary TCP protocol (engine.server.binary).

    from engine.client import Client
    with Client("127.0.0.1", 8001) as c:
        outputs = c.infer("mlp", {"x": x})        # {"y": ndarray}

One connection, one request at a time (open several clients for
concurrency). Answers are read into a buffer allocated at the announced
size and returned as numpy views of it.
"""

from __future__ import annotations

import itertools
import socket
import zlib

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
        self._ids = itertools.count(1)
        self._header = bytearray(wire.HEADER.size)

    def connect(self) -> None:
        if self._sock is None:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self):
        self.connect()
        return self

    def __exit__(self, *exc):
        self.close()

    def infer(self, model: str, inputs: dict[str, np.ndarray], *, version: str = "", priority: int = 0,
              timeout_us: int = 0) -> dict[str, np.ndarray]:
        self.connect()
        rid = next(self._ids)
        parts = wire.encode_infer(rid, model, inputs, version=version, token=self.token, priority=priority,
                                  timeout_us=timeout_us)
        try:
            self._sock.sendall(b"".join(parts))
            op, payload = self._read_frame()
        except (OSError, EngineError):
            self.close()  # the stream's position is unknown now
            raise
        if op == wire.OP_ERROR:
            erid, status, message = wire.decode_error(payload)
            if erid == 0:
                self.close()  # protocol error: the server closed the connection
            raise ServerError(status, message)
        got, outputs = wire.decode_result(payload)
        if got != rid:
            self.close()
            raise EngineError(f"answer for request {got}, expected {rid}", where=f"{self.host}:{self.port}")
        return outputs

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
