"""How many model instances to run and how many intra-op threads each gets.

Definitions (engine.yaml writes 0 for the spec's `auto`):
- usable cores U: CPUs in this process's affinity mask (what systemd's
  CPUAffinity= or taskset leaves us), not the machine's count.
- core group: the usable CPUs of one NUMA node (nodes with none are skipped);
  one group when the topology is not readable (/sys absent, containers).
- engine threads T: engine.threads, or U when 0.
- instances, when 0: one per core group -- or, when the model sets `threads`
  t, max(1, T // t): as many t-thread instances as the engine threads hold.
- threads per instance, when 0: max(1, T // instances).

Instances run batches concurrently (one executor thread each). Their
intra-op threads come from the kernels' one process-wide pool, whose parallel
calls serialise, so instances with threads > 1 interleave kernel by kernel;
threads = 1 instances run fully in parallel (the pool is bypassed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_NODES = Path("/sys/devices/system/node")


@dataclass(frozen=True)
class Placement:
    instances: int
    threads: int            # intra-op threads per instance


def usable_cores() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return set(range(os.cpu_count() or 1))


def parse_cpulist(text: str) -> set[int]:
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11} (the kernel's cpulist format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def core_groups(usable: set[int], nodes_dir: Path = _NODES) -> list[set[int]]:
    """The usable CPUs of each NUMA node that has any; [usable] if unknown."""
    groups = []
    try:
        for node in sorted(nodes_dir.glob("node[0-9]*")):
            cpus = parse_cpulist((node / "cpulist").read_text()) & usable
            if cpus:
                groups.append(cpus)
    except (OSError, ValueError):
        groups = []
    return groups or [set(usable)]


def plan(instances: int, threads: int, engine_threads: int, *, usable: int, groups: int) -> Placement:
    """Resolve a model's `instances` and `threads` (0 = auto) as the module
    docstring defines; `usable` and `groups` are U and the group count."""
    total = engine_threads or usable
    if not instances:
        instances = max(1, total // threads) if threads else max(1, groups)
    if not threads:
        threads = max(1, total // instances)
    return Placement(instances, threads)


def place(instances: int, threads: int, engine_threads: int) -> Placement:
    """plan() for this process's CPUs."""
    cores = usable_cores()
    return plan(instances, threads, engine_threads, usable=len(cores), groups=len(core_groups(cores)))
