"""Property-based fuzzing of a live server (issue #16): random and mutated
HTTP request heads, KServe JSON documents and binary frames; every answer is
a well-formed 2xx/4xx response or frame (tests/serve/wire_fuzz.py), and the
server is healthy afterwards, with nothing crashed in its log. Example counts
are bounded so the file runs in well under a minute; benchmarks/fuzz_serve.py
runs the same properties for longer."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

from hostile_support import log_events
from wire_fuzz import Target, binary_frames, check_binary, check_http, check_kserve, http_requests, kserve_bodies

TARGET = Target("mlp", "x", 16)
FUZZ = settings(max_examples=120, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def server(module_serve_factory, module_mlp_file):
    server = module_serve_factory([{"name": TARGET.model, "path": str(module_mlp_file), "max_batch_size": 4}],
                                  limits={"header_timeout_s": 2.0, "idle_timeout_s": 5.0})
    yield server
    status, body, _ = server.get("/v2/health/live")
    assert status == 200
    crashed = [e for e in server.logs() if e.get("event") in ("handler_crashed", "event_loop_error") or "raw" in e]
    assert not crashed, crashed[:5]


@FUZZ
@given(request=http_requests(TARGET))
def test_fuzzed_http_requests_get_well_formed_answers(server, request):
    check_http(server.http_port, request)


@FUZZ
@given(doc=kserve_bodies(TARGET))
def test_fuzzed_kserve_documents_get_2xx_or_4xx(server, doc):
    check_kserve(server.http_port, TARGET.model, json.dumps(doc).encode())


@FUZZ
@given(frame=binary_frames(TARGET))
def test_fuzzed_binary_frames_get_result_or_error_frames(server, frame):
    check_binary(server.binary_port, frame)


def test_server_healthy_after_fuzzing(server):
    assert server.get("/v2/health/live")[0] == 200
    assert not log_events(server, "handler_crashed")
