"""What clients may hold of the server: buffered request bytes (one budget
shared by every connection) and open connections (in total and per client
address). Both protocols ask here before they buffer or accept, so memory
and file descriptors are bounded by the configuration, not by the clients.

Touched only from the event-loop thread, so no locks.
"""

from __future__ import annotations

import resource
import time

from engine.server.config import LimitsConfig

FD_RESERVE = 64          # descriptors kept for model files, logs, the listeners and SIGHUP reloads
REFUSAL_LOG_INTERVAL_S = 1.0  # one log line per second at most, with the count since the last


class ByteBudget:
    """Request bytes held in memory, server-wide."""

    def __init__(self):
        self.used = 0

    def reserve(self, nbytes: int, limits: LimitsConfig) -> bool:
        if self.used + nbytes > limits.max_buffered_bytes:
            return False
        self.used += nbytes
        return True

    def release(self, nbytes: int) -> None:
        self.used -= nbytes


def fd_connection_cap() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(1, soft - FD_RESERVE) if soft != resource.RLIM_INFINITY else 1 << 30


class ConnectionCaps:
    """Counts open connections; `admit` says why one is refused, or None."""

    def __init__(self, logger):
        self.logger = logger
        self.total = 0
        self.per_client: dict[str, int] = {}
        self._fd_cap = fd_connection_cap()
        self._refused = 0
        self._last_log = 0.0
        # Called at a cap before refusing: a protocol that learns late that its
        # connections closed (gRPC: engine.server.grpc_connections) gives their places back.
        self.reclaim = None

    def admit(self, address: str, limits: LimitsConfig) -> str | None:
        cap = min(limits.max_connections, self._fd_cap)
        if self.reclaim is not None and (self.total >= cap or self.per_client.get(address, 0)
                                         >= limits.max_connections_per_client):
            self.reclaim()
        if self.total >= cap:
            why = (f"{self.total} connections open, the limit is {cap} (limits.max_connections "
                   f"{limits.max_connections}, open-file limit less {FD_RESERVE}: {self._fd_cap})")
        elif self.per_client.get(address, 0) >= limits.max_connections_per_client:
            why = (f"{self.per_client[address]} connections open from {address}, the limit is "
                   f"{limits.max_connections_per_client} (limits.max_connections_per_client)")
        else:
            self.total += 1
            self.per_client[address] = self.per_client.get(address, 0) + 1
            return None
        self._log_refusal(address, why)
        return why

    def release(self, address: str) -> None:
        self.total -= 1
        left = self.per_client[address] - 1
        if left:
            self.per_client[address] = left
        else:
            del self.per_client[address]

    def _log_refusal(self, address: str, why: str) -> None:
        # A flood of connections must not become a flood of log lines.
        self._refused += 1
        now = time.monotonic()
        if now - self._last_log >= REFUSAL_LOG_INTERVAL_S:
            self.logger.warning("connection_refused", client=address, reason=why, refused=self._refused)
            self._refused = 0
            self._last_log = now
