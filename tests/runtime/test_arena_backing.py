"""Arena backing on real memory: MAP_HUGETLB from a pool this test reserves,
the fallback and its reason when no hugepages are free, and mlock's reason
when the memlock limit forbids it. Needs root (writes /proc/sys/vm and
/sys/kernel/mm/hugepages, changes uid in a child); skips say why otherwise."""

from __future__ import annotations

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

from aie_testing import hugepage_pool, read_pool, require_root, reserved_hugepages

MIB, GIB = 1 << 20, 1 << 30

def test_hugetlb_arena_takes_pages_from_the_pool():
    pages = 4
    with reserved_hugepages(pages) as pool:
        free_before = read_pool(pool, "free_hugepages")
        arena = Arena(pages * 2 * MIB, hugepages=True, name="huge")
        st = arena.stats()
        assert st["backing"] == "hugetlb-2M", st["backing_reason"]
        assert st["hugepage_bytes"] == st["reserved"] == pages * 2 * MIB
        assert st["page_size"] == 2 * MIB and st["backing_reason"] == ""
        # Prefaulted at creation: the pages left the free pool now, not at first touch.
        assert read_pool(pool, "free_hugepages") == free_before - pages
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
        assert read_pool(pool, "free_hugepages") == free_before


def test_fallback_when_no_hugepages_are_free_says_why():
    pool = hugepage_pool(2048)
    if not pool.exists():
        pytest.skip("kernel has no 2 MiB hugepage pool")
    available = read_pool(pool, "free_hugepages") - read_pool(pool, "resv_hugepages")
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


# ---- plan arenas (engine.arena.PLAN_ARENAS) as engine.arena's keys say ----------------
def _plan_at(sess, batch: int):
    sess.run(None, {"input": np.zeros((batch, 784), np.float32)})
    return next(p for p in sess.plans() if f"input [{batch}, 784]" in p.label)


def test_plan_arenas_take_hugepages_then_fall_back_and_count_it(zoo):
    from engine.arena import PLAN_ARENAS, ArenaPolicy, hugepage_fallbacks
    from engine.session import InferenceSession

    on = ArenaPolicy(hugepages=True, owner="mlp")
    with reserved_hugepages(4) as pool:  # 8 MiB: room for the first plan arena, not for the second
        sess = InferenceSession(zoo("mlp"), threads=1, arena=on)
        gc.collect()
        bytes_before, fallbacks_before = PLAN_ARENAS.bytes_by_backing(), hugepage_fallbacks()
        first = _plan_at(sess, 1024)
        assert first.arena_bytes >= 2 * MIB  # large enough for the allocator
        assert first.arena_backing == "hugetlb-2M", first.arena_backing
        charge = PLAN_ARENAS.charge_of(first.arena_bytes, on)
        assert PLAN_ARENAS.bytes_by_backing()["hugepage"] - bytes_before["hugepage"] == charge

        # Run out of hugepages on purpose: hold every page still free.
        free = read_pool(pool, "free_hugepages") - read_pool(pool, "resv_hugepages")
        holder = Arena(free * 2 * MIB, hugepages=True, prefault=False, name="holder") if free > 0 else None
        held_fallback = holder is not None and holder.stats()["hugepage_fallback"] != ""
        second = _plan_at(sess, 1000)
        assert second.arena_backing.startswith(("thp", "normal")), second.arena_backing
        assert "no free 2 MiB hugepages" in second.arena_backing
        got = hugepage_fallbacks()
        assert got["no_free_hugepages"] - fallbacks_before["no_free_hugepages"] == 1 + held_fallback
        assert got["unsupported"] == fallbacks_before["unsupported"]
        assert PLAN_ARENAS.bytes_by_backing()["4k"] - bytes_before["4k"] == PLAN_ARENAS.charge_of(
            second.arena_bytes, on)
        if holder is not None:
            holder.close()
        del holder, first, second, sess
        gc.collect()
        assert PLAN_ARENAS.bytes_by_backing() == bytes_before  # counted only while the plans exist

        # hugepages: false never asks the pool, so nothing falls back, free pages or not.
        off = InferenceSession(zoo("mlp"), threads=1, arena=ArenaPolicy(hugepages=False, owner="mlp"))
        plan = _plan_at(off, 1024)
        assert plan.arena_backing.startswith(("thp", "normal")) and "hugepages not requested" in plan.arena_backing
        assert hugepage_fallbacks() == got
        del plan, off
        gc.collect()


def test_mlocked_plan_arenas_are_locked_small_ones_too(zoo):
    from engine.arena import ArenaPolicy, stats_all
    from engine.session import InferenceSession

    require_root()  # CAP_IPC_LOCK: mlock succeeds whatever the limit
    sess = InferenceSession(zoo("mlp"), threads=1, arena=ArenaPolicy(hugepages=False, mlock=True, owner="mlp"))
    for batch in (1, 1024):
        plan = _plan_at(sess, batch)
        assert plan.arena_backing != "numpy", plan.arena_backing  # from the allocator, so it can be locked
        mine = [st for st in stats_all() if st["name"] == plan.label]
        assert len(mine) == 1 and mine[0]["mlocked"], mine
