"""HAProxy's runtime API (the admin-level stats socket that haproxy.cfg
declares as balancer.runtime_socket): take an engine host out of the
rotation, wait for its connections to finish, put it back, and set its
share of new requests (its weight: the canary's ramp).

Every engine host is a server of the same name in both backends
(ai_engine_http and ai_engine_binary, hostspec.balancer), so each operation
applies to both. The socket speaks one command per connection, answers in
text and closes; `show stat` answers CSV. Reference: HAProxy 2.6
management guide, "Unix Socket commands".

The socket lives on the balancer host. A transport carries one command line
to it and brings the answer back: `unix_socket` where the socket is on this
machine, `shell_transport` anywhere a shell on the balancer host runs (a
deploy Target: a local root or SSH), through the host's bare python3.
"""

from __future__ import annotations

import csv
import io
import shlex
import socket
import time
from dataclasses import dataclass
from typing import Callable

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


# (socket path, command line, timeout in seconds) -> the answer's text;
# raises OSError when the socket cannot be reached.
Transport = Callable[[str, str, float], str]
# (shell command, timeout in seconds) -> (exit code, stdout, stderr)
Shell = Callable[[str, float], tuple[int, str, str]]


def unix_socket(path: str, line: str, timeout_s: float) -> str:
    """The socket on this machine."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(path)
        s.sendall(line.encode() + b"\n")
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


# What shell_transport runs on the balancer host (stdlib only, any python3):
# the command line as an argument (Fabric feeds stdin a byte at a time), the
# answer on stdout; an unreachable socket is exit 3 with the reason on
# stderr, so it reads as OSError here too.
_EXCHANGE = ("import socket,sys\n"
             "p,t,c=sys.argv[1],float(sys.argv[2]),sys.argv[3]\n"
             "try:\n"
             " s=socket.socket(socket.AF_UNIX);s.settimeout(t);s.connect(p)\n"
             " s.sendall(c.encode()+b'\\n');b=b''\n"
             " while d:=s.recv(65536):b+=d\n"
             "except OSError as e:\n"
             " sys.stderr.write(str(e));sys.exit(3)\n"
             "sys.stdout.write(b.decode(errors='replace'))\n")


def shell_transport(run: Shell, python: str = "python3") -> Transport:
    """A transport through a shell on the balancer host (one command per
    exchange: the socket answers one command per connection anyway)."""

    def exchange(path: str, line: str, timeout_s: float) -> str:
        code, out, err = run(shlex.join([python, "-E", "-s", "-c", _EXCHANGE, path, str(timeout_s), line]),
                             timeout_s + 30)
        if code != 0:
            raise OSError(err.strip() or f"exit {code}" + (f": {out.strip()[-200:]}" if out.strip() else ""))
        return out
    return exchange


class RuntimeAPI:
    def __init__(self, socket_path: str, timeout_s: float = 5.0, transport: Transport = unix_socket,
                 where: str | None = None):
        self.path, self.timeout_s, self.transport = socket_path, timeout_s, transport
        self.where = where or socket_path     # errors name it: host:path for a remote socket

    def command(self, line: str) -> str:
        try:
            answer = self.transport(self.path, line, self.timeout_s)
        except OSError as exc:
            raise DeployError(f"cannot talk to HAProxy's runtime API: {exc}", where=self.where,
                              hint="is haproxy running with this balancer.runtime_socket?") from None
        # Refusals read like "No such server." / "Require 'backend/server'." / "Unknown command".
        first = answer.strip().splitlines()[0] if answer.strip() else ""
        if first.startswith(("No such", "Require", "Unknown command", "Permission denied", "Invalid")):
            raise DeployError(f"HAProxy refused {line!r}: {first}", where=self.where)
        return answer

    def info(self) -> dict[str, str]:
        """`show info` of the worker that answered (Pid, Uptime_sec, ...)."""
        return dict(ln.split(": ", 1) for ln in self.command("show info").splitlines() if ": " in ln)

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
            raise DeployError(f"no engine host {name!r} behind the balancer", where=self.where)
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

    def wait_drained(self, name: str, timeout_s: float, poll_s: float = 0.05,
                     backends: tuple[str, ...] = BACKENDS) -> bool:
        """Until no connection to the host is open or queued in the given
        backends (True), or timeout_s passes (False)."""
        return _poll(lambda: all(s.sessions == 0 and s.queued == 0 for s in self.server(name)
                                 if s.backend in backends), timeout_s, poll_s)

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
