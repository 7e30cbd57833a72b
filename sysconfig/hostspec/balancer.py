"""The fleet behind HAProxy, derived from the spec: which hosts are engines,
the address a balancer reaches each one at, and what haproxy.cfg and the
Prometheus file_sd list are rendered from. Pure data in, data out; the
cross-key checks (hostspec.checks) and the templates both read it here."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Backend:
    name: str       # the host's name: HAProxy's server name and the runtime API's handle
    address: str    # where the balancer connects


def balancer_hosts(data: dict) -> list[dict]:
    return [h for h in data["hosts"] if h.get("role", "engine") == "balancer"]


def engine_hosts(data: dict, behind_balancer: bool = True) -> list[dict]:
    """Every engine host, or (behind_balancer) those balancer.engines names
    (all of them when it is empty)."""
    engines = [h for h in data["hosts"] if h.get("role", "engine") == "engine"]
    chosen = data["balancer"]["engines"] if behind_balancer else []
    return [h for h in engines if h["name"] in chosen] if chosen else engines


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def host_address(host: dict, listen: str) -> str:
    """Where other machines reach an engine host: an ssh host's address; a
    local host is this machine, reached on loopback unless the engine listens
    on one specific address."""
    if host["type"] == "ssh":
        return host["address"]
    return LOOPBACK if listen in ("0.0.0.0", "::", "") or is_loopback(listen) else listen


def backends(data: dict, behind_balancer: bool = True) -> list[Backend]:
    listen = data["engine"]["listen"]
    return [Backend(h["name"], host_address(h, listen)) for h in engine_hosts(data, behind_balancer)]


def _bracket(address: str) -> str:
    """An IPv6 address in host:port form."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def haproxy_context(data: dict) -> dict:
    b, engine = data["balancer"], data["engine"]
    return {
        "balancer": b,
        "servers": [{"name": s.name, "address": _bracket(s.address)} for s in backends(data)],
        "engine_http_port": engine["http_port"], "engine_binary_port": engine["binary_port"],
        "listen": _bracket(b["listen"]),
        "ms": lambda seconds: f"{int(round(float(seconds) * 1000))}ms",
    }


def file_sd(data: dict) -> str:
    """Prometheus file_sd_configs targets: every engine host's /metrics (the
    engine serves it on its HTTP port), labelled with the host's name."""
    port = data["engine"]["http_port"]
    groups = [{"targets": [f"{_bracket(s.address)}:{port}"], "labels": {"job": "ai-engine", "host": s.name}}
              for s in backends(data, behind_balancer=False)]
    return json.dumps(groups, indent=2, sort_keys=True) + "\n"
