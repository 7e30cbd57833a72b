"""Auth policy (issue 16, finding 13), with real JWTs against real servers:
a token without a priority claim gets engine.auth.default_priority (not the
highest level), failed authentications are limited per client address
(429 once spent), `exp` is required unless require_exp is false, and which
of /metrics and the health endpoints need a token is configurable."""

from __future__ import annotations

import http.client
import json
import time
import uuid

import jwt
import numpy as np
import pytest

from engine.client import Client, ServerError
from serve_support import parse_prometheus

X = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)


def body(priority: int | None = None) -> bytes:
    doc = {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": X.ravel().tolist()}]}
    if priority is not None:
        doc["parameters"] = {"priority": priority}
    return json.dumps(doc).encode()


@pytest.fixture(scope="module")
def secret(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "secret"
    path.write_bytes(b"policy-" + uuid.uuid4().hex.encode())
    return path


def token(secret, **claims) -> str:
    now = int(time.time())
    payload = {"sub": uuid.uuid4().hex, "iat": now, "exp": now + 300, "scope": "infer", **claims}
    return jwt.encode({k: v for k, v in payload.items() if v is not None}, secret.read_bytes(), algorithm="HS256")


def auth(secret, **extra) -> dict:
    return {"enabled": True, "algorithms": ["HS256"], "secret_file": str(secret), **extra}


def post(server, tok: str | None, data: bytes, source: str = "127.0.0.1"):
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10, source_address=(source, 0))
    try:
        conn.request("POST", "/v2/models/mlp/infer", data, {"Authorization": f"Bearer {tok}"} if tok else {})
        r = conn.getresponse()
        return r.status, r.read(), dict(r.getheaders())
    finally:
        conn.close()


def logged_priorities(server, count: int) -> list[int]:
    """The priority of the first `count` logged infer requests (the log line
    follows the response, so it is waited for)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = [r["priority"] for r in server.logs() if r.get("event") == "request" and r.get("status") == 200]
        if len(got) >= count:
            return got[:count]
        time.sleep(0.02)
    raise AssertionError(f"{count} request lines not logged within 10 s")


@pytest.mark.parametrize("default_priority, unclaimed", [(0, 3), (2, 2)], ids=["lowest", "configured"])
def test_a_token_without_priority_claim_gets_the_default_level(serve_factory, mlp_file, secret, default_priority,
                                                               unclaimed):
    server = serve_factory([{"name": "mlp", "path": str(mlp_file), "priority_levels": 3}],
                           auth=auth(secret, default_priority=default_priority))
    cases = [
        (token(secret), 1, unclaimed),                  # no claim asks for the highest: capped
        (token(secret, priority="1"), 1, unclaimed),    # a claim that is not an integer counts as none
        (token(secret, priority=True), 1, unclaimed),   # nor does a boolean (an int to Python)
        (token(secret, priority=1), 1, 1),              # the claim allows it
        (token(secret, priority=2), 1, 2),              # the claim caps it
        (token(secret), None, 3),                       # asked for nothing: the model's default (lowest)
    ]
    for tok, asked, _ in cases:
        status, raw, _ = post(server, tok, body(asked))
        assert status == 200, raw
    assert logged_priorities(server, len(cases)) == [want for _, _, want in cases]


def test_exp_is_required_unless_configured(serve_factory, mlp_file, secret):
    strict = serve_factory([{"name": "mlp", "path": str(mlp_file)}], auth=auth(secret))
    status, raw, _ = post(strict, token(secret, exp=None), body())
    assert status == 401 and "no 'exp' claim" in json.loads(raw)["error"], raw
    assert post(strict, token(secret), body())[0] == 200
    lenient = serve_factory([{"name": "mlp", "path": str(mlp_file)}], auth=auth(secret, require_exp=False))
    assert post(lenient, token(secret, exp=None), body())[0] == 200
    assert post(lenient, token(secret, exp=int(time.time()) - 60), body())[0] == 401  # present: still checked


def test_failed_authentication_is_limited_per_address(serve_factory, mlp_file, secret):
    burst = 5
    server = serve_factory([{"name": "mlp", "path": str(mlp_file)}],
                           auth=auth(secret, failure_limit={"requests_per_s": 2, "burst": burst}))
    bad = token(secret)[:-4] + "AAAA"  # a broken signature
    codes = [post(server, bad, body())[0] for _ in range(burst)]
    assert codes == [401] * burst, codes
    status, raw, headers = post(server, bad, body())
    assert status == 429 and "failed authentications" in json.loads(raw)["error"], raw
    assert int(headers["Retry-After"]) >= 1
    # Spent: this address is refused before its token is even looked at ...
    assert post(server, token(secret), body())[0] == 429
    with Client("127.0.0.1", server.binary_port, token=token(secret)) as c, pytest.raises(ServerError) as err:
        c.infer("mlp", {"x": X})
    assert err.value.status == 429
    # ... probes still pass (health needs no token) ...
    assert server.get("/v2/health/ready")[0] == 200
    # ... another address has its own bucket ...
    assert post(server, token(secret), body(), source="127.0.0.2")[0] == 200
    assert post(server, bad, body(), source="127.0.0.2")[0] == 401
    # ... and the bucket refills (2/s): a valid token passes again without any failure spent.
    deadline = time.monotonic() + 5
    while (status := post(server, token(secret), body())[0]) == 429 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status == 200
    m = parse_prometheus(server.get("/metrics")[1].decode())
    assert m[("aie_auth_failures_total", ())] == burst + 1  # the 127.0.0.2 failure; refusals are not failures
    assert m[("aie_rate_limited_total", ())] >= 3


@pytest.mark.parametrize("open_health, open_metrics", [(True, False), (False, True)])
def test_metrics_and_health_access_is_configurable(serve_factory, mlp_file, secret, open_health, open_metrics):
    server = serve_factory([{"name": "mlp", "path": str(mlp_file)}],
                           auth=auth(secret, open_health=open_health, open_metrics=open_metrics))
    with_token = {"Authorization": f"Bearer {token(secret)}"}
    for path, is_open in (("/metrics", open_metrics), ("/health", open_health), ("/v2/health/ready", open_health),
                          ("/v2/health/live", open_health)):
        assert server.get(path)[0] == (200 if is_open else 401), path
        assert server.get(path, with_token)[0] == 200, path
    assert server.get("/v2/models/mlp")[0] == 401
