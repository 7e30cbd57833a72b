"""gRPC's connections under limits.max_connections and
limits.max_connections_per_client, counted with HTTP's and the binary
protocol's in the one engine.server.clientlimits.ConnectionCaps.

grpc's core accepts and closes connections out of Python's sight. A
connection is seen when its first RPC arrives (its peer, address:port, is
new): it is admitted into the caps then, or every RPC it sends is refused
with RESOURCE_EXHAUSTED and the caps' reason. Its end is not reported
either, so when a cap is reached, before anyone is refused, the kernel's TCP
table of this network namespace (/proc/self/net/tcp, tcp6) is read and the
admitted peers no longer connected to the gRPC port give their places back
(ConnectionCaps.reclaim): a closed connection holds one for at most
RECLAIM_INTERVAL_S, the least time between two reads. A read holds the
event loop ~10 ms on the dev VM (the kernel walks its whole TCP hash table
for each file), so a refused client repeating its RPCs may cost the loop
2% at most, not a read per RPC. grpc's own
grpc.max_allowed_incoming_connections (the open-file cap) bounds the
descriptors refused connections hold until their clients or
limits.idle_timeout_s close them.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
import time
from pathlib import Path

from engine.server.clientlimits import ConnectionCaps
from engine.server.config import LimitsConfig

_ESTABLISHED = "01"   # include/net/tcp_states.h: TCP_ESTABLISHED, as /proc/net/tcp prints it
RECLAIM_INTERVAL_S = 0.5


def peer_key(peer: str) -> tuple[str, int] | None:
    """grpc's "ipv4:127.0.0.1:5000" / "ipv6:[::1]:5000" -> (address, port);
    None for peers that are not TCP (unix sockets: not counted)."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host, _, port = rest.rpartition(":")
    try:
        return _normal(host.strip("[]")), int(port)
    except ValueError:
        return None


def _normal(address: str) -> str:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped   # a dual-stack socket's IPv4 client, as grpc and HTTP name it
    return str(ip)


def _hex_address(text: str) -> str:
    """/proc/net/tcp's address: the kernel prints each 32-bit word of the
    network-order address as a host-order integer (%08X), so each word's
    bytes come back by writing that integer in this host's byte order."""
    words = b"".join(int(text[i:i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(text), 8))
    return _normal(socket.inet_ntop(socket.AF_INET if len(words) == 4 else socket.AF_INET6, words))


def connected_peers(port: int, proc_net: Path = Path("/proc/self/net")) -> set[tuple[str, int]]:
    """(address, port) of every client with an established TCP connection to
    local `port` in this process's network namespace."""
    peers = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc_net / table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue   # no IPv6 in this kernel
        for line in lines:
            fields = line.split()
            local, remote, state = fields[1], fields[2], fields[3]
            if state != _ESTABLISHED or int(local.rsplit(":", 1)[1], 16) != port:
                continue
            address, remote_port = remote.rsplit(":", 1)
            peers.add((_hex_address(address), int(remote_port, 16)))
    return peers


class GrpcConnections:
    """The gRPC peers admitted into `caps`. Touched from the event loop only."""

    def __init__(self, caps: ConnectionCaps):
        self.caps = caps
        self.port = 0                    # the gRPC port, once bound
        self._admitted: dict[tuple[str, int], str] = {}
        self._read_at = -RECLAIM_INTERVAL_S
        caps.reclaim = self.reclaim

    def admit(self, peer: str, limits: LimitsConfig) -> str | None:
        """None when the connection `peer` may send RPCs; else why not."""
        key = peer_key(peer)
        if key is None or key in self._admitted:
            return None
        refused = self.caps.admit(key[0], limits)
        if refused is None:
            self._admitted[key] = key[0]
        return refused

    def reclaim(self) -> None:
        """Give back the places of admitted connections that have closed."""
        now = time.monotonic()
        if not self._admitted or now - self._read_at < RECLAIM_INTERVAL_S:
            return
        self._read_at = now
        live = connected_peers(self.port)
        for key in [k for k in self._admitted if k not in live]:
            self.caps.release(self._admitted.pop(key))

    def __len__(self) -> int:
        return len(self._admitted)
