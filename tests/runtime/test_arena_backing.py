"""Arena backing on real memory: MAP_HUGETLB from a pool this test reserves,
the fallback and its reason when no hugepages are free, and mlock's reason
when the memlock limit forbids it. Needs root (writes /proc/sys/vm and
/sys/kernel/mm/hugepages, changes uid in a child); skips say why otherwise."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from engine.arena import Arena

from aie_testing import require_root

MIB, GIB = 1 << 20, 1 << 30


def _pool(page_kib: int) -> Path:
    return Path(f"/sys/kernel/mm/hugepages/hugepages-{page_kib}kB")


def _read(pool: Path, name: str) -> int:
    return int((pool / name).read_text())


@contextlib.contextmanager
def reserved_hugepages(count: int, page_kib: int = 2048):
    """Grow the hugepage pool by `count` pages, then shrink it by as many again.
    Relative both ways, so a concurrent change by someone else is not undone."""
    require_root()
    pool = _pool(page_kib)
    if not pool.exists():
        pytest.skip(f"kernel has no {page_kib} kB hugepage pool ({pool} missing)")
    before = _read(pool, "nr_hugepages")
    try:
        (pool / "nr_hugepages").write_text(str(before + count))
    except OSError as exc:
        pytest.skip(f"kernel refused to grow the {page_kib} kB hugepage pool: {exc}")
    try:
        got = _read(pool, "nr_hugepages") - before
        if got < count:
            pytest.skip(f"kernel reserved only {got} of {count} {page_kib} kB hugepages (memory fragmented)")
        yield pool
    finally:
        gc.collect()  # arenas and views from the block must be unmapped first
        now = _read(pool, "nr_hugepages")
        (pool / "nr_hugepages").write_text(str(max(0, now - count)))


def test_hugetlb_arena_takes_pages_from_the_pool():
    pages = 4
    with reserved_hugepages(pages) as pool:
        free_before = _read(pool, "free_hugepages")
        arena = Arena(pages * 2 * MIB, hugepages=True, name="huge")
        st = arena.stats()
        assert st["backing"] == "hugetlb-2M", st["backing_reason"]
        assert st["hugepage_bytes"] == st["reserved"] == pages * 2 * MIB
        assert st["page_size"] == 2 * MIB and st["backing_reason"] == ""
        # Prefaulted at creation: the pages left the free pool now, not at first touch.
        assert _read(pool, "free_hugepages") == free_before - pages
        meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        assert int(meminfo["HugePages_Free"]) == free_before - pages

        block = arena.alloc(3 * MIB)
        x = block.ndarray(np.float32)
        x[:] = np.random.default_rng(1).standard_normal(x.size)
        assert np.isfinite(x).all() and block.address % 64 == 0
        del x, block
        arena.close()
        del arena
        gc.collect()
        assert _read(pool, "free_hugepages") == free_before


def test_fallback_when_no_hugepages_are_free_says_why():
    pool = _pool(2048)
    if not pool.exists():
        pytest.skip("kernel has no 2 MiB hugepage pool")
    available = _read(pool, "free_hugepages") - _read(pool, "resv_hugepages")
    want = max(available, 0) + 1
    # prefault off: the fallback may be large when another test reserved a big pool.
    with Arena(want * 2 * MIB, hugepages=True, prefault=False, name="fallback") as arena:
        st = arena.stats()
    assert st["backing"] in ("thp", "normal") and st["hugepage_bytes"] == 0
    assert st["page_size"] == 4096 and st["hugepages_requested"]
    reason = st["backing_reason"]
    assert reason.startswith("no free 2 MiB hugepages: HugePages_Free="), reason
    assert f"need {want}" in reason


def test_one_gib_pages_when_the_kernel_can_reserve_one():
    if "pdpe1gb" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("CPU lacks pdpe1gb: no 1 GiB pages")
    with reserved_hugepages(1, page_kib=1 << 20):
        with Arena(256 * MIB, hugepages=True, page_size="1G", prefault=False) as arena:
            st = arena.stats()
        assert st["backing"] == "hugetlb-1G", st["backing_reason"]
        assert st["reserved"] == GIB  # rounded up to one page
        del arena
        gc.collect()


def test_mlock_success_and_failure_reason():
    require_root()  # root has CAP_IPC_LOCK: mlock succeeds whatever the limit
    with Arena("4M", hugepages=False, mlock=True) as arena:
        st = arena.stats()
    assert st["mlocked"] is True and st["mlock_reason"] == ""

    # Without CAP_IPC_LOCK (an unprivileged uid) and a 64 KiB limit, mlock must fail
    # and the arena still work, with the limit named in the reason.
    child = textwrap.dedent("""
        import json, os, resource
        from engine.arena import Arena, bucket_of
        bucket_of(1)  # loads the kernel library while still root: the venv may be root-only
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (65536, 65536))
        os.setgroups([]); os.setgid(65534); os.setuid(65534)
        with Arena("4M", hugepages=False, mlock=True) as a:
            a.alloc(1000)
            print(json.dumps(a.stats()))
    """)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    st = json.loads(proc.stdout)
    assert st["mlocked"] is False
    assert "mlock of 4194304 bytes failed" in st["mlock_reason"]
    assert "RLIMIT_MEMLOCK=65536 bytes" in st["mlock_reason"]
    assert st["live_allocations"] == 1
