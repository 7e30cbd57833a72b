"""Checks that span several keys (the schema sees one value at a time).
Each returns Problems pointing at the line of the value to change. They run
on validated data with defaults filled in and units normalised."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from hostspec.balancer import balancer_hosts, engine_hosts, host_address, is_loopback
from engine.config_rules import engine_problems
from engine.config_schema import describe
from engine.errors import EngineError, InvalidArgument
from hostspec.errors import Problem
from hostspec.schema import locate
from hostspec.sysctl_notes import FREE_TEXT, integer_fields
from hostspec.yamlsource import KeyPath, Origins, format_path

# Kernel arguments the GRUB drop-in derives from host.hugepages and
# host.transparent_hugepage; a second copy in kernel_cmdline would fight it.
OWNED_CMDLINE_KEYS = ("default_hugepagesz", "hugepagesz", "hugepages", "transparent_hugepage")
# sysctl keys derived from other settings (see render.desired_sysctl).
DERIVED_SYSCTL = {"vm.nr_hugepages": "host.hugepages.count", "net.ipv4.tcp_tw_reuse": "host.direct_ip_clients"}
_INTEGERS_RE = re.compile(r"^-?[0-9]+(\s+-?[0-9]+)*$")
_JUMP_RE = re.compile(r"^(?:[A-Za-z0-9_.-]+@)?[A-Za-z0-9_.:\[\]-]+(?::[0-9]{1,5})?$")


class _Report:
    def __init__(self, origins: Origins, raw: dict):
        self.origins, self.raw = origins, raw
        self.problems: list[Problem] = []

    def add(self, path: KeyPath, message: str, hint: str | None = None, severity: str = "error",
            at: KeyPath | None = None) -> None:
        """Report at `path`; `at` names another key whose line to show (for keys never written)."""
        file, line = locate(self.origins, at or path)
        self.problems.append(Problem(file, line, format_path(path), message, hint, severity))

    def written(self, path: KeyPath) -> bool:
        node = self.raw
        for part in path:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and part < len(node):
                node = node[part]
            else:
                return False
        return True


def _unique_names(r: _Report, items: list[dict], base: KeyPath, what: str) -> None:
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        name = item["name"]
        if name in seen:
            first = locate(r.origins, base + (seen[name], "name"))[1]
            r.add(base + (i, "name"), f"duplicate {what} name {name!r}", f"first used on line {first}")
        else:
            seen[name] = i


def _check_host(r: _Report, host: dict) -> None:
    hp = host["hugepages"]
    if hp["per_node"]:
        if hp["count"] == "auto":
            r.add(("host", "hugepages", "per_node"), "a NUMA split needs a fixed count",
                  "set host.hugepages.count to a number, or per_node to {}")
        elif sum(hp["per_node"].values()) != hp["count"]:
            r.add(("host", "hugepages", "per_node"),
                  f"node counts add up to {sum(hp['per_node'].values())}, not host.hugepages.count {hp['count']}")
    for key, value in host["sysctl"].items():
        if key in DERIVED_SYSCTL:
            r.add(("host", "sysctl", key), "derived setting; do not set it here", f"set {DERIVED_SYSCTL[key]} instead")
        else:
            _check_sysctl_value(r, key, value)
    seen: dict[str, int] = {}
    for i, arg in enumerate(host["kernel_cmdline"]):
        key = arg.split("=", 1)[0]
        if key in OWNED_CMDLINE_KEYS:
            r.add(("host", "kernel_cmdline", i), f"{key}= is derived from host.hugepages / host.transparent_hugepage",
                  "set those keys instead")
        elif key in seen:
            r.add(("host", "kernel_cmdline", i), f"{key} given twice (also item {seen[key]})")
        else:
            seen[key] = i


def _check_sysctl_value(r: _Report, key: str, value: int | str) -> None:
    """The forms the kernel reads: integers (several, space-separated, for
    keys like ip_local_port_range) or one word (tcp_congestion_control bbr).
    Prose like 'a lot' would be written to sysctl.d and fail at boot."""
    text = str(value).strip()
    fields = integer_fields(key)
    if fields is not None:
        if not _INTEGERS_RE.match(text) or len(text.split()) != fields:
            want = "an integer" if fields == 1 else f"{fields} integers separated by spaces"
            r.add(("host", "sysctl", key), f"expected {want}, got {describe(value)}")
    elif key not in FREE_TEXT and len(text.split()) > 1 and not _INTEGERS_RE.match(text):
        r.add(("host", "sysctl", key), f"expected an integer, integers separated by spaces (e.g. '32768 60999') "
              f"or one word (e.g. bbr), got {describe(value)}")


def _check_service(r: _Report, service: dict, engine: dict) -> None:
    policy, prio = service["cpu_scheduling_policy"], service["cpu_scheduling_priority"]
    if policy in ("fifo", "rr") and prio is None:
        r.add(("service", "cpu_scheduling_priority"), f"required with cpu_scheduling_policy {policy}",
              "a realtime priority 1-99", at=("service", "cpu_scheduling_policy"))
    if policy not in ("fifo", "rr") and prio is not None:
        r.add(("service", "cpu_scheduling_priority"), f"only meaningful with fifo or rr, not {policy}",
              "set it to null or change the policy")
    caps = service["hardening"]["capability_bounding_set"]
    for key in ("http_port", "binary_port", "grpc_port"):
        port = engine[key]
        if port is not None and port < 1024 and "CAP_NET_BIND_SERVICE" not in caps:
            r.add(("engine", key), f"port {port} is privileged (< 1024) and the engine holds no capability",
                  "add CAP_NET_BIND_SERVICE to service.hardening.capability_bounding_set, or use a port >= 1024")
    memlock, arena = service["limit_memlock"], engine["arena"]["size"]
    if engine["arena"]["mlock"] and memlock != "infinity" and memlock < arena:
        r.add(("service", "limit_memlock"), f"{memlock} bytes cannot lock engine.arena.size ({arena} bytes)",
              "raise it or set it to infinity")


def _check_engine(r: _Report, engine: dict) -> None:
    try:
        ipaddress.ip_address(engine["listen"])
    except ValueError:
        r.add(("engine", "listen"), f"not an IP address: {engine['listen']!r}", "e.g. 127.0.0.1, 0.0.0.0 or ::")
    if engine["arena"]["size"] == 0:
        r.add(("engine", "arena", "size"), "must be larger than 0")
    _unique_names(r, engine["models"], ("engine", "models"), "model")
    for path, message, hint in engine_problems(engine):  # the rules the engine holds engine.yaml to
        r.add(("engine",) + path, message, hint)


def model_file_problems(data: dict, raw: dict, origins: Origins) -> list[Problem]:
    """Each model's buckets against its ONNX source's inputs and outputs,
    when the source is on this machine (paths resolved): the rules
    conversion and the engine's start-up hold them to
    (engine.shape_buckets), reported before anything is rendered. A source
    that is missing or does not parse, or an install without the
    converter's packages, leaves it to missing_files and conversion."""
    r = _Report(origins, raw)
    models = [(i, m) for i, m in enumerate(data["engine"]["models"])
              if m.get("buckets") and m.get("source") and Path(m["source"]).is_file()]
    if not models:
        return r.problems
    # Imported only here: onnx and numpy (~0.6 s) would otherwise load with
    # every spec, and a render-only install lacks them (conversion, which
    # has them, checks the same).
    try:
        from engine.onnx_import import import_signature
        from engine.shape_buckets import FIT_HINT, ShapeBuckets, bucket_axes
    except ImportError:
        return r.problems
    for i, model in models:
        try:
            graph = import_signature(model["source"])
        except EngineError:
            continue
        try:
            bucket_axes(graph, ShapeBuckets.from_config(model["buckets"]))
        except InvalidArgument as exc:
            r.add(("engine", "models", i, "buckets"), str(exc), FIT_HINT)
    return r.problems


