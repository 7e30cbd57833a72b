"""HTTP/1.1 on asyncio streams: request parsing with limits, response writing.

Only what an inference API needs: Content-Length bodies (chunked uploads are
refused with 411/501 rather than half-supported), keep-alive by default,
`Expect: 100-continue`. Every malformed input raises ServeError carrying the
status to send; the connection is then closed, because after a framing error
the byte stream cannot be trusted to find the next request.

Strict where proxies differ (request smuggling): lengths are ASCII digits
only, bare CR/LF/NUL in the head is refused, HTTP/1.1 needs Host, and the
path is routed as sent (never percent-decoded). Hand-written rather than
httptools or h11: see the README's dependency table for the measurement.
"""

from __future__ import annotations

import asyncio
import re
import socket
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qs

from engine.server.config import LimitsConfig
from engine.server.errors import ServeError
from engine.server.timing import clock

_REQUEST_LINE = re.compile(rb"^([A-Z]{1,16}) (\S{1,8192}) HTTP/(\d)\.(\d)$")
_TOKEN = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_LENGTH = re.compile(r"[0-9]{1,18}")


class ClientGone(Exception):
    """Not an error: the peer closed or went idle; close quietly, there is nobody to answer."""


@dataclass
class Request:
    method: str
    target: str
    path: str                      # raw, not percent-decoded: routing sees what the client sent
    query: dict[str, list[str]]
    headers: dict[str, str]        # lower-case names; repeated headers joined by ", "
    body: bytes | bytearray = b""
    keep_alive: bool = True
    client: str = ""
    http_minor: int = 1
    length: int = 0                # Content-Length
    reserved: int = 0              # bytes of the server's buffer budget held for the body
    refusal: object = None         # the answer admission gave instead of reading the body
    extra: dict = field(default_factory=dict)
    first_at: float = 0.0          # engine.server.timing's `first` and `read` stamps
    read_at: float = 0.0

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name, default)


