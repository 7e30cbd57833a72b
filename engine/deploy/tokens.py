"""Bearer tokens for the deployer's own requests (health, smoke inference,
bench) to an engine with engine.auth.enabled.

With an HS* algorithm the token is minted here from the host's secret file,
short-lived and scoped to `infer`, so a deploy needs nothing from the
operator. Asymmetric algorithms verify with a public key; nobody but the
operator holds the private key, so there the token comes from
`--token`/`--token-file` (a JWT with the infer scope). A given token reaches
the host-side commands on their stdin (never on a command line, where `ps`
shows it) and is read into AIE_DEPLOY_TOKEN.

Host side: stdlib only (HMAC JWTs need no PyJWT; the engine verifies them
with PyJWT, which the tests use to check these).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from pathlib import Path

from engine.deploy import DeployError

ENV = "AIE_DEPLOY_TOKEN"
LIFETIME_S = 300.0
SUBJECT = "ai-engine-deploy"
_HMAC = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}
# What the host side and the manifest need of engine.auth.
AUTH_KEYS = ("enabled", "algorithms", "secret_file", "audience", "issuer", "scopes_claim", "open_health")


def auth_summary(auth: dict | None) -> dict:
    """The part of the spec's engine.auth a deployer needs (goes into MANIFEST.json)."""
    auth = auth or {}
    return {k: auth.get(k) for k in AUTH_KEYS if k in auth}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint_hmac(secret: bytes, algorithm: str, claims: dict) -> str:
    """A compact JWS (JWT) signed with HMAC."""
    head = _b64(json.dumps({"alg": algorithm, "typ": "JWT"}, separators=(",", ":")).encode())
    body = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
    signature = hmac.new(secret, f"{head}.{body}".encode(), _HMAC[algorithm]).digest()
    return f"{head}.{body}.{_b64(signature)}"


def claims(auth: dict, lifetime_s: float) -> dict:
    now = int(time.time())
    out = {"sub": SUBJECT, "iat": now, "exp": now + int(lifetime_s), auth.get("scopes_claim") or "scope": "infer"}
    if auth.get("audience"):
        out["aud"] = auth["audience"]
    if auth.get("issuer"):
        out["iss"] = auth["issuer"]
    return out


def on_host(root: Path, path: str) -> Path:
    """Where the engine started with `--root ROOT` reads an absolute config path."""
    p = Path(path)
    return Path(root) / p.relative_to("/") if p.is_absolute() else p


def hmac_algorithm(auth: dict) -> str | None:
    """The HS* algorithm the engine accepts and the deployer can sign with, if any."""
    if not auth.get("secret_file"):
        return None
    return next((a for a in auth.get("algorithms") or ["HS256"] if a in _HMAC), None)


def mint(auth: dict, secret: bytes, lifetime_s: float = LIFETIME_S) -> str:
    algorithm = hmac_algorithm(auth)
    if algorithm is None:
        raise no_key_error(auth)
    return mint_hmac(secret, algorithm, claims(auth, lifetime_s))


def no_key_error(auth: dict) -> DeployError:
    return DeployError(f"engine.auth accepts {', '.join(auth.get('algorithms') or ['HS256'])} without an HMAC "
                       "secret_file: the deployer cannot sign a token", where="engine.auth",
                       hint="pass one with --token or --token-file (a JWT with the infer scope)")


def for_root(auth: dict | None, root: Path, given: str | None = None, lifetime_s: float = LIFETIME_S) -> str | None:
    """The token for requests to the engine under `root`: None when auth is
    off; the given one (--token, or AIE_DEPLOY_TOKEN on the host side); else
    one minted from the secret file the engine reads."""
    if not auth or not auth.get("enabled"):
        return None
    given = given or os.environ.get(ENV)
    if given:
        return given
    if hmac_algorithm(auth) is None:
        raise no_key_error(auth)
    path = on_host(root, auth["secret_file"])
    try:
        secret = path.read_bytes().strip()  # as the engine reads it
    except OSError as exc:
        raise DeployError(f"cannot read the JWT secret to sign the deployer's token: {exc.strerror}", where=str(path),
                          hint="install engine.auth.secret_file on the host before deploying") from None
    return mint(auth, secret, lifetime_s)


def read_token_file(path: str) -> str:
    """--token-file: the first line of the file, stripped."""
    try:
        token = Path(path).read_text().strip().split("\n", 1)[0].strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise DeployError(f"cannot read the token file: {getattr(exc, 'strerror', None) or exc}", where=path) from None
    if not token:
        raise DeployError("the token file is empty", where=path, hint="it holds one JWT")
    return token
