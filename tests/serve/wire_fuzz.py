"""Hypothesis strategies over what a client can put on the wire (an HTTP
request head and body, a KServe JSON document, a binary frame) and the
checks that every answer is well formed: an HTTP response with a 2xx/4xx
status (501/505 are the protocol's own answers to a client's framing) and a
JSON error, or a RESULT/ERROR frame; never a 500, a crash or silence after a
complete request. Used by tests/serve/test_hostile_fuzz.py (bounded example
counts) and benchmarks/fuzz_serve.py (a longer run)."""

from __future__ import annotations

import json
import socket
import struct
import zlib
from dataclasses import dataclass

from hypothesis import strategies as st

from engine import wire

ALLOWED_5XX = {501, 505}   # Transfer-Encoding unsupported, HTTP version unsupported


@dataclass(frozen=True)
class Target:
    model: str
    input: str
    width: int       # the model's input is [batch, width] FP32


# ---- HTTP head + body ------------------------------------------------------------
_PATHS = ["/v2", "/v2/health/live", "/v2/health/ready", "/health", "/metrics", "/v2/models/stats",
          "/v2/repository/index", "/v2/models/{m}", "/v2/models/{m}/ready", "/v2/models/{m}/infer",
          "/v2/models/{m}/versions/1/infer", "/v2/models/{m}/config", "/v2/models/{m}/stats",
          "/v2/models/{m}%2Finfer", "/%6detrics", "/v2/models/../metrics", "*", "http://x/v2"]
_LENGTHS = ["0", "5", "-1", "+5", " 5", "5 ", "05", "\u00b2", "\u0663", "1e3", "0x10", "99999999999999999999",
            "5, 5", ""]
_SEPARATORS = [b"\r\n"] * 8 + [b"\n", b"\r", b"\r\r\n", b"\n\r"]


def http_requests(target: Target):
    """(raw request bytes, whether it is complete: its head ends and its body is all there)."""
    header_value = st.one_of(st.text(max_size=40).map(lambda t: t.encode("utf-8")),
                             st.binary(max_size=40), st.sampled_from([b"close", b"keep-alive", b"100-continue",
                                                                      b"chunked", b"x"]))
    header_name = st.one_of(st.sampled_from([b"Host", b"Connection", b"Expect", b"Transfer-Encoding",
                                             b"Content-Type", b"Authorization", b"Inference-Header-Content-Length",
                                             b"X-A"]),
                            st.binary(min_size=0, max_size=12))

    @st.composite
    def build(draw):
        method = draw(st.one_of(st.sampled_from([b"GET", b"POST", b"HEAD", b"PUT", b"DELETE", b"OPTIONS"]),
                                st.binary(max_size=10)))
        path = draw(st.one_of(st.sampled_from(_PATHS).map(lambda p: p.format(m=target.model).encode()),
                              st.binary(max_size=30)))
        version = draw(st.sampled_from([b"HTTP/1.1"] * 6 + [b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.9", b"HTTP/1",
                                                            b"http/1.1", b""]))
        sep = draw(st.sampled_from(_SEPARATORS))
        headers = []
        if draw(st.integers(0, 9)):
            headers.append((b"Host", b"x"))
        headers += draw(st.lists(st.tuples(header_name, header_value), max_size=5))
        body = draw(st.one_of(st.just(b""), st.binary(max_size=200), kserve_bodies(target).map(json.dumps)
                              .map(str.encode)))
        length = draw(st.one_of(st.just(str(len(body))), st.sampled_from(_LENGTHS), st.none()))
        if length is not None:
            headers.insert(draw(st.integers(0, len(headers))), (b"Content-Length", length.encode("utf-8")))
        head = b" ".join([method, path, version]) + sep + b"".join(n + b": " + v + sep for n, v in headers) + sep
        digits = length.strip(" \t") if length is not None else ""
        complete = b"\r\n\r\n" in head and (not digits.isascii() or not digits.isdigit() or len(digits) > 18
                                            or int(digits) <= len(body))
        return head + body, complete
    return build()


