"""Bad input over HTTP (raw sockets, curl-level) and the binary TCP protocol."""

from __future__ import annotations

import json
import socket
import struct
import time
import zlib

import numpy as np
import pytest

from engine.client import Client, ServerError
from engine import wire
from hostile_support import http_exchange, keep_alive_exchanges

LIMITS = {"max_body": 64 << 10, "max_header_bytes": 2048, "max_headers": 20, "header_timeout_s": 0.5,
          "idle_timeout_s": 1.0, "drain_timeout_s": 5.0}


@pytest.fixture(scope="module")
def server(module_serve_factory, zoo_mlp):
    return module_serve_factory([{"name": "mlp", "path": str(zoo_mlp.path), "max_batch_size": 8}], limits=LIMITS)


def exchange(server, data: bytes, wait: float = 3.0) -> tuple[bytes, bool]:
    """Send raw bytes; return everything the server sent and whether it closed."""
    return http_exchange(server.http_port, data, wait)


def status_of(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1])


@pytest.mark.parametrize("request_bytes, status", [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET /v2 HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    (b"GET /v2 HTTP/1.1\r\nbad header line\r\n\r\n", 400),
    (b"GET /v2 HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(30)) + b"\r\n", 431),
    (b"GET /v2 HTTP/1.1\r\nX-Big: " + b"a" * 4096 + b"\r\n\r\n", 431),
    (b"POST /v2/models/mlp/infer HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n", 413),
    (b"POST /v2/models/mlp/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
    (b"POST /v2/models/mlp/infer HTTP/1.1\r\n\r\n", 411),
    (b"POST /v2/models/mlp/infer HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400),
    (b"GET /v2 HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
], ids=["request-line", "version", "header-line", "header-count", "header-size", "body-size", "chunked",
        "no-length", "bad-length", "two-lengths"])
def test_malformed_http_gets_status_and_close(server, request_bytes, status):
    raw, closed = exchange(server, request_bytes)
    assert status_of(raw) == status, raw[:200]
    assert closed
    assert json.loads(raw.split(b"\r\n\r\n", 1)[1])["error"]
    assert server.get("/v2/health/live")[0] == 200  # and the server lives on


@pytest.mark.parametrize("body, expected", [
    (b"{not json", "malformed"),
    (b'{"inputs": 3}', '"inputs" list'),
    (b'{"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32", "data": [1, 2]}]}', "2 values for shape"),
    (b'{"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32", "data": ["a"]}]}', "FP32 values"),
    (b'{"inputs": [{"name": "input", "shape": [1, -784], "datatype": "FP32", "data": []}]}', "non-negative"),
    (b'{"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32"}]}', "neither"),
    (b'{"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32", "parameters": {"binary_data_size": 3136}}]}',
     "body ends before"),
    (b'{"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32", "parameters": {"binary_data_size": 3132}}]}',
     "needs 3136 bytes"),
    (b'{"inputs": [], "parameters": {"priority": "high"}}', "'priority' must be an integer"),
    (b'{"inputs": []}', "missing input 'input'; model 'mlp' expects: input FP32[-1, 784]"),
], ids=["json", "inputs", "count", "type", "shape", "nodata", "binend", "binsize", "priority", "empty"])
def test_bad_infer_bodies_are_400_and_keep_alive(server, body, expected):
    status, resp, _ = server.post("/v2/models/mlp/infer", body)
    assert status == 400 and expected in json.loads(resp)["error"], resp


def test_nonfinite_floats_accepted_where_the_model_takes_floats(server, zoo_mlp):
    body = b'{"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32", "data": [NaN, Infinity' + \
        b", 1" * 782 + b"]}]}"
    status, resp, _ = server.post("/v2/models/mlp/infer", body)
    assert status == 200
    x = np.array([[np.nan, np.inf] + [1] * 782], np.float32)
    y = np.array(json.loads(resp)["outputs"][0]["data"], np.float32)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(zoo_mlp.session().run(None, {"input": x})[0][0]))


def test_keep_alive_serves_many_requests_on_one_connection(server):
    answers = keep_alive_exchanges(server.http_port, b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n", 20)
    assert all(data.startswith(b"HTTP/1.1 200") for data in answers), answers


def test_slowloris_and_idle_clients_are_cut(server):
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=5) as s:
        s.sendall(b"GET /v2 HTTP/1.1\r\n")
        for _ in range(20):  # trickle a header byte every 100 ms: never finishes (the slow client is the subject)
            try:
                s.sendall(b"X")
            except OSError:
                break
            time.sleep(0.1)
        data = s.recv(4096)
    assert data.startswith(b"HTTP/1.1 408") and time.monotonic() - t0 < 2.5
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=5) as s:
        t0 = time.monotonic()
        assert s.recv(10) == b""  # idle: closed without a word after idle_timeout_s
        assert 0.8 < time.monotonic() - t0 < 3


# ---- binary TCP protocol ------------------------------------------------------
def test_binary_client_infer_matches_session(server, zoo_mlp):
    session = zoo_mlp.session()
    rng = np.random.default_rng(21)
    with Client("127.0.0.1", server.binary_port) as client:
        for batch in (1, 5, 8):
            x = zoo_mlp.inputs(rng, batch)
            out = client.infer("mlp", {"input": x})
            np.testing.assert_allclose(out["logits"], session.run(None, {"input": x})[0], rtol=1e-5, atol=1e-5)
        # Request errors are frames; the connection stays usable.
        with pytest.raises(ServerError) as err:
            client.infer("mlp", {"input": rng.standard_normal((1, 15)).astype(np.float32)})
        assert err.value.status == 400 and "expects [-1, 784]" in err.value.message
        with pytest.raises(ServerError) as err:
            client.infer("nope", {"input": x})
        assert err.value.status == 404
        x = zoo_mlp.inputs(rng, 2)
        np.testing.assert_allclose(client.infer("mlp", {"input": x})["logits"], session.run(None, {"input": x})[0],
                                   rtol=1e-5, atol=1e-5)


def _raw_frame_exchange(server, data: bytes) -> tuple[int, int, str, bool]:
    with socket.create_connection(("127.0.0.1", server.binary_port), timeout=5) as s:
        s.sendall(data)
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    op, length, crc = wire.parse_header(buf[:16], 1 << 30)
    payload = memoryview(buf[16:16 + length])
    assert zlib.crc32(payload) == crc
    rid, status, message = wire.decode_error(payload)
    return op, rid, status, message


def test_binary_malformed_frames_get_error_frame_and_close(server):
    good = b"".join(wire.encode_infer(1, "mlp", {"input": np.ones((1, 784), np.float32)}))
    bad_magic = b"XXXX" + good[4:]
    bad_crc = good[:12] + struct.pack("<I", (struct.unpack_from("<I", good, 12)[0] + 1) & 0xFFFFFFFF) + good[16:]
    oversize = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.OP_INFER, 0, (64 << 10) + 1, 0)
    truncated_desc = b"".join(wire.frame(wire.OP_INFER, [good[16:16 + 30]]))
    for data, status, words in [(bad_magic, 400, "magic"), (bad_crc, 400, "checksum"),
                                (oversize, 413, "exceeds"), (truncated_desc, 400, "descriptor")]:
        op, rid, got, message = _raw_frame_exchange(server, data)
        assert (op, rid, got) == (wire.OP_ERROR, 0, status) and words in message, message
    # The server is unharmed.
    with Client("127.0.0.1", server.binary_port) as client:
        assert client.infer("mlp", {"input": np.ones((1, 784), np.float32)})["logits"].shape == (1, 10)


def test_binary_client_pipelines_requests_on_one_connection(server, zoo_mlp):
    session = zoo_mlp.session()
    rng = np.random.default_rng(33)
    xs = [zoo_mlp.inputs(rng, int(b)) for b in rng.integers(1, 4, size=40)]
    before = json.loads(server.get("/v2/models/mlp/stats")[1])["model_stats"][0]
    with Client("127.0.0.1", server.binary_port) as client:
        outs = client.infer_many("mlp", [{"input": x} for x in xs], window=16)
        assert client.in_flight == 0
        for x, out in zip(xs, outs):
            np.testing.assert_allclose(out["logits"], session.run(None, {"input": x})[0], rtol=1e-5, atol=1e-5)
        after = json.loads(server.get("/v2/models/mlp/stats")[1])["model_stats"][0]
        runs = after["execution_count"] - before["execution_count"]
        assert after["inference_count"] - before["inference_count"] == sum(len(x) for x in xs)
        assert runs <= len(xs) // 2, runs  # in flight together, so they shared batches
        # A refused request in the middle is answered by its own id; the rest succeed.
        bad = rng.standard_normal((1, 15)).astype(np.float32)
        mixed = [{"input": xs[0]}, {"input": bad}, {"input": xs[1]}]
        got = client.infer_many("mlp", mixed, return_errors=True)
        assert isinstance(got[1], ServerError) and got[1].status == 400 and "expects [-1, 784]" in got[1].message
        np.testing.assert_allclose(got[2]["logits"], session.run(None, {"input": xs[1]})[0], rtol=1e-5, atol=1e-5)
        with pytest.raises(ServerError) as err:
            client.infer_many("mlp", mixed)
        assert err.value.status == 400
        # send/receive by hand, with a blocking infer() in between that keeps the others' answers.
        ids = {client.send("mlp", {"input": x}): i for i, x in enumerate(xs[:3])}
        np.testing.assert_allclose(client.infer("mlp", {"input": xs[3]})["logits"],
                                   session.run(None, {"input": xs[3]})[0], rtol=1e-5, atol=1e-5)
        for _ in range(3):
            rid, out = client.receive()
            i = ids.pop(rid)
            np.testing.assert_allclose(out["logits"], session.run(None, {"input": xs[i]})[0], rtol=1e-5, atol=1e-5)
        assert not ids and client.in_flight == 0
