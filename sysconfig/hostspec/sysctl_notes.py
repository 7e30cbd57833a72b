"""One-line meaning and unit of common sysctl keys, written as the comment
above each key in 90-ai-engine.conf (TuneD style). Sources: the kernel's
Documentation/admin-guide/sysctl/{vm,net}.rst and networking/ip-sysctl.rst."""

from __future__ import annotations

NOTES = {
    "net.core.somaxconn": "listen() backlog cap per socket (connections); the kernel default 4096 drops bursts",
    "net.core.netdev_max_backlog": "packets queued per CPU when the NIC outruns the kernel (packets)",
    "net.core.rmem_max": "largest socket receive buffer an application may set (bytes)",
    "net.core.wmem_max": "largest socket send buffer an application may set (bytes)",
    "net.ipv4.tcp_fin_timeout": "time an orphaned connection stays in FIN-WAIT-2 (seconds)",
    "net.ipv4.tcp_tw_reuse": "reuse TIME-WAIT sockets for new outgoing connections (0/1; breaks clients behind NAT)",
    "net.ipv4.tcp_max_syn_backlog": "half-open connections remembered per listener (connections)",
    "net.ipv4.tcp_keepalive_time": "idle time before the first keep-alive probe (seconds)",
    "net.ipv4.tcp_rmem": "TCP receive buffer min, default, max (bytes)",
    "net.ipv4.tcp_wmem": "TCP send buffer min, default, max (bytes)",
    "net.ipv4.tcp_slow_start_after_idle": "restart congestion window after idle (0/1)",
    "net.ipv4.ip_local_port_range": "ephemeral port range (first last)",
    "vm.swappiness": "preference for swapping anonymous memory over dropping page cache (0-200)",
    "vm.nr_hugepages": "persistent hugepages of the default size to reserve (pages)",
    "vm.overcommit_memory": "overcommit policy (0 heuristic, 1 always, 2 never)",
    "vm.max_map_count": "memory mappings per process (mappings)",
    "vm.dirty_ratio": "dirty page cache at which writers block (percent of memory)",
    "vm.dirty_background_ratio": "dirty page cache at which background writeback starts (percent of memory)",
    "vm.zone_reclaim_mode": "reclaim on the local NUMA node before allocating remotely (bitmask; 0 = off)",
    "kernel.numa_balancing": "automatic NUMA page migration (0/1)",
    "kernel.sched_autogroup_enabled": "group tasks by session for fairness (0/1)",
    "fs.file-max": "open files system-wide (files)",
}


# Every key in NOTES takes integers: one, or this many separated by spaces.
INTEGER_FIELDS = {"net.ipv4.tcp_rmem": 3, "net.ipv4.tcp_wmem": 3, "net.ipv4.ip_local_port_range": 2}
# Keys whose value is free text with spaces (a pipe to a core handler and its arguments).
FREE_TEXT = frozenset({"kernel.core_pattern"})


def integer_fields(key: str) -> int | None:
    """How many integers `key` takes, when this table knows the key."""
    return INTEGER_FIELDS.get(key, 1) if key in NOTES else None


def note(key: str) -> str:
    return NOTES.get(key, "site setting from host.sysctl (see the kernel's sysctl documentation)")