def parse_responses(raw: bytes) -> list[tuple[int, dict, bytes]]:
    """Every response in `raw`; AssertionError on anything malformed."""
    out = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep, f"response head not terminated: {raw[:200]!r}"
        lines = head.split(b"\r\n")
        version, status, _reason = lines[0].split(b" ", 2)
        assert version == b"HTTP/1.1" and status.isdigit(), lines[0]
        headers = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b": ")
            assert colon, line
            headers[name.decode().lower()] = value.decode("latin-1")
        length = int(headers["content-length"])
        body, raw = rest[:length], rest[length:]
        assert len(body) == length, "response body cut short"
        out.append((int(status), headers, body))
    return out


def check_status(status: int, headers: dict, body: bytes, method: bytes = b"GET") -> None:
    assert status < 500 or status in ALLOWED_5XX, (status, body[:300])
    if status == 100:
        return
    if status >= 400 and body and method != b"HEAD":
        assert isinstance(json.loads(body)["error"], str)


def exchange(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send, half-close, read until the server closes (bounded)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass   # the server answered and closed before taking it all
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def check_http(port: int, request: tuple[bytes, bool]) -> list[int]:
    data, complete = request
    raw = exchange(port, data)
    raw = raw.split(b"HTTP/1.1 100 Continue\r\n\r\n", 1)[-1]
    responses = parse_responses(raw)
    if complete:
        assert responses, f"no answer to a complete request {data[:200]!r}"
    for status, headers, body in responses:
        check_status(status, headers, body, data.split(b" ", 1)[0])
    return [r[0] for r in responses]


# ---- KServe JSON documents --------------------------------------------------------
_JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=False),
                       st.text(max_size=8))
_ANY_JSON = st.recursive(_JSON_LEAF, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                              st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                         max_leaves=20)


def kserve_bodies(target: Target):
    dims = st.one_of(st.integers(0, 4), st.integers(-3, 2 ** 65), st.booleans(), st.text(max_size=3))
    shape = st.one_of(st.lists(dims, max_size=5), st.lists(st.integers(1, 1), min_size=60, max_size=70),
                      st.just([1, target.width]), st.just([2, target.width]), _ANY_JSON)

    @st.composite
    def data(draw):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            n = draw(st.sampled_from([target.width, 2 * target.width, 3]))
            return draw(st.lists(st.floats(-1e3, 1e3), min_size=n, max_size=n))
        if kind == 1:   # nested, maybe ragged
            return [draw(st.lists(st.floats(-10, 10), min_size=0, max_size=target.width + 1)) for _ in range(2)]
        if kind == 2:
            return draw(st.recursive(st.floats(-1, 1), lambda i: st.lists(i, max_size=3), max_leaves=30))
        return draw(_ANY_JSON)

    item = st.fixed_dictionaries({}, optional={
        "name": st.one_of(st.just(target.input), st.text(max_size=5), _JSON_LEAF),
        "datatype": st.one_of(st.sampled_from(["FP32", "FP64", "INT32", "BOOL", "UINT8", "BYTES", "fp32"]),
                              _ANY_JSON),
        "shape": shape, "data": data(),
        "parameters": st.one_of(_ANY_JSON, st.fixed_dictionaries({"binary_data_size": _JSON_LEAF}))})
    output = st.one_of(st.fixed_dictionaries({"name": st.one_of(st.just("y"), st.just("logits"), _JSON_LEAF)},
                                             optional={"parameters": _ANY_JSON}), _JSON_LEAF)
    params = st.one_of(_ANY_JSON, st.fixed_dictionaries({}, optional={
        "priority": _JSON_LEAF, "timeout": st.one_of(_JSON_LEAF, st.just(10 ** 400)),
        "binary_data_output": _JSON_LEAF}))
    return st.one_of(
        st.fixed_dictionaries({"inputs": st.lists(item, max_size=3)},
                              optional={"outputs": st.one_of(st.lists(output, max_size=3), _JSON_LEAF),
                                        "parameters": params, "id": _JSON_LEAF}),
        _ANY_JSON)


def check_kserve(port: int, model: str, body: bytes, header_length: str | None = None) -> int:
    head = [f"POST /v2/models/{model}/infer HTTP/1.1", "Host: x", f"Content-Length: {len(body)}",
            "Connection: close"]
    if header_length is not None:
        head.append(f"Inference-Header-Content-Length: {header_length}")
    raw = exchange(port, ("\r\n".join(head) + "\r\n\r\n").encode() + body)
    (status, headers, resp), = parse_responses(raw)
    check_status(status, headers, resp)
    assert status in (200, 400, 404, 413), (status, resp[:300])
    return status


