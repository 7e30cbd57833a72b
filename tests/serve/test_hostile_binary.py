"""The binary TCP protocol under hostile clients (issue #16): metric labels
only for configured models, the token checked before a payload is read,
buffers that grow as bytes arrive, backpressure and a write timeout for
clients that do not read, malformed tensor descriptors answered, request
id 0 refused, and a whole frame judged by its progress, not one deadline."""

from __future__ import annotations

import json
import signal
import socket
import struct
import time
import uuid

import numpy as np
import pytest

from engine.client import Client
from engine import wire
from hostile_support import (unlimited_failures, Auth, infer_frame, log_events, metrics, raw_infer_frame, read_frame, read_until_close,
                             requests_total, rss_bytes, wait_for)
from kernel_mlp import write_mlp

MIB = 1 << 20
LIMITS = {"header_timeout_s": 0.5, "idle_timeout_s": 5.0, "drain_timeout_s": 10.0, "min_body_rate": 64 << 10}


@pytest.fixture(scope="module")
def server(module_serve_factory, zoo_mlp):
    return module_serve_factory([{"name": "mlp", "path": str(zoo_mlp.path), "max_batch_size": 8}], limits=LIMITS)


def error_of(s: socket.socket) -> tuple[int, int, str]:
    op, payload = read_frame(s)
    assert op == wire.OP_ERROR, op
    return wire.decode_error(payload)


def connect(server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.binary_port), timeout=10)


# ---- 1 + 3: names become labels only if configured; the token before the payload -----
@pytest.fixture(scope="module")
def auth_server(module_serve_factory, zoo_mlp, tmp_path_factory):
    auth = Auth(tmp_path_factory.mktemp("auth"))
    server = module_serve_factory([{"name": "mlp", "path": str(zoo_mlp.path)}], auth=unlimited_failures(auth.config()), limits=LIMITS)
    server.auth = auth
    return server


def test_unknown_model_names_do_not_grow_metrics(auth_server):
    names = [f"m{uuid.uuid4().hex}" for _ in range(300)]
    with connect(auth_server) as s:
        s.sendall(b"".join(infer_frame(i + 1, name) for i, name in enumerate(names)))  # no token
        for i in range(len(names)):
            rid, status, message = error_of(s)
            assert (rid, status) == (i + 1, 401), message
    token = auth_server.auth.token()
    for name in names[:20]:  # authenticated, over HTTP: 404, still no label
        status, _, _ = auth_server.post(f"/v2/models/{name}/infer", b"{}", {"Authorization": f"Bearer {token}"})
        assert status == 404
    text = auth_server.get("/metrics")[1].decode()
    assert not any(name in text for name in names)
    assert requests_total(auth_server, "_unknown", "binary", 401) >= len(names)
    assert requests_total(auth_server, "_unknown", "http", 404) >= 20
    assert len(text) < 64 << 10


def test_payload_is_not_read_before_the_token_is_checked(auth_server):
    rss0 = rss_bytes(auth_server.proc.pid)
    x = np.zeros((8, 784), np.float32)
    frame = infer_frame(7, "mlp", {"input": np.concatenate([x] * 1000)})   # 25 MB, no token
    with connect(auth_server) as s:
        s.sendall(frame[:64 << 10])      # header, names and the start of the tensors only
        rid, status, message = error_of(s)   # answered before the rest is sent
        assert (rid, status) == (7, 401), message
        s.sendall(frame[64 << 10:])      # the rest is read and dropped, not buffered
        with Client("127.0.0.1", auth_server.binary_port, token=auth_server.auth.token()) as c:
            assert c.infer("mlp", {"input": x[:1]})["logits"].shape == (1, 10)
        # Same connection, next frame: it is still in step.
        s.sendall(infer_frame(8, "mlp", token=auth_server.auth.token()))
        op, payload = read_frame(s)
        assert op == wire.OP_RESULT and wire.decode_result(payload)[0] == 8
    assert rss_bytes(auth_server.proc.pid) - rss0 < 16 * MIB


