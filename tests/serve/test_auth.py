"""JWT bearer auth (HS256, RS256, ES256 from key files), scopes, open health,
and per-client token-bucket rate limiting."""

from __future__ import annotations

import json
import time
import uuid

import jwt
import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from engine.client import Client, ServerError

AUD, ISS = "ai-engine", "https://issuer.test"
BODY = json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32",
                               "data": [0.01 * i for i in range(784)]}]}).encode()


def _pem_public(key) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    secret = b"s3cret-" + uuid.uuid4().hex.encode()
    (d / "secret").write_bytes(secret)
    # One key file holds one public key; RS256 and ES256 get a server each.
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    (d / "rsa.pem").write_bytes(_pem_public(rsa_key))
    (d / "ec.pem").write_bytes(_pem_public(ec_key))
    return {"dir": d, "secret": secret, "rsa": rsa_key, "ec": ec_key}


def token(key, alg="HS256", scope="infer", **claims) -> str:
    now = int(time.time())
    payload = {"sub": uuid.uuid4().hex, "aud": AUD, "iss": ISS, "iat": now, "exp": now + 300, "scope": scope}
    payload.update(claims)
    return jwt.encode({k: v for k, v in payload.items() if v is not None}, key, algorithm=alg)


def auth_config(keys, public: str, algorithms, **extra) -> dict:
    cfg = {"enabled": True, "algorithms": algorithms, "secret_file": str(keys["dir"] / "secret"),
           "public_key_file": str(keys["dir"] / public), "audience": AUD, "issuer": ISS, "open_health": True}
    cfg.update(extra)
    return cfg


@pytest.fixture(scope="module")
def server(module_serve_factory, zoo_mlp, keys):
    return module_serve_factory([{"name": "mlp", "path": str(zoo_mlp.path)}],
                                auth=auth_config(keys, "rsa.pem", ["HS256", "RS256"]))


def call(server, tok: str | None, path="/v2/models/mlp/infer", body=BODY):
    headers = {"Authorization": f"Bearer {tok}"} if tok else {}
    if body is None:
        return server.get(path, headers)
    return server.post(path, body, headers)


def test_valid_tokens_pass(server, keys):
    assert call(server, token(keys["secret"]))[0] == 200
    assert call(server, token(keys["rsa"], "RS256"))[0] == 200
    assert call(server, token(keys["secret"]), "/v2/models/mlp", None)[0] == 200


@pytest.mark.parametrize("case, expected", [
    ("missing", "missing bearer token"),
    ("none", "algorithm 'none' not accepted"),
    ("expired", "expired"),
    ("nbf", "not yet valid"),
    ("audience", "audience"),
    ("issuer", "issuer"),
    ("signature", "invalid token"),
    ("es256-not-listed", "'ES256' not accepted"),
    ("garbage", "malformed token"),
])
def test_bad_tokens_get_401(server, keys, case, expected):
    now = int(time.time())
    tok = {
        "missing": None,
        "none": jwt.encode({"sub": "x", "aud": AUD, "iss": ISS, "scope": "infer"}, None, algorithm="none"),
        "expired": token(keys["secret"], exp=now - 60),
        "nbf": token(keys["secret"], nbf=now + 600),
        "audience": token(keys["secret"], aud="someone-else"),
        "issuer": token(keys["secret"], iss="https://evil.test"),
        "signature": token(b"not-the-secret-" + b"x" * 32),
        "es256-not-listed": token(keys["ec"], "ES256"),
        "garbage": "abc.def",
    }[case]
    status, body, headers = call(server, tok)
    assert status == 401 and expected in json.loads(body)["error"], body
    assert headers["WWW-Authenticate"].startswith("Bearer")


def test_scopes_per_model(server, keys):
    status, body, _ = call(server, token(keys["secret"], scope="infer:other"))
    assert status == 403 and "infer:mlp" in json.loads(body)["error"]
    assert call(server, token(keys["secret"], scope="read infer:mlp"))[0] == 200
    assert call(server, token(keys["secret"], scope=["infer:mlp"]))[0] == 200


def test_health_open_and_the_rest_closed(server, keys):
    for path in ("/v2/health/live", "/v2/health/ready", "/health", "/metrics"):
        assert server.get(path)[0] == 200, path
    for path in ("/v2", "/v2/models/mlp", "/v2/models/mlp/stats"):
        assert server.get(path)[0] == 401, path


def test_binary_protocol_carries_the_token(server, keys):
    x = np.linspace(-1, 1, 784, dtype=np.float32).reshape(1, 784)
    with Client("127.0.0.1", server.binary_port, token=token(keys["secret"])) as c:
        assert c.infer("mlp", {"input": x})["logits"].shape == (1, 10)
    with Client("127.0.0.1", server.binary_port) as c, pytest.raises(ServerError) as err:
        c.infer("mlp", {"input": x})
    assert err.value.status == 401


def test_es256_and_closed_health(serve_factory, zoo_mlp, keys):
    server = serve_factory([{"name": "mlp", "path": str(zoo_mlp.path)}],
                           auth=auth_config(keys, "ec.pem", ["ES256"], open_health=False, open_metrics=False,
                                            secret_file=None))
    assert call(server, token(keys["ec"], "ES256"))[0] == 200
    assert call(server, token(keys["secret"]))[0] == 401     # HS256 not listed here
    assert server.get("/metrics")[0] == 401
    # readiness probes of this server must carry a token: the fixture's probe got 401 -> use one
    assert call(server, token(keys["ec"], "ES256"), "/v2/health/ready", None)[0] == 200


def test_rate_limit_per_subject(serve_factory, zoo_mlp, keys):
    server = serve_factory([{"name": "mlp", "path": str(zoo_mlp.path)}],
                           auth=auth_config(keys, "rsa.pem", ["HS256"], rate_limit={"requests_per_s": 2, "burst": 3}))
    alice, bob = token(keys["secret"], sub="alice"), token(keys["secret"], sub="bob")
    results = [call(server, alice) for _ in range(6)]
    codes = [r[0] for r in results]
    assert codes[:3] == [200, 200, 200] and codes.count(429) >= 2, codes
    limited = next(r for r in results if r[0] == 429)
    assert int(limited[2]["Retry-After"]) >= 1 and "rate limit" in json.loads(limited[1])["error"]
    assert call(server, bob)[0] == 200  # another subject has its own bucket
    # Time passing is the subject here (a bucket refills at 2 tokens/s), not
    # synchronisation: 1.1 s is one token with margin, and the only sleep.
    time.sleep(1.1)
    assert call(server, alice)[0] == 200  # refilled at 2/s


def test_rate_limit_by_address_without_auth(serve_factory, zoo_mlp):
    server = serve_factory([{"name": "mlp", "path": str(zoo_mlp.path)}],
                           auth={"rate_limit": {"requests_per_s": 1, "burst": 2}})
    codes = [server.post("/v2/models/mlp/infer", BODY)[0] for _ in range(5)]
    assert codes[:2] == [200, 200] and codes.count(429) >= 2, codes
