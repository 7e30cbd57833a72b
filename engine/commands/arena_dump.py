"""`ai-engine arena-dump`: create an arena as the engine would and print its
backing (hugetlb / THP / normal, and why), mlock state and statistics.

It shows what this host gives an arena of that size right now: whether
hugepages are reserved and free, whether mlock is allowed. A running
server's arenas are reported on its /health endpoint (engine.arena.stats_all()),
not here: another process's arena is not readable from outside it.
"""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", default="256M", help="arena size: bytes or e.g. 64M, 1G (default: 256M, the spec default)")
    parser.add_argument("--hugepages", action=argparse.BooleanOptionalAction, default=True,
                        help="try MAP_HUGETLB pages first (default: on)")
    parser.add_argument("--page-size", default="2M", choices=["2M", "1G"], help="hugepage size (default: 2M)")
    parser.add_argument("--mlock", action="store_true", help="mlock the arena and report whether that worked")
    parser.add_argument("--no-prefault", dest="prefault", action="store_false",
                        help="do not touch every page at creation (faster for huge sizes; RSS stays low)")
    parser.add_argument("--json", action="store_true", help="print the statistics as JSON")


def _mib(n: int) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    return f"{n / (1 << 10):.1f} KiB" if n >= 1 << 10 else f"{n} B"


def run(args: argparse.Namespace) -> int:
    from engine.arena import Arena

    with Arena(args.size, hugepages=args.hugepages, mlock=args.mlock, page_size=args.page_size,
               prefault=args.prefault, name="arena-dump") as arena:
        st = arena.stats()
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    rows = [
        ("backing", st["backing"] + (f"  ({st['backing_reason']})" if st["backing_reason"] else "")),
        ("reserved", f"{_mib(st['reserved'])} in {_mib(st['page_size'])} pages"),
        ("hugepage-backed", f"{_mib(st['hugepage_bytes'])} hugetlb, {_mib(st['thp_bytes'])} THP"),
        ("mlocked", "yes" if st["mlocked"] else f"no ({st['mlock_reason']})"),
        ("prefaulted", "yes" if st["prefaulted"] else "no"),
        ("in use / peak", f"{_mib(st['in_use'])} / {_mib(st['peak_in_use'])}"),
        ("free (largest)", f"{_mib(st['free'])} ({_mib(st['largest_free'])})"),
        ("fragmentation", f"{st['fragmentation']:.3f}"),
    ]
    rows += [(f"bucket {b['bucket']}", f"{b['free_blocks']} free blocks, {_mib(b['free_bytes'])}; "
              f"{b['live_blocks']} live") for b in st["buckets"]]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0