def test_header_announcing_a_payload_allocates_nothing(serve_factory, zoo_mlp):
    server = serve_factory([{"name": "mlp", "path": str(zoo_mlp.path)}],
                           limits={**LIMITS, "header_timeout_s": 10.0, "max_body": 64 * MIB,
                                   "min_body_rate": 1})
    rss0 = rss_bytes(server.proc.pid)
    head = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.OP_INFER, 0, 64 * MIB, 0)
    fixed = wire.INFER_FIXED.pack(1, 0, 0, 3, 0, 0, 0, 1) + b"mlp"
    socks = []
    try:
        for _ in range(32):
            s = connect(server)
            s.sendall(head + fixed + b"\0" * 1000)
            socks.append(s)
        # Observable: the server has read what they sent (the frame prefix completes only once read).
        wait_for(lambda: rss_bytes(server.proc.pid) > 0 and server.get("/v2/health/live")[0] == 200, "health", 5)
        grown = rss_bytes(server.proc.pid) - rss0
    finally:
        for s in socks:
            s.close()
    # Before: 32 x 64 MiB allocated from the length field (2.16 GB in the run).
    assert grown < 16 * MIB, grown


# ---- 2 + 7: clients that do not read their answers ------------------------------
@pytest.fixture
def wide(mlp_file):
    path = mlp_file.with_name("wide.npz")
    write_mlp(path, [16, 65536], seed=3)    # 256 KiB of output per request
    return path


def test_backpressure_bounds_a_client_that_does_not_read(serve_factory, wide):
    server = serve_factory([{"name": "wide", "path": str(wide), "max_batch_size": 1, "max_queue_size": 4096}],
                           limits={**LIMITS, "max_unsent_bytes": MIB, "write_timeout_s": 60.0})
    x = {"x": np.full((1, 16), 0.1, np.float32)}
    n = 1000
    with Client("127.0.0.1", server.binary_port) as warm:
        expected = warm.infer("wide", x)["y"]
    rss0 = rss_bytes(server.proc.pid)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    s.settimeout(30)
    s.connect(("127.0.0.1", server.binary_port))
    try:
        s.sendall(b"".join(infer_frame(i + 1, "wide", x) for i in range(n)))   # ~250 KB; answers: 256 MB
        # Watch the server while the client does not read: either it stops
        # (backpressure) or it runs every request and holds their answers.
        peak, t_end = 0, time.monotonic() + 4.0
        while time.monotonic() < t_end:
            peak = max(peak, rss_bytes(server.proc.pid) - rss0)
            done = json.loads(server.get("/v2/models/wide/stats")[1])["model_stats"][0]["inference_count"]
            if done > n // 2:
                break
            time.sleep(0.05)  # sampling period of the measurement
        assert done < 200, f"{done} requests run for a client that reads nothing"
        assert peak < 96 * MIB, peak
        # Now it reads: every request is answered, in order of completion.
        got = {}
        while len(got) < n:
            op, payload = read_frame(s)
            assert op == wire.OP_RESULT
            rid, out = wire.decode_result(payload)
            got[rid] = out["y"]
        assert sorted(got) == list(range(1, n + 1))
        np.testing.assert_allclose(got[n], expected, rtol=1e-6)
    finally:
        s.close()


def test_binary_client_that_stops_reading_is_cut_off(serve_factory, wide):
    server = serve_factory([{"name": "wide", "path": str(wide), "max_batch_size": 1}],
                           limits={**LIMITS, "max_unsent_bytes": 256 << 10, "write_timeout_s": 1.0,
                                   "drain_timeout_s": 20.0})
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", server.binary_port))
    try:
        s.sendall(b"".join(infer_frame(i + 1, "wide", {"x": np.ones((1, 16), np.float32)}) for i in range(64)))
        lines = wait_for(lambda: log_events(server, "write_timeout"), "a write_timeout log line", 15)
        assert lines[0]["protocol"] == "binary"
    finally:
        s.close()
    t0 = time.monotonic()
    server.signal(signal.SIGTERM)
    assert server.proc.wait(15) == 0 and time.monotonic() - t0 < 10


# ---- 8 + 14: malformed descriptors, request id 0, counting -------------------------
def _desc(name: bytes, code: int, dims) -> bytes:
    return wire.TENSOR_DESC.pack(len(name), code, len(dims)) + name + struct.pack(f"<{len(dims)}Q", *dims)


F32 = wire.DTYPE_CODES[np.dtype(np.float32)]


