"""engine.arena on normal pages: buckets, alignment, accounting, fragmentation,
clear errors, view lifetime, threads and the `ai-engine arena-dump` command.
(MAP_HUGETLB, fallback reasons and mlock: test_arena_backing.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from aie_testing import run_concurrently
from engine.arena import Arena, ArenaError, ArenaExhausted, bucket_of, parse_size, stats_all

KIB, MIB = 1 << 10, 1 << 20


@pytest.fixture
def arena():
    with Arena("8M", hugepages=False, name="test") as a:
        yield a


def test_bucket_classification_matches_the_issue():
    assert [bucket_of(n) for n in (0, 1, 4096)] == [0, 0, 0]
    assert [bucket_of(n) for n in (4097, 64 * KIB)] == [1, 1]
    assert [bucket_of(n) for n in (64 * KIB + 1, MIB)] == [2, 2]
    assert [bucket_of(n) for n in (MIB + 1, 1 << 40)] == [3, 3]


def test_blocks_are_aligned_disjoint_and_writable(arena):
    rng = np.random.default_rng(0)
    sizes = [1, 63, 64, 65, 4096, 4097, 65536, 100_000, MIB + 1, 2 * MIB]
    blocks = [arena.alloc(n) for n in sizes]
    for i, (b, n) in enumerate(zip(blocks, sizes)):
        assert b.address % 64 == 0 and b.offset % 64 == 0
        assert 0 < b.offset < arena.size and b.offset + n <= arena.size
        b.ndarray(np.uint8)[:] = i
    for i, b in enumerate(blocks):
        assert (b.ndarray(np.uint8) == i).all(), f"block {i} overwritten by a neighbour"
    spans = sorted((b.offset, b.offset + b.nbytes) for b in blocks)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))

    x = arena.alloc(4 * 7 * 9).ndarray(np.float32, (7, 9))
    values = rng.standard_normal((7, 9)).astype(np.float32)
    x[...] = values
    np.testing.assert_array_equal(x, values)
    with pytest.raises(ArenaError, match="needs 400 bytes, block has 252"):
        arena.alloc(252).ndarray(np.float32, (10, 10))


def test_accounting_and_coalescing(arena):
    sizes = [100, 5000, 70_000, 3 * MIB]
    blocks = [arena.alloc(n) for n in sizes]
    st = arena.stats()
    assert st["live_allocations"] == 4 and st["requested"] == sum(sizes)
    assert [b["live_blocks"] for b in st["buckets"]] == [1, 1, 1, 1]
    # 64-byte header + payload rounded up to 64 bytes per block.
    assert st["in_use"] == sum(-(-n // 64) * 64 + 64 for n in sizes)
    assert st["in_use"] + st["free"] == st["reserved"] == 8 * MIB
    for b in blocks:
        b.free()
    st = arena.stats()
    assert st["in_use"] == 0 and st["live_allocations"] == 0
    assert st["peak_in_use"] >= 3 * MIB
    assert st["buckets"][3]["free_blocks"] == 1 and st["largest_free"] == 8 * MIB - 64
    assert st["fragmentation"] == 0.0


def test_fragmentation_ratio_is_as_defined(arena):
    blocks = []
    with pytest.raises(ArenaExhausted):
        while len(blocks) < 1000:
            blocks.append(arena.alloc(32 * KIB))
    for b in blocks[::2]:
        b.free()
    st = arena.stats()
    free_payload = sum(b["free_bytes"] for b in st["buckets"])
    assert st["fragmentation"] == pytest.approx(1 - st["largest_free"] / free_payload)
    assert st["fragmentation"] > 0.95
    assert st["buckets"][1]["free_blocks"] >= len(blocks) // 2 - 1   # 32 KiB holes: 4K-64K bucket
    with pytest.raises(ArenaExhausted, match=r"arena exhausted: requested 1048576 bytes, largest free block \d+"):
        arena.alloc(MIB)
    for b in blocks[1::2]:
        b.free()
    assert arena.stats()["fragmentation"] == 0.0
    arena.alloc(MIB)  # usable again after the failures


def test_exhaustion_is_a_clear_error_not_a_crash(arena):
    with pytest.raises(ArenaExhausted) as exc:
        arena.alloc(9 * MIB)
    assert "requested 9437184 bytes, more than the 8388608 reserved" in str(exc.value)
    assert "test:" in str(exc.value) and isinstance(exc.value, MemoryError)
    whole = arena.alloc(8 * MIB - 64)
    with pytest.raises(ArenaExhausted, match="largest free block 0 bytes, 0 of 8388608 reserved bytes free"):
        arena.alloc(1)
    assert arena.stats()["failed_allocations"] == 2
    whole.free()


def test_bad_frees_and_arguments_are_rejected(arena):
    block = arena.alloc(256)
    block.free()
    with pytest.raises(ArenaError, match="not a live allocation"):
        block.free()
    with Arena("2M", hugepages=False) as other:
        foreign = other.alloc(64)
        with pytest.raises(ArenaError, match="was not allocated from this arena"):
            arena.free(foreign)
    for bad in (-1, 1.5, "12", True):
        with pytest.raises(ArenaError, match="nbytes must be a non-negative int"):
            arena.alloc(bad)
    for size, message in ((0, "must be > 0 bytes"), ("12Q", "'12Q' is not a size"), (None, "must be bytes")):
        with pytest.raises(ArenaError, match=message):
            Arena(size, hugepages=False)
    with pytest.raises(ArenaError, match="page_size '4K' not supported"):
        Arena("4M", page_size="4K")
    assert parse_size("2MiB") == 2 * MIB and parse_size("1G") == 1 << 30 and parse_size(4096) == 4096


def test_views_keep_memory_alive_after_close_and_registry_tracks_open_arenas():
    a = Arena("4M", hugepages=False, name="short-lived")
    assert any(s["name"] == "short-lived" for s in stats_all())
    x = a.alloc(1024).ndarray(np.float32)
    x[:] = np.arange(256, dtype=np.float32)
    a.close()
    assert a.closed and not any(s["name"] == "short-lived" for s in stats_all())
    np.testing.assert_array_equal(x, np.arange(256, dtype=np.float32))  # mapping still there
    with pytest.raises(ArenaError, match="arena is closed"):
        a.alloc(16)


def test_not_requesting_hugepages_is_recorded():
    with Arena("4M", hugepages=False) as a:
        st = a.stats()
    assert st["backing"] in ("thp", "normal") and st["hugepage_bytes"] == 0
    assert st["backing_reason"].startswith("hugepages not requested")
    assert st["mlocked"] is False and st["mlock_reason"] == "mlock not requested"
    assert int(st["base_address"], 16) % (2 * MIB) == 0  # THP needs 2 MiB-aligned extents


def test_concurrent_alloc_and_free(arena):
    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(100):
            blocks = [arena.alloc(int(n)) for n in rng.integers(1, 20_000, 16)]
            for i, b in enumerate(blocks):
                b.ndarray(np.uint8)[:] = seed * 16 + i
            for i, b in enumerate(blocks):
                assert (b.ndarray(np.uint8) == seed * 16 + i).all()
                b.free()

    run_concurrently(work, 4, timeout=60)
    st = arena.stats()
    assert st["in_use"] == 0 and st["total_allocations"] == 4 * 100 * 16


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.cli", "arena-dump", *args],
                          capture_output=True, text=True, env=dict(os.environ), timeout=60)


def test_arena_dump_command():
    proc = _cli("--size", "4M", "--no-hugepages", "--json")
    assert proc.returncode == 0, proc.stderr
    st = json.loads(proc.stdout)
    assert st["reserved"] == 4 * MIB and st["backing_reason"].startswith("hugepages not requested")
    assert [b["bucket"] for b in st["buckets"]] == ["<=4K", "4K-64K", "64K-1M", ">1M"]

    text = _cli("--size", "4M", "--no-hugepages")
    assert text.returncode == 0 and "fragmentation" in text.stdout and "bucket >1M" in text.stdout

    bad = _cli("--size", "lots")
    assert bad.returncode == 1
    assert bad.stderr.strip() == ("ai-engine arena-dump: error: size 'lots' is not a size "
                                  "(expected e.g. 4096, '64K', '256M', '1G')")


def test_arena_size_bounds_the_plan_arenas_naming_model_shape_and_numbers(zoo, tmp_path, monkeypatch):
    import gc

    from engine.arena import PLAN_ARENAS, ArenaLimitExceeded, ArenaPolicy
    from engine.convert import convert_file
    from engine.session import InferenceSession

    policy = ArenaPolicy(hugepages=False, owner="mlp")
    model = tmp_path / "mlp.aie"
    convert_file(zoo("mlp"), model)  # records the arena of the batch-1 plan
    gc.collect()
    held = PLAN_ARENAS.used()  # other tests' plans still alive in this process
    sess = InferenceSession(model, threads=1, arena=policy)
    x = np.zeros((1024, 784), np.float32)
    sess.run(None, {"input": x})
    gc.collect()  # plans built while folding constants are gone
    one = PLAN_ARENAS.charge_of(sess.plans()[0].arena_bytes, policy)
    assert PLAN_ARENAS.used() == held + one

    # Room for exactly the plan arena that exists: a second shape is refused, with what and why.
    monkeypatch.setattr(PLAN_ARENAS, "limit", held + one)
    with pytest.raises(ArenaLimitExceeded) as err:
        sess.run(None, {"input": x[:1000]})
    msg = str(err.value)
    assert msg.startswith("model 'mlp', input [1000, 784]: a plan arena of "), msg
    assert f"over engine.arena.size = {held + one} bytes ({held + one} bytes held by " in msg, msg
    assert "(raise engine.arena.size" in msg
    assert sess.run(None, {"input": x})[0].shape == (1024, 10)  # the existing plan still runs

    # Plans that go free their arenas: the budget comes back.
    del sess, err  # the error's traceback holds the session's frames too
    gc.collect()
    assert PLAN_ARENAS.used() == held
    other = InferenceSession(model, threads=1, arena=policy)
    other.run(None, {"input": x[:1000]})

    # A shape planned at conversion that alone is over the limit fails the load.
    monkeypatch.setattr(PLAN_ARENAS, "limit", 1024)
    with pytest.raises(ArenaLimitExceeded) as err:
        InferenceSession(model, threads=1, arena=policy)
    assert str(err.value).startswith("model 'mlp', input [1, 784] (planned at conversion): its plan arena takes ")
    assert "more than engine.arena.size = 1024 bytes" in str(err.value)


def test_arena_dump_into_a_closed_pipe_exits_quietly():
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before a byte is written: `| head` that already quit
    try:
        proc = subprocess.run([sys.executable, "-m", "engine.cli", "arena-dump", "--size", "4M", "--no-hugepages",
                               "--json"], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
