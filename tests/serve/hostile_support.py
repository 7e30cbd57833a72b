"""Tools for the hostile-client tests: a server's RSS from /proc, a health
probe that measures event-loop stalls from its own thread and connection,
raw HTTP exchanges, binary frames by hand, and an HS256 auth setup."""

from __future__ import annotations

import socket
import threading
import time
import uuid
import zlib
from pathlib import Path

import jwt
import numpy as np

from engine import wire
from serve_support import parse_prometheus, wait_for  # noqa: F401 - the hostile tests take it from here


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def unlimited_failures(auth_config: dict) -> dict:
    """These tests send many requests without a token on purpose (to measure
    memory and labels, not the per-address failure limit, which
    test_auth_policy covers): lift the limit so 401 stays 401."""
    return {**auth_config, "failure_limit": {"requests_per_s": 1_000_000, "burst": 1_000_000}}


def log_events(server, event: str) -> list[dict]:
    return [e for e in server.logs() if e.get("event") == event or e.get("msg") == event]


def metrics(server) -> dict:
    status, body, _ = server.get("/metrics")
    assert status == 200
    return parse_prometheus(body.decode())


def requests_total(server, model: str, protocol: str, code: int) -> float:
    key = ("aie_requests_total", tuple(sorted((("model", model), ("protocol", protocol), ("code", str(code))))))
    return metrics(server).get(key, 0.0)


class HealthProbe:
    """GET /v2/health/live over one keep-alive connection, back to back,
    from a thread: each round trip's latency is what a load balancer sees
    while the event loop is busy with someone else. Bounded by max_s."""

    def __init__(self, server, max_s: float = 120.0):
        self.server, self.max_s = server, max_s
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        wait_for(lambda: self.latencies or self.errors, "the first health answer", 10)
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(self.max_s)

    def _run(self) -> None:
        req = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
        end = time.monotonic() + self.max_s
        try:
            with socket.create_connection(("127.0.0.1", self.server.http_port), timeout=30) as s:
                while not self._stop.is_set() and time.monotonic() < end:
                    t0 = time.perf_counter()
                    s.sendall(req)
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = s.recv(4096)
                        if not chunk:
                            raise ConnectionError("health connection closed")
                        data += chunk
                    self.latencies.append(time.perf_counter() - t0)
                    assert data.startswith(b"HTTP/1.1 200"), data[:100]
                    time.sleep(0.005)  # a load balancer's probe, not a load generator
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def worst(self) -> float:
        assert not self.errors, self.errors
        return max(self.latencies)


def http_exchange(port: int, data: bytes, wait: float = 5.0) -> tuple[bytes, bool]:
    """Send raw bytes; everything the server sent and whether it closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        return read_until_close(s, wait)


def keep_alive_exchanges(port: int, request: bytes, times: int, wait: float = 5.0) -> list[bytes]:
    """Send `request` `times` times on one connection, each after the previous
    answer's head arrived; what each send read back (its head, and any body
    bytes that came with it). A close before a head is an AssertionError."""
    answers = []
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        for i in range(times):
            s.sendall(request)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(4096)
                assert chunk, f"request {i + 1} of {times}: the server closed the connection after {data[:200]!r}"
                data += chunk
            answers.append(data)
    return answers


def read_until_close(s: socket.socket, wait: float) -> tuple[bytes, bool]:
    chunks, closed = [], False
    deadline = time.monotonic() + wait
    s.settimeout(wait)
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        chunks.append(chunk)
        s.settimeout(0.3)
    return b"".join(chunks), closed


def status_of(raw: bytes) -> int:
    assert raw.startswith(b"HTTP/1."), raw[:100]
    return int(raw.split(b" ", 2)[1])


def read_frame(s: socket.socket) -> tuple[int, memoryview]:
    """One frame from the server (op, payload); ConnectionError if it closed."""
    def exactly(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf
    op, length, crc = wire.parse_header(exactly(16), 1 << 30)
    payload = memoryview(exactly(length))
    assert zlib.crc32(payload) == crc
    return op, payload


def infer_frame(rid: int, model: str = "mlp", inputs=None, token: str = "") -> bytes:
    inputs = inputs if inputs is not None else {"input": np.ones((1, 784), np.float32)}
    return b"".join(wire.encode_infer(rid, model, inputs, token=token))


def raw_infer_frame(rid: int, model: str, tensor_desc: bytes, tensor_bytes: bytes = b"") -> bytes:
    """An INFER frame with a hand-written tensor descriptor block."""
    name = model.encode()
    head = wire.INFER_FIXED.pack(rid, 0, 0, len(name), 0, 0, 0, 1) + name
    pad = b"\0" * (-(len(head) + len(tensor_desc)) % wire.ALIGN)
    return b"".join(wire.frame(wire.OP_INFER, [head, tensor_desc, pad, tensor_bytes]))


class Auth:
    """An HS256 secret file and tokens for it."""

    def __init__(self, directory: Path):
        self.secret = b"s3cret-" + uuid.uuid4().hex.encode()
        self.path = directory / "jwt.secret"
        self.path.write_bytes(self.secret)

    def config(self) -> dict:
        return {"enabled": True, "algorithms": ["HS256"], "secret_file": str(self.path), "open_health": True}

    def token(self) -> str:
        now = int(time.time())
        return jwt.encode({"sub": "tester", "iat": now, "exp": now + 600, "scope": "infer"}, self.secret,
                          algorithm="HS256")