_SSH_ONLY = ("address", "port", "user", "key_file", "jump_host")


def _check_hosts(r: _Report, hosts: list[dict]) -> None:
    _unique_names(r, hosts, ("hosts",), "host")
    names = {h["name"] for h in hosts}
    for i, h in enumerate(hosts):
        if h["type"] == "local":
            if "root" not in h:
                r.add(("hosts", i), "missing required key 'root'", "the directory a local host deploys into")
            for key in _SSH_ONLY:
                if r.written(("hosts", i, key)):
                    r.add(("hosts", i, key), "only for hosts of type ssh")
        else:
            if "address" not in h:
                r.add(("hosts", i), "missing required key 'address'", "the host name or IP address to ssh to")
            jump = h.get("jump_host")
            if jump is not None:
                if jump == h["name"]:
                    r.add(("hosts", i, "jump_host"), "a host cannot be its own jump host")
                elif jump not in names and ("@" not in jump and ":" not in jump or not _JUMP_RE.match(jump)):
                    r.add(("hosts", i, "jump_host"), f"{jump!r} is neither a host in hosts nor user@host:port")


def _check_canary(r: _Report, data: dict) -> None:
    """deploy.canary: an engine host; the object form (a traffic ramp) needs
    a balancer in front of the canary and at least one other engine host to
    compare it with; steps grow to 100. An object without a balancer is an
    error rather than a silent fallback to "deployed alone first": its limits
    would look enforced and never be."""
    canary = data["deploy"]["canary"]
    if canary is None:
        return
    ramp = isinstance(canary, dict)
    name = canary["host"] if ramp else canary
    at = ("deploy", "canary", "host") if ramp else ("deploy", "canary")
    roles = {h["name"]: h.get("role", "engine") for h in data["hosts"]}
    if name not in roles:
        r.add(at, f"no host named {name!r} in hosts", "known: " + (", ".join(sorted(roles)) or "none"))
        return
    if roles[name] != "engine":
        r.add(at, f"{name!r} is a {roles[name]} host, not an engine host",
              "a canary runs the new release: name a host with role engine")
        return
    if not ramp:
        return
    steps = canary["steps"]
    for i, (before, step) in enumerate(zip(steps, steps[1:]), start=1):
        if step <= before:
            r.add(("deploy", "canary", "steps", i), f"{step} after {before}: the steps must increase",
                  "e.g. [1, 5, 25, 50, 100]")
    if steps[-1] != 100:
        r.add(("deploy", "canary", "steps", len(steps) - 1), f"the last step is {steps[-1]}, not 100",
              "the ramp ends with the canary taking all the traffic: end the steps with 100")
    if not balancer_hosts(data):
        r.add(("deploy", "canary"), "a canary with a traffic ramp (steps, limits) needs a balancer host "
              "(hosts[].role: balancer) to weigh its traffic, and the spec has none",
              "add a balancer host, or write deploy.canary: " + name + " to deploy it alone first")
        return
    behind = [h["name"] for h in engine_hosts(data)]
    if name not in behind:
        r.add(at, f"{name!r} is not behind the balancer (balancer.engines)", "add it to balancer.engines")
    elif len(behind) < 2:
        r.add(at, f"{name!r} is the only engine host behind the balancer: there is no fleet to compare it with",
              "add engine hosts, or write deploy.canary: " + name + " to deploy it alone first")


