"""The live kernel layer against the real kernel: sysctl inside a network
namespace this test creates (net.* keys are per namespace, so the host's
values must not move), a small real hugepage reservation and the THP modes,
each restored in a finally."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from aie_testing import require_root
from provision_support import PYTHON, REPO

from hostspec import live_kernel
from hostspec.live_kernel import Knob, apply_knob, check_knob, hugepage_knobs, read_knob, sysctl_knobs, thp_knobs

PROC, SYS = Path("/proc"), Path("/sys")
NS_KEYS = {"net.core.somaxconn": "1357", "net.ipv4.tcp_fin_timeout": "17", "net.ipv4.ip_local_port_range": "20000 40000"}


def in_new_netns(code: str) -> dict:
    """Run python code in a fresh network namespace; it prints one JSON line."""
    require_root()
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed; cannot create a network namespace")
    done = subprocess.run(["unshare", "--net", PYTHON, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=60, cwd=REPO, check=False)
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip(f"kernel refused a new network namespace: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def host_values(keys) -> dict:
    return {k: live_kernel.normalize((PROC / live_kernel.sysctl_rel(k)).read_text()) for k in keys}


def test_sysctl_rel_follows_sysctl8_naming():
    assert live_kernel.sysctl_rel("net.core.somaxconn") == "sys/net/core/somaxconn"
    assert live_kernel.sysctl_rel("net.ipv4.conf.eth0/100.rp_filter") == "sys/net/ipv4/conf/eth0.100/rp_filter"


def test_sysctl_applied_and_read_back_inside_a_network_namespace():
    host_before = host_values(NS_KEYS)
    assert all(host_before[k] != v for k, v in NS_KEYS.items()), "pick test values that differ from the host's"
    out = in_new_netns(f"""
        import json
        from pathlib import Path
        from hostspec.live_kernel import apply_knob, check_knob, sysctl_knobs, read_knob
        proc, sys = Path("/proc"), Path("/sys")
        knobs = sysctl_knobs({NS_KEYS!r})
        drift = [check_knob(k, proc, sys).line() for k in knobs]
        applied = [apply_knob(k, proc, sys)[0].status for k in knobs]
        again = [apply_knob(k, proc, sys)[0].status for k in knobs]
        raw = {{k.name: Path("/proc", k.rel).read_text() for k in knobs}}
        print(json.dumps({{"drift": drift, "applied": applied, "again": again, "raw": raw}}))
    """)
    assert out["applied"] == ["changed"] * 3 and out["again"] == ["unchanged"] * 3
    assert {k: live_kernel.normalize(v) for k, v in out["raw"].items()} == NS_KEYS
    assert "\t" in out["raw"]["net.ipv4.ip_local_port_range"]  # the kernel's own spacing, compared by words
    assert f"    drift  sysctl    net.core.somaxconn: want 1357, have {host_before['net.core.somaxconn']}" in out["drift"]
    assert host_values(NS_KEYS) == host_before


def test_a_value_the_kernel_refuses_is_reported_failed():
    out = in_new_netns("""
        import json
        from pathlib import Path
        from hostspec.live_kernel import apply_knob, sysctl_knobs
        proc, sys = Path("/proc"), Path("/sys")
        (missing, bad) = sysctl_knobs({"net.ipv4.ip_local_port_range": "40000 20000", "net.core.no_such_knob": "1"})
        results = [apply_knob(k, proc, sys)[0] for k in (bad, missing)]
        print(json.dumps([[r.status, r.detail] for r in results]))
    """)
    (bad_status, bad_detail), (missing_status, missing_detail) = out
    assert bad_status == "failed" and bad_detail.startswith("kernel refused 40000 20000 (Invalid argument); still ")
    assert missing_status == "failed" and missing_detail == "/proc/sys/net/core/no_such_knob does not exist on this kernel"


def test_hugepage_sysctl_keys_are_left_to_the_hugepage_plan():
    knobs = sysctl_knobs({"vm.nr_hugepages": 64, "vm.swappiness": 1})
    assert [k.name for k in knobs] == ["vm.swappiness"]


def _restore(knob: Knob, value: str | None) -> None:
    if value is not None:
        live_kernel.write_knob(knob, value, PROC, SYS)


def test_real_hugepage_reservation_is_read_back_and_restored():
    require_root()
    (probe,) = hugepage_knobs("2M", 0, None, PROC)
    before = read_knob(probe, PROC, SYS)
    if before is None:
        pytest.skip("this kernel has no 2 MiB hugepage pool (/sys/kernel/mm/hugepages/hugepages-2048kB)")
    want = int(before) + 4
    (knob,) = hugepage_knobs(2 * 1024 * 1024, want, None, PROC)
    assert knob.name == "vm.nr_hugepages"  # 2 MiB is the default size on x86-64
    try:
        assert check_knob(knob, PROC, SYS).detail == f"want {want}, have {before}"
        result, seen = apply_knob(knob, PROC, SYS)
        if result.status == "failed":
            pytest.skip(f"kernel could not reserve 4 more 2 MiB pages: {result.detail}")
        assert (result.status, seen) == ("changed", before)
        assert int((PROC / "sys/vm/nr_hugepages").read_text()) == want
        assert check_knob(knob, PROC, SYS).status == "in-sync"
    finally:
        _restore(knob, before)
    assert read_knob(knob, PROC, SYS) == before


def test_real_per_node_reservation_uses_the_node_pool():
    require_root()
    node0 = SYS / "devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"
    if not node0.exists():
        pytest.skip(f"no NUMA node sysfs on this host ({node0} missing)")
    before = node0.read_text().strip()
    (knob,) = hugepage_knobs("2M", 0, {0: int(before) + 2}, PROC)
    assert knob.name == "node0 hugepages-2048kB"
    try:
        result, _ = apply_knob(knob, PROC, SYS)
        if result.status == "failed":
            pytest.skip(f"kernel could not reserve 2 more pages on node 0: {result.detail}")
        assert int(node0.read_text()) == int(before) + 2
    finally:
        _restore(knob, before)
    assert node0.read_text().strip() == before


def test_a_1g_reservation_reports_what_the_kernel_really_reserved():
    require_root()
    (knob,) = hugepage_knobs("1G", 0, None, PROC)
    before = read_knob(knob, PROC, SYS)
    if before is None:
        pytest.skip("this CPU/kernel has no 1 GiB hugepage pool (no pdpe1gb)")
    want = Knob(knob.kind, knob.name, knob.base, knob.rel, str(int(before) + 1))
    assert want.name == "hugepages-1048576kB/nr_hugepages"
    try:
        result, _ = apply_knob(want, PROC, SYS)
        got = read_knob(want, PROC, SYS)
        if got == want.want:
            assert result.status == "changed"
        else:  # fragmentation: the kernel found no free, aligned 1 GiB
            assert result.status == "failed"
            assert result.detail.startswith(f"kernel reserved {got} of {want.want} pages")
    finally:
        _restore(want, before)
    assert read_knob(want, PROC, SYS) == before


def test_real_thp_modes_are_set_and_restored():
    require_root()
    probe = thp_knobs("never", "never")
    paths = [k.path(PROC, SYS) for k in probe]
    if not all(p.exists() for p in paths):
        pytest.skip("no /sys/kernel/mm/transparent_hugepage on this kernel")
    import os

    if not all(os.access(p, os.W_OK) for p in paths):
        pytest.skip("/sys/kernel/mm/transparent_hugepage is read-only here (container?)")
    before = [read_knob(k, PROC, SYS) for k in probe]
    enabled = "never" if before[0] != "never" else "madvise"
    defrag = "defer" if before[1] != "defer" else "madvise"
    knobs = thp_knobs(enabled, defrag)
    try:
        results = [apply_knob(k, PROC, SYS)[0] for k in knobs]
        assert [r.status for r in results] == ["changed", "changed"]
        assert results[0].detail == f"{before[0]} -> {enabled}"
        assert f"[{enabled}]" in paths[0].read_text() and f"[{defrag}]" in paths[1].read_text()
    finally:
        for knob, value in zip(knobs, before):
            _restore(knob, value)
    assert [read_knob(k, PROC, SYS) for k in probe] == before


def test_cmdline_comparison_uses_the_running_kernel():
    running = (PROC / "cmdline").read_text().split()
    assert live_kernel.cmdline_missing(running[:2], PROC) == []
    assert live_kernel.cmdline_missing(["hugepages=987654"], PROC) == ["hugepages=987654"]


def test_sysctl_conf_parsing_matches_sysctl_d():
    text = "# comment\n; also\nnet.core.somaxconn = 65535\n-vm.swappiness=1\nnet.ipv4.ip_local_port_range = 1024\t65000\n"
    assert live_kernel.parse_sysctl_conf(text) == {
        "net.core.somaxconn": "65535", "vm.swappiness": "1", "net.ipv4.ip_local_port_range": "1024 65000"}