@pytest.mark.parametrize("frame, words", [
    (raw_infer_frame(5, "mlp", _desc(b"input", F32, [1] * 65), b"\0" * 64), "at most 64"),
    (raw_infer_frame(5, "mlp", _desc(b"input", F32, [1 << 32, 1 << 32])), "payload ends first"),
    (raw_infer_frame(5, "mlp", _desc(b"input", F32, [1 << 62, 4])), "payload ends first"),
    (raw_infer_frame(5, "mlp", _desc(b"input", F32, [(1 << 64) - 1, 0])), "Maximum allowed dimension"),
    (raw_infer_frame(0, "mlp", _desc(b"input", F32, [1, 784]), b"\0" * 3136), "request id 0"),
], ids=["65-dims", "dims-wrap-2^64", "bytes-wrap-2^64", "empty-huge-dim", "request-id-0"])
def test_malformed_frames_are_answered_and_counted_once(server, frame, words):
    errors_before = metrics(server).get(("aie_protocol_errors_total", (("protocol", "binary"),)), 0)
    ok_before = requests_total(server, "mlp", "binary", 200)
    with connect(server) as s:
        s.sendall(frame)
        rid, status, message = error_of(s)
        assert (rid, status) == (0, 400) and words in message, message
        _, closed = read_until_close(s, 5)
        assert closed
    after = metrics(server)
    assert after.get(("aie_protocol_errors_total", (("protocol", "binary"),)), 0) == errors_before + 1
    assert requests_total(server, "mlp", "binary", 200) == ok_before
    assert "Traceback" not in server.log_path.read_text()


def test_a_frame_may_take_longer_than_the_header_timeout_if_it_progresses(server):
    frame = infer_frame(3, "mlp", {"input": np.ones((300, 784), np.float32)})   # 940 KB: batch too large -> 400
    with connect(server) as s:
        pieces = [frame[i:i + len(frame) // 10 + 1] for i in range(0, len(frame), len(frame) // 10 + 1)]
        for piece in pieces:        # ~1.5 s in all at ~600 KB/s: above min_body_rate, past header_timeout_s
            s.sendall(piece)
            time.sleep(0.15)  # the client's pace, not synchronisation
        rid, status, message = error_of(s)
        assert rid == 3 and status == 400, message


def test_a_stalled_frame_is_cut_by_its_progress(server):
    frame = infer_frame(4, "mlp", {"input": np.ones((8, 784), np.float32)})
    with connect(server) as s:
        t0 = time.monotonic()
        s.sendall(frame[:200])
        rid, status, message = error_of(s)
        assert (rid, status) == (0, 408) and "min_body_rate" in message
        assert time.monotonic() - t0 < 3


def test_requests_sent_before_a_half_close_are_answered(server):
    with connect(server) as s:
        s.sendall(infer_frame(11) + infer_frame(12))
        s.shutdown(socket.SHUT_WR)
        answers = {}
        for _ in range(2):
            op, payload = read_frame(s)
            assert op == wire.OP_RESULT
            rid, out = wire.decode_result(payload)
            answers[rid] = out["logits"].shape
        assert answers == {11: (1, 10), 12: (1, 10)}
        _, closed = read_until_close(s, 5)
        assert closed


def test_payloads_over_the_buffer_budget_get_503_and_the_connection_goes_on(serve_factory, zoo_mlp):
    server = serve_factory([{"name": "mlp", "path": str(zoo_mlp.path)}],
                           limits={**LIMITS, "header_timeout_s": 5.0, "max_body": 8 * MIB,
                                   "max_buffered_bytes": 8 * MIB})
    big = infer_frame(1, "mlp", {"input": np.zeros((2600, 784), np.float32)})       # 8.15 MB
    frame = infer_frame(2, "mlp", {"input": np.zeros((100, 784), np.float32)})      # 313 KB
    with connect(server) as holder, connect(server) as s:
        def send_frame(want_503: bool):
            s.sendall(frame)
            rid, status, message = error_of(s)
            return (status == 503) == want_503 and (rid, status, message)

        holder.sendall(big[:7 << 20])   # its buffer has grown to the whole frame: the budget is spent
        rid, status, message = wait_for(lambda: send_frame(True), "a 503 while the budget is held", 10)
        assert (rid, status) == (2, 503) and "max_buffered_bytes" in message
        s.sendall(infer_frame(3))       # small frames need no budget; the stream is still in step
        op, payload = read_frame(s)
        assert op == wire.OP_RESULT and wire.decode_result(payload)[0] == 3
        holder.close()
        # Its bytes return when the server sees it gone; then the frame is read and answered
        # (a batch of 100 exceeds max_batch_size: 400).
        rid, status, message = wait_for(lambda: send_frame(False), "the holder's budget returned", 10)
        assert (rid, status) == (2, 400), message