def _check_balancer(r: _Report, data: dict) -> None:
    """The balancer section against the hosts and the engine it fronts."""
    b, engine, hosts = data["balancer"], data["engine"], data["hosts"]
    roles = {h["name"]: h.get("role", "engine") for h in hosts}
    for i, name in enumerate(b["engines"]):
        if name not in roles:
            r.add(("balancer", "engines", i), f"no host named {name!r} in hosts",
                  "known engine hosts: " + (", ".join(n for n, role in roles.items() if role == "engine") or "none"))
        elif roles[name] != "engine":
            r.add(("balancer", "engines", i), f"{name!r} is a {roles[name]} host, not an engine host")
    balancers = balancer_hosts(data)
    if not balancers:
        return
    where = ("hosts", next(i for i, h in enumerate(hosts) if h.get("role") == "balancer"), "role")
    backends = engine_hosts(data)
    if not backends:
        r.add(where, "a balancer needs engine hosts behind it and the spec has none",
              "add hosts with role engine (the default role)")
        return
    ports = [("http_port", b["http_port"]), ("binary_port", b["binary_port"]), ("stats_port", b["stats_port"])]
    seen: dict[int, str] = {}
    for key, port in ports:
        if port is None:
            continue
        if port in seen:
            r.add(("balancer", key), f"port {port} is also balancer.{seen[port]}")
        seen[port] = key
    listen = engine["listen"]
    engine_ports = {engine[k]: k for k in ("http_port", "binary_port", "grpc_port") if engine[k] is not None}
    # A balancer and an engine on one machine (local hosts, or one address) cannot share a port.
    engine_addresses = {host_address(h, listen) for h in backends}
    for bh in balancers:
        shared = bh["type"] == "local" and any(h["type"] == "local" for h in backends) or \
            bh["type"] == "ssh" and bh["address"] in engine_addresses
        for key, port in ports:
            if shared and port in engine_ports:
                r.add(("balancer", key), f"port {port} is also engine.{engine_ports[port]} on host {bh['name']!r}, "
                      "which runs an engine as well", "give the balancer's frontends other ports")
    remote = [h["name"] for h in backends if not is_loopback(host_address(h, listen))]
    if is_loopback(listen) and remote:
        r.add(("engine", "listen"), f"the engine listens on {listen} only, so the balancer cannot reach "
              f"engine host{'s' if len(remote) > 1 else ''} {', '.join(remote)}",
              "set engine.listen: 0.0.0.0 (and keep the engine ports firewalled to the balancer)")
    if engine["auth"]["enabled"] and not engine["auth"]["open_health"]:
        r.add(("engine", "auth", "open_health"), "the balancer's health checks carry no token, so with "
              "open_health false every engine host would be marked down", "set engine.auth.open_health: true")
    if engine["tls"]["cert_file"]:
        r.add(("engine", "tls"), "a balancer in front of engines that serve TLS is not supported yet",
              "terminate TLS at the balancer's clients' side or serve the engines in plain text behind it")


def check_spec(data: dict, raw: dict, origins: Origins) -> list[Problem]:
    """Cross-key errors of a validated, normalised spec."""
    r = _Report(origins, raw)
    _check_host(r, data["host"])
    _check_service(r, data["service"], data["engine"])
    _check_engine(r, data["engine"])
    _check_hosts(r, data["hosts"])
    _check_balancer(r, data)
    _check_canary(r, data)
    return sorted(r.problems, key=lambda p: (p.file or "", p.line or 0))


def missing_sysctls(data: dict, origins: Origins, proc: Path, severity: str) -> list[Problem]:
    """sysctl keys this kernel does not have under proc/sys (a warning when rendering
    for another host, an error at live provision)."""
    r = _Report(origins, {})
    sys_dir = proc / "sys"
    if not sys_dir.is_dir():
        return []
    for key in data["host"]["sysctl"]:
        # sysctl.conf spells '/' inside a component (eth0/100) where /proc/sys has '.'
        rel = Path(*[part.replace("/", ".") for part in key.split(".")])
        if not (sys_dir / rel).exists():
            r.add(("host", "sysctl", key), f"no such sysctl on this kernel ({sys_dir / rel} is missing)",
                  "check the spelling, or the module that provides it", severity)
    return r.problems
