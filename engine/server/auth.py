"""Bearer-token (JWT) authentication, per-model scopes, and per-client rate
limiting with token buckets.

Tokens are verified with PyJWT against keys read from files at start-up and
at every reload (so a key rotation is a file swap + SIGHUP). Only algorithms
listed in the config are accepted; `none` can never be listed. `exp` is
required (unless `require_exp: false`: a token that never expires is a
password), `nbf` checked when present, `aud` and `iss` required when configured.

Priority (fail-closed): a token's `priority` claim is the best level it may
ask for; a token without one gets `default_priority`, never the highest.

Scopes: a token may infer on model M when its scopes contain `infer` (every
model) or `infer:M`; metadata and stats need any valid token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import jwt
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from engine.server.config import AuthConfig, ConfigError, RateLimitConfig
from engine.server.errors import ServeError


@dataclass(frozen=True)
class Principal:
    subject: str
    scopes: frozenset[str]
    priority: int | None         # best level the token allows (0 = the model's lowest); None: no ceiling

    def may_infer(self, model: str) -> bool:
        return "infer" in self.scopes or f"infer:{model}" in self.scopes


ANONYMOUS = Principal("", frozenset({"infer"}), None)


def _read_key(path: str | None, what: str) -> bytes | None:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            data = f.read().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read {what}: {exc.strerror}", where=path) from None
    if not data:
        raise ConfigError(f"{what} is empty", where=path)
    return data


class Authenticator:
    def __init__(self, config: AuthConfig):
        self.config = config
        self.enabled = config.enabled
        self._secret = _read_key(config.secret_file, "JWT secret") if config.enabled else None
        public = _read_key(config.public_key_file, "JWT public key") if config.enabled else None
        self._public = None
        if public is not None:
            try:
                self._public = load_pem_public_key(public)
            except ValueError as exc:
                raise ConfigError(f"not a PEM public key: {exc}", where=config.public_key_file) from None

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal for an Authorization header value; ServeError (401) if refused."""
        if not self.enabled:
            return ANONYMOUS
        if not authorization:
            raise ServeError("missing bearer token (Authorization: Bearer <JWT>)", status=401)
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ServeError("Authorization must be 'Bearer <JWT>'", status=401)
        return self.verify(token.strip())

    def verify(self, token: str) -> Principal:
        cfg = self.config
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise ServeError(f"malformed token: {exc}", status=401) from None
        alg = header.get("alg")
        if alg not in cfg.algorithms:
            raise ServeError(f"token algorithm {alg!r} not accepted (accepted: {', '.join(cfg.algorithms)})",
                             status=401)
        key = self._secret if str(alg).startswith("HS") else self._public
        required = [k for k, v in (("exp", cfg.require_exp), ("aud", cfg.audience), ("iss", cfg.issuer)) if v]
        try:
            claims = jwt.decode(token, key, algorithms=[alg], audience=cfg.audience, issuer=cfg.issuer,
                                leeway=cfg.leeway_s, options={"require": required,
                                                              "verify_aud": cfg.audience is not None})
        except jwt.MissingRequiredClaimError as exc:
            hint = " (engine.auth.require_exp)" if exc.claim == "exp" else ""
            raise ServeError(f"token has no {exc.claim!r} claim{hint}", status=401) from None
        except jwt.ExpiredSignatureError:
            raise ServeError("token expired", status=401) from None
        except jwt.ImmatureSignatureError:
            raise ServeError("token not yet valid (nbf/iat in the future)", status=401) from None
        except jwt.InvalidAudienceError:
            raise ServeError(f"token audience is not {cfg.audience!r}", status=401) from None
        except jwt.InvalidIssuerError:
            raise ServeError(f"token issuer is not {cfg.issuer!r}", status=401) from None
        except jwt.PyJWTError as exc:
            raise ServeError(f"invalid token: {exc}", status=401) from None
        raw = claims.get(cfg.scopes_claim, "")
        scopes = frozenset(raw.split() if isinstance(raw, str) else map(str, raw if isinstance(raw, list) else []))
        prio = claims.get(cfg.priority_claim)
        if isinstance(prio, bool) or not isinstance(prio, int) or prio < 1:
            prio = cfg.default_priority  # no (usable) claim: the configured level, not the best one
        return Principal(str(claims.get("sub", "")), scopes, prio)


class RateLimiter:
    """One token bucket per client key (subject, else address; or the address
    alone for failed authentications). Buckets idle long enough to be full are
    dropped so the table stays bounded."""

    def __init__(self, config: RateLimitConfig, max_clients: int = 100_000):
        self.rate = config.requests_per_s
        self.burst = float(config.burst or max(1.0, self.rate))
        self.enabled = self.rate > 0
        self._buckets: dict[str, list[float]] = {}   # key -> [tokens, last refill]
        self._max_clients = max_clients

    def acquire(self, key: str) -> float:
        """0 if the request may go ahead, else the seconds until a token is due."""
        return self._take(key, 1.0)

    def wait(self, key: str) -> float:
        """What acquire() would answer, without spending a token."""
        return self._take(key, 0.0)

    def _take(self, key: str, cost: float) -> float:
        if not self.enabled:
            return 0.0
        now = time.monotonic()
        bucket = self._buckets.get(key)
        if bucket is None:
            if not cost:
                return 0.0  # a full bucket: not worth a table entry
            if len(self._buckets) >= self._max_clients:
                self._evict(now)
            bucket = self._buckets[key] = [self.burst, now]
        tokens = min(self.burst, bucket[0] + (now - bucket[1]) * self.rate)
        bucket[1] = now
        if tokens >= 1.0:
            bucket[0] = tokens - cost
            return 0.0
        bucket[0] = tokens
        return (1.0 - tokens) / self.rate

    def _evict(self, now: float) -> None:
        full_after = self.burst / self.rate
        for key in [k for k, (_, last) in self._buckets.items() if now - last >= full_after]:
            del self._buckets[key]
        if len(self._buckets) >= self._max_clients:  # every client is active: drop the oldest half
            for key in sorted(self._buckets, key=lambda k: self._buckets[k][1])[: self._max_clients // 2]:
                del self._buckets[key]
