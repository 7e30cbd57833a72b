"""HAProxy's runtime API (the admin-level stats socket that haproxy.cfg
declares as balancer.runtime_socket): take an engine host out of the
rotation, wait for its connections to finish, put it back, and set its
share of new requests (its weight: the canary's ramp).

Every engine host is a server of the same name in both backends
(ai_engine_http and ai_engine_binary, hostspec.balancer), so each operation
applies to both. The socket speaks one command per connection, answers in
text and closes; `show stat` answers CSV. Reference: HAProxy 2.6
management guide, "Unix Socket commands".
"""

from __future__ import annotations

import csv
import io
import socket
import time
from dataclasses import dataclass

from engine.deploy import DeployError

BACKENDS = ("ai_engine_http", "ai_engine_binary")
STATES = ("ready", "drain", "maint")
MAX_WEIGHT = 256   # HAProxy's server weights are 0..256; 0 = no new requests (haproxy.cfg gives 100)


@dataclass(frozen=True)
class ServerStat:
    backend: str
    server: str
    status: str        # UP, DOWN, DRAIN, MAINT, "UP 1/2" while rising, ...
    weight: int
    sessions: int      # connections open to the server now (scur)
    queued: int        # requests waiting in the balancer for it (qcur)
    check: str         # last health check result (e.g. L7OK, L4CON)


class RuntimeAPI:
    def __init__(self, socket_path: str, timeout_s: float = 5.0):
        self.path, self.timeout_s = socket_path, timeout_s

    def command(self, line: str) -> str:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(self.timeout_s)
                s.connect(self.path)
                s.sendall(line.encode() + b"\n")
                chunks = []
                while chunk := s.recv(65536):
                    chunks.append(chunk)
        except OSError as exc:
            raise DeployError(f"cannot talk to HAProxy's runtime API: {exc}", where=self.path,
                                hint="is haproxy running with this balancer.runtime_socket?") from None
        answer = b"".join(chunks).decode(errors="replace")
        # Refusals read like "No such server." / "Require 'backend/server'." / "Unknown command".
        first = answer.strip().splitlines()[0] if answer.strip() else ""
        if first.startswith(("No such", "Require", "Unknown command", "Permission denied", "Invalid")):
            raise DeployError(f"HAProxy refused {line!r}: {first}", where=self.path)
        return answer

    def stats(self) -> list[ServerStat]:
        """Every server of the engine backends."""
        text = self.command("show stat")
        rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
        out = []
        for row in rows:
            if row.get("pxname") in BACKENDS and row.get("svname") not in ("FRONTEND", "BACKEND"):
                out.append(ServerStat(row["pxname"], row["svname"], row["status"], int(row["weight"] or 0),
                                      int(row["scur"] or 0), int(row["qcur"] or 0), row.get("check_status", "")))
        return out

    def server(self, name: str) -> list[ServerStat]:
        found = [s for s in self.stats() if s.server == name]
        if not found:
            raise DeployError(f"no engine host {name!r} behind the balancer", where=self.path)
        return found

    def set_state(self, name: str, state: str) -> None:
        """ready: takes traffic; drain: keeps its connections, gets no new
        ones; maint: out entirely (health checks stop)."""
        if state not in STATES:
            raise ValueError(f"state must be one of {STATES}, not {state!r}")
        for backend in self._backends_of(name):
            self.command(f"set server {backend}/{name} state {state}")

    def set_weight(self, name: str, weight: int) -> None:
        """The host's weight in every backend: its share of new requests is
        weight / (sum of the weights of the servers that are up)."""
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= MAX_WEIGHT:
            raise ValueError(f"weight must be a whole number 0..{MAX_WEIGHT}, not {weight!r}")
        for backend in self._backends_of(name):
            self.command(f"set weight {backend}/{name} {weight}")

    def weights(self) -> dict[str, int]:
        """{host: weight} as HAProxy applies it (the HTTP backend's; set_weight
        keeps both backends equal)."""
        stats = self.stats()
        http = {s.server: s.weight for s in stats if s.backend == BACKENDS[0]}
        return http or {s.server: s.weight for s in stats}

    def wait_drained(self, name: str, timeout_s: float, poll_s: float = 0.05) -> bool:
        """Until no connection to the host is open or queued in any backend
        (True), or timeout_s passes (False)."""
        return _poll(lambda: all(s.sessions == 0 and s.queued == 0 for s in self.server(name)), timeout_s, poll_s)

    def wait_status(self, name: str, prefix: str, timeout_s: float, poll_s: float = 0.05) -> bool:
        """Until every backend's entry of the host has a status starting with
        prefix (e.g. "UP" after a restart, "DOWN" after a kill)."""
        return _poll(lambda: all(s.status.startswith(prefix) and not s.status.startswith(prefix + " ")
                                 for s in self.server(name)), timeout_s, poll_s)

    def _backends_of(self, name: str) -> list[str]:
        return sorted({s.backend for s in self.server(name)})


def _poll(done, timeout_s: float, poll_s: float) -> bool:
    """done() until it holds (True) or timeout_s passes (False)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)  # polling HAProxy's own state, bounded by the deadline
    return True
