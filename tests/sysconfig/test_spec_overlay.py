"""Overlays (base + site files), units, the hugepage plan and host checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostspec.hostcheck import check_host
from hostspec.hugepages import hugepage_plan
from hostspec.loader import DEFAULT_SPEC, load_spec
from engine.units import UnitError, format_size, parse_duration, parse_percent, parse_size
from spec_support import in_tmp, problems, write  # noqa: F401 (in_tmp is a fixture)


def test_overlay_merges_maps_replaces_lists_and_later_wins(in_tmp):
    base = write(in_tmp, "base.yaml", """
        version: 1
        host:
          sysctl: {vm.swappiness: 1, net.core.somaxconn: 1024}
          kernel_cmdline: [isolcpus=2-7, nohz_full=2-7]
        engine:
          models:
            - {name: a, source: a.onnx}
            - {name: b, source: b.onnx}
        """)
    site = write(in_tmp, "site.yaml", """
        host:
          sysctl: {net.core.somaxconn: 4096}
          kernel_cmdline: [isolcpus=4-7]
        engine:
          models:
            - {name: c, source: c.onnx}
        """)
    spec = load_spec([base, site])
    assert spec.data["host"]["sysctl"] == {"net.core.somaxconn": 4096, "vm.swappiness": 1}
    assert spec.data["host"]["kernel_cmdline"] == ["isolcpus=4-7"]
    assert [m["name"] for m in spec.data["engine"]["models"]] == ["c"]
    assert spec.sources == (in_tmp / "base.yaml", in_tmp / "site.yaml")
    assert spec.where(("host", "sysctl", "net.core.somaxconn")) == ("site.yaml", 2)
    assert spec.where(("host", "sysctl", "vm.swappiness")) == ("base.yaml", 3)
    assert spec.data["engine"]["models"][0]["source"] == str(in_tmp / "c.onnx")


@pytest.mark.parametrize("files,expected", [
    pytest.param({"base.yaml": "version: 1\nengine:\n  http_port: 8000\n",
                  "site.yaml": "engine:\n  http_port: 99999\n  arena: {sise: 1G}\n"}, [
        "site.yaml:2: engine.http_port: out of range: 99999 is greater than the maximum 65535",
        "site.yaml:3: engine.arena.sise: unknown key (did you mean 'size'?)",
    ], id="problems_point_into_the_file_that_set_the_value"),
    pytest.param({"a.yaml": "", "b.yaml": "version: 1\nversion: 1\n"}, [
        "a.yaml:1: empty file (a spec starts with 'version: 1')",
        "b.yaml:2: version: duplicate key (first defined on line 1) (YAML keeps only one of them; delete the other)",
    ], id="problems_of_several_files_are_all_reported"),
])
def test_problems_of_overlaid_files(in_tmp, files, expected):
    assert problems(*(write(in_tmp, name, text) for name, text in files.items())) == expected


def test_digest_is_canonical_and_tracks_content(in_tmp):
    a = write(in_tmp, "a.yaml", "version: 1\nengine: {http_port: 9000, binary_port: 9001}\n")
    b = write(in_tmp, "b.yaml", "engine: {binary_port: 9001, http_port: 9000}\nversion: 1\n")
    c = write(in_tmp, "c.yaml", "version: 1\nengine: {http_port: 9000, binary_port: 9002}\n")
    assert load_spec([a]).digest == load_spec([b]).digest != load_spec([c]).digest
    assert len(load_spec([a]).digest) == 64


def test_default_spec_loads_cleanly():
    spec = load_spec()
    assert spec.sources == (DEFAULT_SPEC,)
    assert spec.data["host"]["sysctl"]["net.core.somaxconn"] == 65535
    assert spec.data["service"]["cpu_quota"] == 800


@pytest.mark.parametrize("text,expected", [("4G", 4 << 30), ("512M", 512 << 20), ("1.5T", 3 << 39), ("64K", 65536),
                                           ("2M", 2 << 20), (7, 7), ("0", 0), ("2MiB", 2 << 20)])
def test_parse_size(text, expected):
    assert parse_size(text, where="x") == expected


@pytest.mark.parametrize("bad,message", [
    ("2m", "x: bad size '2m': expected a size like 512M, 4G or 1.5T (K, M, G, T = 1024-based) or a whole number of bytes"),
    ("4GB", "x: bad size '4GB': expected a size like 512M, 4G or 1.5T (K, M, G, T = 1024-based) or a whole number of bytes"),
    (True, "x: expected a size like 512M, 4G or 1.5T (K, M, G, T = 1024-based) or a whole number of bytes, got bool True"),
    (-5, "x: size must not be negative, got -5"),
    ("1.1K", "x: bad size '1.1K': not a whole number of bytes (1126.4)"),
])
def test_parse_size_errors_say_what_was_expected(bad, message):
    with pytest.raises(UnitError) as info:
        parse_size(bad, where="x")
    assert str(info.value) == message


def test_durations_percentages_and_format_size():
    assert [parse_duration(v, where="d") for v in ("500ms", "10s", "2min", "1h", 3, "1.5")] == [0.5, 10, 120, 3600, 3, 1.5]
    assert parse_percent("800%", where="p") == 800 and parse_percent("12.5%", where="p") == 12.5
    with pytest.raises(UnitError, match="bad duration '10 sec'"):
        parse_duration("10 sec", where="d")


def test_format_size_is_the_shortest_exact_spelling():
    assert format_size(2 << 20) == "2M"
    assert format_size(1 << 30) == "1G"
    assert format_size(3 << 39) == "1536G"
    assert format_size(1536) == "1536"
    assert format_size(1000) == "1000"


def test_hugepage_plan_auto_counts_arena_models_and_headroom(in_tmp):
    f = write(in_tmp, "spec.yaml", """
        version: 1
        host:
          hugepages: {count: auto, headroom: 50%}
        engine:
          arena: {size: 100M}
          models:
            - {name: a, source: a.onnx, memory: 20M}
            - {name: b, source: b.onnx}
        """)
    plan = hugepage_plan(load_spec([f]))
    # (100M + 20M) * 1.5 = 180M = 90 pages of 2M; the engine itself maps 60
    assert (plan.page_size, plan.count, plan.need_pages, plan.per_node) == (2 << 20, 90, 60, {})
    assert plan.reason == "auto: arena 100M + a 20M = 120M, + 50% headroom, in 2M pages = 90"


def test_hugepage_plan_rounds_up_and_honours_per_node(in_tmp):
    f = write(in_tmp, "spec.yaml", "version: 1\nhost:\n  hugepages: {count: auto, headroom: 0%}\nengine:\n  arena: {size: 3M}\n")
    assert hugepage_plan(load_spec([f])).count == 2
    g = write(in_tmp, "g.yaml", "version: 1\nhost:\n  hugepages: {size: 1G, count: 4, per_node: {1: 2, 0: 2}}\n")
    plan = hugepage_plan(load_spec([g]))
    assert (plan.page_size, plan.count, plan.per_node) == (1 << 30, 4, {0: 2, 1: 2})
    assert list(plan.per_node) == [0, 1]
    h = write(in_tmp, "h.yaml", "version: 1\nhost:\n  hugepages: {count: auto}\nengine:\n  arena: {hugepages: false}\n")
    assert hugepage_plan(load_spec([h])).count == 0


def _fake_host(root: Path, *, flags: str, mem_kb: int, sysctls=("vm/swappiness",), nodes=(0,)) -> tuple[Path, Path]:
    proc, sys = root / "proc", root / "sys"
    (proc / "sys").mkdir(parents=True)
    (proc / "cpuinfo").write_text(f"processor\t: 0\nflags\t\t: {flags}\n\n")
    (proc / "meminfo").write_text(f"MemTotal:       {mem_kb} kB\nMemFree:        1000 kB\n")
    for key in sysctls:
        (proc / "sys" / key).parent.mkdir(parents=True, exist_ok=True)
        (proc / "sys" / key).write_text("1\n")
    (sys / "kernel/mm/hugepages/hugepages-2048kB").mkdir(parents=True)
    for n in nodes:
        (sys / f"devices/system/node/node{n}").mkdir(parents=True)
    return proc, sys


def test_check_host_reports_1g_without_pdpe1gb_and_too_big_reservations(in_tmp):
    f = write(in_tmp, "spec.yaml", """
        version: 1
        host:
          hugepages:
            size: 1G
            count: 8
            per_node: {0: 4, 3: 4}
          sysctl: {vm.swappiness: 1, net.core.somaxconn: 4096}
        """)
    proc, sys = _fake_host(in_tmp / "h", flags="fpu sse2 avx2", mem_kb=4 * 1024 * 1024)
    spec = load_spec([f], proc=proc)
    assert [str(w) for w in spec.warnings] == [
        f"spec.yaml:7: host.sysctl.net.core.somaxconn: warning: no such sysctl on this kernel "
        f"({proc}/sys/net/core/somaxconn is missing) (check the spelling, or the module that provides it)"]
    assert [str(p) for p in check_host(spec, proc=proc, sys=sys)] == [
        "spec.yaml:4: host.hugepages.size: this CPU cannot map 1G pages (no pdpe1gb flag in /proc/cpuinfo) (use size: 2M)",
        "spec.yaml:5: host.hugepages.count: 8 pages of 1G (8G) exceed this host's memory (4096 MiB MemTotal) "
        "(lower the count or use auto)",
        "spec.yaml:6: host.hugepages.per_node[3]: this host has no NUMA node 3",
        f"spec.yaml:7: host.sysctl.net.core.somaxconn: no such sysctl on this kernel ({proc}/sys/net/core/somaxconn "
        f"is missing) (check the spelling, or the module that provides it)",
    ]


def test_check_host_passes_on_a_capable_host(in_tmp):
    f = write(in_tmp, "spec.yaml", "version: 1\nhost:\n  hugepages: {size: 1G, count: 2}\n  sysctl: {vm.swappiness: 1}\n")
    proc, sys = _fake_host(in_tmp / "h", flags="fpu pdpe1gb avx2", mem_kb=16 * 1024 * 1024)
    assert check_host(load_spec([f], proc=proc), proc=proc, sys=sys) == []


def test_check_host_on_this_machine_runs_the_default_spec():
    """The real /proc and /sys: the default spec's keys exist on any Linux with networking."""
    problems = check_host(load_spec())
    assert all(p.path.startswith("host.") for p in problems), problems