async def read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limits: LimitsConfig,
                       client: str, admission) -> Request:
    """Read one request. Idle wait for its first byte is bounded by
    idle_timeout_s (ClientGone), the rest of the head by header_timeout_s
    (408: a slowloris cannot hold a connection by trickling bytes), the body
    by limits.min_body_rate over each header_timeout_s window (408).

    `admission.admit(req)` runs between head and body: it may set
    `req.refusal` (a missing token, the buffer budget spent), and then
    neither `100 Continue` is sent nor a byte of the body read; what it
    reserved is handed back by `admission.release(req)` if the body never
    arrives (after the answer, the caller releases it)."""
    # One asyncio.timeout rescheduled per phase, not one per read: wait_for
    # wrapped every read in a Task (Python 3.11) and even three timeout
    # contexts showed in the per-request profile of a small model.
    loop = asyncio.get_running_loop()
    phase, length = "idle", 0
    try:
        async with asyncio.timeout(limits.idle_timeout_s) as deadline:
            first = await reader.readexactly(1)
            first_at = clock()
            phase = "head"
            deadline.reschedule(loop.time() + limits.header_timeout_s)
            head = first + await reader.readuntil(b"\r\n\r\n")
            if len(head) > limits.max_header_bytes:
                raise ServeError(f"request head exceeds {limits.max_header_bytes} bytes", status=431)
            req = parse_head(head, limits, client)
            req.first_at = first_at
            length = req.length = _content_length(req)
            if length > limits.max_body:
                raise ServeError(f"body of {length} bytes exceeds the limit of {limits.max_body} bytes", status=413)
            if req.http_minor >= 1 and "host" not in req.headers:
                raise ServeError("HTTP/1.1 request without a Host header")
            admission.admit(req)
            if req.refusal is not None:
                if length:
                    req.keep_alive = False  # the unread body would be taken for the next request
                return req
            if length:
                if req.header("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                phase = "body"
                try:
                    req.body = await _read_body(reader, length, limits, deadline, loop)
                except BaseException:
                    admission.release(req)
                    raise
    except TimeoutError:
        if phase == "idle":
            raise ClientGone() from None
        if phase == "head":
            raise ServeError(f"request head not received within {limits.header_timeout_s:g} s", status=408) from None
        raise ServeError(f"body of {length} bytes arrives slower than {limits.min_body_rate} bytes/s "
                         f"(limits.min_body_rate over {limits.header_timeout_s:g} s)", status=408) from None
    except asyncio.LimitOverrunError:
        raise ServeError(f"request head exceeds {limits.max_header_bytes} bytes", status=431) from None
    except (asyncio.IncompleteReadError, ConnectionError):
        raise ClientGone() from None
    req.read_at = clock()
    return req


async def _read_body(reader, length: int, limits: LimitsConfig, deadline, loop) -> bytes | bytearray:
    """The body as it arrives (never a buffer sized from the header alone);
    each header_timeout_s window must bring min_body_rate's share of it."""
    quota = limits.min_body_rate * limits.header_timeout_s
    deadline.reschedule(loop.time() + limits.header_timeout_s)
    first = await reader.read(length)
    if not first:
        raise ClientGone()
    if len(first) == length:
        return first
    # Appended chunk by chunk: a large bytearray grows by mremap, so no step
    # copies more than a chunk (joining 60 MiB at the end held the loop 50-100 ms).
    body = bytearray(first)
    window_start = 0
    while len(body) < length:
        chunk = await reader.read(min(length - len(body), 1 << 20))
        if not chunk:
            raise ClientGone()
        body += chunk
        if len(body) - window_start >= quota:
            window_start = len(body)
            deadline.reschedule(loop.time() + limits.header_timeout_s)
    return body


def parse_head(head: bytes, limits: LimitsConfig, client: str) -> Request:
    # Bare CR, LF or NUL: a proxy that splits lines differently would see
    # other headers than we do (request smuggling), so refuse them outright.
    crlf = head.count(b"\r\n")
    if head.count(b"\n") != crlf or head.count(b"\r") != crlf or b"\0" in head:
        raise ServeError("bare CR, LF or NUL in the request head")
    lines = head[:-4].split(b"\r\n")
    m = _REQUEST_LINE.match(lines[0])
    if not m:
        raise ServeError("malformed request line")
    method, target, major, minor = m.group(1).decode(), m.group(2).decode("latin-1"), int(m.group(3)), int(m.group(4))
    if major != 1:
        raise ServeError(f"HTTP/{major}.{minor} not supported; use HTTP/1.1", status=505)
    if len(lines) - 1 > limits.max_headers:
        raise ServeError(f"{len(lines) - 1} header fields exceed the limit of {limits.max_headers}", status=431)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.match(name):
            raise ServeError(f"malformed header line {line[:64]!r}")
        key = name.decode().lower()
        val = value.strip(b" \t").decode("latin-1")
        if key in headers:
            if key in ("content-length", "host", "transfer-encoding"):
                raise ServeError(f"repeated {key} header")
            headers[key] = headers[key] + ", " + val
        else:
            headers[key] = val
    if not target.startswith("/"):
        raise ServeError(f"request target {target[:64]!r} must be an absolute path")
    path, _, query = target.partition("?")
    conn = headers.get("connection", "").lower()
    keep_alive = "close" not in conn if minor >= 1 else "keep-alive" in conn
    return Request(method, target, path, parse_qs(query), headers, keep_alive=keep_alive, client=client,
                   http_minor=minor)


def parse_length(value: str) -> int | None:
    """A decimal length of ASCII digits, or None: str.isdigit() also accepts
    '²' and other Unicode digits that int() refuses or reads differently."""
    return int(value) if _LENGTH.fullmatch(value) else None


def _content_length(req: Request) -> int:
    if "transfer-encoding" in req.headers:
        raise ServeError("Transfer-Encoding is not supported; send Content-Length", status=501)
    value = req.headers.get("content-length")
    if value is None:
        if req.method in ("POST", "PUT"):
            raise ServeError(f"{req.method} needs a Content-Length header", status=411)
        return 0
    length = parse_length(value)
    if length is None:
        raise ServeError(f"invalid Content-Length {value[:32]!r}: expected 1-18 ASCII digits")
    return length


_REASONS = {s.value: s.phrase for s in HTTPStatus}


def render_response(status: int, body: bytes, *, content_type: str = "application/json", headers=(),
                    keep_alive: bool = True, http_minor: int = 1) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}",
             f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
    lines.extend(f"{k}: {v}" for k, v in headers)
    if not keep_alive:
        lines.append("Connection: close")
    elif http_minor == 0:
        lines.append("Connection: keep-alive")  # HTTP/1.0 closes after the response unless told
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def set_nodelay(sock) -> None:
    """Disable Nagle on an accepted socket. asyncio and uvloop do it already
    (checked for Python 3.11 / uvloop 0.23); stated here so that a response
    written in two pieces can never sit waiting for the client's delayed ACK
    (40 ms on Linux) under another event loop."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass  # the peer may already be gone; the read that follows will say so
