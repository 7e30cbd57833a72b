"""SIGHUP: re-read the config and re-open every model file by path.

New versions load beside the old ones (which keep serving), each switches in
one assignment when its load succeeded, and the old one drains its queue
before its sessions are released. A model that fails to load keeps its old
version; the error goes to the log, /health and the metrics. A config file
that no longer parses changes nothing. Auth keys, rate limits and HTTP limits
take effect too; listen address, ports and TLS files need a restart (logged).
"""

from __future__ import annotations

import dataclasses

from engine.errors import EngineError
from engine.server.auth import Authenticator, RateLimiter
from engine.server.config import load_config
from engine.server.state import ServerState


async def reload_config(state: ServerState, config_path: str, root: str | None) -> dict[str, str]:
    """Apply the config at `config_path`; {model: error} for what failed."""
    state.metrics.reloads += 1
    log = state.logger
    try:
        config = load_config(config_path, root)
        auth = Authenticator(config.auth)
    except EngineError as exc:
        log.error("reload_failed", error=str(exc), kept="previous configuration")
        return {"*": str(exc)}
    old = state.config
    for key in ("listen", "http_port", "binary_port", "grpc_port", "tls"):
        if getattr(old, key) != getattr(config, key):
            log.warning("reload_needs_restart", key=key, running=str(getattr(old, key)),
                        configured=str(getattr(config, key)))
    config = dataclasses.replace(config, listen=old.listen, http_port=old.http_port, binary_port=old.binary_port,
                                 grpc_port=old.grpc_port, tls=old.tls)
    errors = await state.registry.apply(config, config.limits.drain_timeout_s)
    state.config = config
    state.auth = auth
    if config.auth.rate_limit != old.auth.rate_limit:
        state.rate_limiter = RateLimiter(config.auth.rate_limit)
    if config.auth.failure_limit != old.auth.failure_limit:
        state.failure_limiter = RateLimiter(config.auth.failure_limit)
    for name, err in errors.items():
        log.error("model_load_failed", model=name, error=err, kept="previous version" if
                  state.registry.get(name).scheduler else "none")
    for name, detail in state.registry.capped_warm_ups().items():
        log.warning("warm_plans_capped", model=name, detail=detail)
    log.info("reloaded", models=[m.name for m in config.models], failed=sorted(errors))
    return errors