# ---- binary frames ------------------------------------------------------------------
def binary_frames(target: Target):
    """(frame bytes, whether it is complete)."""
    u64 = st.one_of(st.integers(0, 4), st.just(target.width), st.integers(0, 2 ** 64 - 1),
                    st.sampled_from([2 ** 32, 2 ** 62, 2 ** 63, 2 ** 64 - 1]))

    @st.composite
    def descriptor(draw):
        name = draw(st.one_of(st.just(target.input.encode()), st.binary(max_size=6)))
        ndim = draw(st.one_of(st.integers(0, 3), st.integers(60, 70), st.integers(0, 255)))
        dims = draw(st.lists(u64, min_size=min(ndim, 4), max_size=min(ndim, 4)))
        dims += [1] * (ndim - len(dims))
        code = draw(st.one_of(st.sampled_from(sorted(wire.CODE_DTYPES)), st.integers(0, 255)))
        return wire.TENSOR_DESC.pack(len(name) & 0xFFFF, code, ndim) + name + struct.pack(f"<{ndim}Q", *dims)

    @st.composite
    def build(draw):
        rid = draw(st.one_of(st.integers(1, 100), st.just(0), st.integers(0, 2 ** 64 - 1)))
        model = draw(st.one_of(st.just(target.model.encode()), st.binary(max_size=10)))
        token = draw(st.one_of(st.just(b""), st.binary(max_size=20)))
        descs = draw(st.lists(descriptor(), max_size=3))
        fixed = wire.INFER_FIXED.pack(rid, draw(st.integers(0, 255)), 0, len(model), 0, len(token),
                                 draw(st.integers(0, 2 ** 32 - 1)), draw(st.integers(0, 4)) if draw(st.booleans())
                                 else len(descs))
        head = fixed + model + token + b"".join(descs)
        pad = b"\0" * (-len(head) % wire.ALIGN)
        tail = draw(st.one_of(st.just(b"\0" * 4 * target.width), st.binary(max_size=300)))
        payload = head + pad + tail
        if draw(st.integers(0, 9)) == 0:   # a mutated byte, checksum kept or not
            at = draw(st.integers(0, len(payload) - 1))
            payload = payload[:at] + bytes([draw(st.integers(0, 255))]) + payload[at + 1:]
        crc = zlib.crc32(payload) if draw(st.integers(0, 9)) else draw(st.integers(0, 2 ** 32 - 1))
        header = dict(magic=wire.MAGIC, version=wire.VERSION, op=wire.OP_INFER, length=len(payload))
        mutate = draw(st.integers(0, 19))
        if mutate == 0:
            header["magic"] = draw(st.integers(0, 2 ** 32 - 1))
        elif mutate == 1:
            header["version"] = draw(st.integers(0, 255))
        elif mutate == 2:
            header["op"] = draw(st.integers(0, 255))
        elif mutate == 3:
            header["length"] = draw(st.integers(0, 2 ** 32 - 1))
        frame = wire.HEADER.pack(header["magic"], header["version"], header["op"], 0, header["length"], crc) + payload
        return frame, header["length"] <= len(payload)
    return build()


def check_binary(port: int, frame: tuple[bytes, bool]) -> list[tuple[int, int]]:
    data, complete = frame
    raw = exchange(port, data)
    answers = []
    while raw:
        op, length, crc = wire.parse_header(raw[:16], 1 << 30)
        payload = memoryview(raw[16:16 + length])
        assert len(payload) == length and zlib.crc32(payload) == crc, "answer frame cut short or corrupt"
        raw = raw[16 + length:]
        if op == wire.OP_ERROR:
            rid, status, message = wire.decode_error(payload)
            assert status < 500 or status in ALLOWED_5XX, (status, message)
            assert message
            answers.append((rid, status))
            if rid == 0:
                assert not raw, "frames after a connection error"
        else:
            assert op == wire.OP_RESULT, op
            rid, _ = wire.decode_result(payload)
            answers.append((rid, 200))
    if complete:
        assert answers, f"no answer to a complete frame {data[:120]!r}"
    return answers
