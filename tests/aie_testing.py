"""Helpers shared by tests in several folders (imported by name: a module
called `conftest` would be ambiguous, every folder may have one)."""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import threading
import time
from pathlib import Path

import pytest


def require_root() -> None:
    """Skip (with the reason printed) when a test needs root."""
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, sysctl, hugepages); run as root to cover this")


def hugepage_pool(page_kib: int = 2048) -> Path:
    return Path(f"/sys/kernel/mm/hugepages/hugepages-{page_kib}kB")


def read_pool(pool: Path, name: str) -> int:
    return int((pool / name).read_text())


@contextlib.contextmanager
def reserved_hugepages(count: int, page_kib: int = 2048):
    """Grow the hugepage pool by `count` pages, then shrink it by as many again.
    Relative both ways, so a concurrent change by someone else is not undone."""
    require_root()
    pool = hugepage_pool(page_kib)
    if not pool.exists():
        pytest.skip(f"kernel has no {page_kib} kB hugepage pool ({pool} missing)")
    before = read_pool(pool, "nr_hugepages")
    try:
        (pool / "nr_hugepages").write_text(str(before + count))
    except OSError as exc:
        pytest.skip(f"kernel refused to grow the {page_kib} kB hugepage pool: {exc}")
    try:
        got = read_pool(pool, "nr_hugepages") - before
        if got < count:
            pytest.skip(f"kernel reserved only {got} of {count} {page_kib} kB hugepages (memory fragmented)")
        yield pool
    finally:
        gc.collect()  # arenas and views from the block must be unmapped first
        now = read_pool(pool, "nr_hugepages")
        (pool / "nr_hugepages").write_text(str(max(0, now - count)))


def run_concurrently(work, n: int, timeout: float) -> None:
    """Run work(i) for i in range(n), each on its own thread, all at once.
    Fails if a thread is still running after `timeout` seconds (a hang);
    re-raises the first exception a thread raised, in the test's thread."""
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            work(i)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = sum(t.is_alive() for t in threads)
    assert not hung, f"{hung} of {n} threads still running after {timeout} s"
    if errors:
        raise errors[0]


# Ports this process handed out. The kernel may give a just-released port
# again on the next bind, so two free_port() calls for one server's http and
# grpc ports once returned the same number (and the server refused to start).
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port free on 127.0.0.1 now and never returned before by this process."""
    for _ in range(1000):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no fresh free port on 127.0.0.1 after 1000 tries")
