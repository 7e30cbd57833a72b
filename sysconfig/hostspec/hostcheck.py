"""Checks that need the real host, run by live provision before anything is
applied: can this CPU and kernel do the hugepages the spec asks for, does
the machine have the memory, do the sysctl keys exist. `proc` and `sys`
point at another tree in tests."""

from __future__ import annotations

import re
from pathlib import Path

from hostspec.checks import missing_sysctls
from hostspec.errors import Problem
from hostspec.hugepages import hugepage_plan
from engine.units import format_size


def _cpu_flags(proc: Path) -> set[str] | None:
    """Flags of the first CPU in cpuinfo; None when cpuinfo has no x86 'flags' line."""
    try:
        text = (proc / "cpuinfo").read_text()
    except OSError:
        return None
    m = re.search(r"^flags\s*:\s*(.*)$", text, re.MULTILINE)
    return set(m.group(1).split()) if m else None


def _mem_total(proc: Path) -> int | None:
    try:
        text = (proc / "meminfo").read_text()
    except OSError:
        return None
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def check_host(spec, *, proc: Path = Path("/proc"), sys: Path = Path("/sys")) -> list[Problem]:
    """Every host problem of `spec` on this machine (errors)."""
    plan = hugepage_plan(spec)
    size_path = ("host", "hugepages", "size")
    problems: list[Problem] = []
    size = format_size(plan.page_size)
    if plan.page_size == 1 << 30:
        flags = _cpu_flags(proc)
        if flags is not None and "pdpe1gb" not in flags:
            problems.append(spec.problem(size_path, "this CPU cannot map 1G pages (no pdpe1gb flag in /proc/cpuinfo)",
                                         "use size: 2M"))
    hp_dir = sys / "kernel" / "mm" / "hugepages"
    if not problems and hp_dir.is_dir() and plan.page_size == 2 << 20:
        # 2M pages are offered at run time; 1G ones may appear only after hugepagesz=1G boots
        if not (hp_dir / f"hugepages-{plan.page_size // 1024}kB").is_dir():
            problems.append(spec.problem(size_path, f"this kernel offers no {size} hugepages ({hp_dir} lacks them)"))
    total = _mem_total(proc)
    reserve = plan.count * plan.page_size
    if total is not None and reserve > total:
        problems.append(spec.problem(("host", "hugepages", "count"),
                                     f"{plan.count} pages of {size} ({format_size(reserve)}) exceed this host's memory "
                                     f"({total // (1 << 20)} MiB MemTotal)", "lower the count or use auto"))
    node_dir = sys / "devices" / "system" / "node"
    if plan.per_node and node_dir.is_dir():
        for node in plan.per_node:
            if not (node_dir / f"node{node}").is_dir():
                problems.append(spec.problem(("host", "hugepages", "per_node", node),
                                             f"this host has no NUMA node {node}"))
    problems += missing_sysctls(spec.data, spec.origins, proc, "error")
    return problems
