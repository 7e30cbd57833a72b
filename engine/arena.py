"""engine.arena: the kernels' arena allocator (kernels/include/aie_arena.h) from Python.

    with Arena("64M", hugepages=True) as arena:
        block = arena.alloc(4096)              # 64-byte aligned
        x = block.ndarray(np.float32)          # a view, no copy
        arena.stats()["backing"]               # 'hugetlb-2M', 'thp' or 'normal'

One Arena is one reservation made at creation; alloc/free never call the OS.
`stats_all()` lists every open arena of this process (the server reports it
on /health; a separate `ai-engine arena-dump --pid` is deliberately not
offered: reading another process's arena would need ptrace-level access).
`hugepage_fallbacks()` counts, by reason, the arenas that asked for
hugepages and got 4 KiB pages.

Plan arenas (the memory one inference of an execution plan runs in, see
engine.plan) are made through PLAN_ARENAS, the process's ledger of them:
backed as an ArenaPolicy says (engine.arena.hugepages / .mlock of
engine.yaml), their total bounded by its limit (engine.arena.size), their
bytes reported by backing.

Lifetime: views handed out by Block (memoryview/ndarray) keep the mapping
alive, so closing an arena while a view exists cannot make the view dangle;
the memory is unmapped when the last of them is gone.
"""

from __future__ import annotations

import collections
import ctypes
import mmap
import os
import resource
import threading
import weakref
from dataclasses import dataclass

import numpy as np

from engine import units
from engine.errors import EngineError
from engine.kernels._lib import lib

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
BUCKETS = ("<=4K", "4K-64K", "64K-1M", ">1M")
BACKINGS = ("normal", "thp", "hugetlb-2M", "hugetlb-1G")
# aie_arena_fallback, as metric labels ("" = none).
HUGEPAGE_FALLBACKS = ("", "no_free_hugepages", "unsupported", "mmap_failed")
_REASON_LEN = 192


class ArenaError(EngineError):
    """An arena could not be created, or a request to it is invalid."""


class ArenaExhausted(ArenaError, MemoryError):
    """No free block is large enough for an allocation."""


class _Stats(ctypes.Structure):
    """Mirror of aie_arena_stats; checked against aie_arena_stats_size() at load."""

    _fields_ = [
        ("reserved", ctypes.c_size_t), ("page_size", ctypes.c_size_t), ("in_use", ctypes.c_size_t),
        ("requested", ctypes.c_size_t), ("peak_in_use", ctypes.c_size_t), ("free_bytes", ctypes.c_size_t),
        ("largest_free", ctypes.c_size_t), ("live_allocations", ctypes.c_size_t),
        ("bucket_free_blocks", ctypes.c_size_t * 4), ("bucket_free_bytes", ctypes.c_size_t * 4),
        ("bucket_live_blocks", ctypes.c_size_t * 4),
        ("total_allocations", ctypes.c_uint64), ("failed_allocations", ctypes.c_uint64),
        ("fragmentation", ctypes.c_double), ("hugepage_bytes", ctypes.c_size_t),
        ("backing", ctypes.c_int), ("mlocked", ctypes.c_int), ("prefaulted", ctypes.c_int),
        ("hugepages_requested", ctypes.c_int), ("hugepage_fallback", ctypes.c_int),
        ("backing_reason", ctypes.c_char * _REASON_LEN), ("mlock_reason", ctypes.c_char * _REASON_LEN),
    ]


class _Options(ctypes.Structure):
    _fields_ = [("hugepages", ctypes.c_int), ("hugepage_size", ctypes.c_size_t),
                ("mlock", ctypes.c_int), ("prefault", ctypes.c_int)]


_bound = False
_bind_lock = threading.Lock()


def _lib() -> ctypes.CDLL:
    """The kernel library with the arena signatures declared (once)."""
    global _bound
    handle = lib()
    with _bind_lock:
        if not _bound:
            if not hasattr(handle, "aie_arena_create"):
                raise ArenaError("the kernel library has no arena allocator (built before it existed)",
                                 hint="rebuild the kernels (`invoke build-kernels`)")
            p, sz = ctypes.c_void_p, ctypes.c_size_t
            handle.aie_arena_create.argtypes = [sz, ctypes.POINTER(_Options), ctypes.POINTER(p)]
            handle.aie_arena_destroy.argtypes = [p]
            handle.aie_arena_destroy.restype = None
            handle.aie_arena_alloc.argtypes = [p, sz]
            handle.aie_arena_alloc.restype = p
            handle.aie_arena_free.argtypes = [p, p]
            handle.aie_arena_reset.argtypes = [p]
            handle.aie_arena_reset.restype = None
            handle.aie_arena_base.argtypes = [p]
            handle.aie_arena_base.restype = p
            handle.aie_arena_reserved.argtypes = [p]
            handle.aie_arena_reserved.restype = sz
            handle.aie_arena_stats_get.argtypes = [p, ctypes.POINTER(_Stats)]
            handle.aie_arena_stats_size.restype = sz
            handle.aie_arena_bucket_of.argtypes = [sz]
            if handle.aie_arena_stats_size() != ctypes.sizeof(_Stats):
                raise ArenaError("aie_arena_stats layout differs between engine/arena.py and the kernel library",
                                 hint="rebuild the kernels (`invoke build-kernels`)")
            _bound = True
    return handle


def _last_error() -> str:
    return lib().aie_last_error().decode(errors="replace")


def parse_size(value: int | str, what: str = "size") -> int:
    """Bytes from an int or a string like '256M', '2MiB', '1G' (engine.units' grammar, as the spec uses)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ArenaError(f"{what} must be bytes (int) or a size like '256M', got {value!r}")
    try:
        nbytes = value if isinstance(value, int) else units.parse_size(value, where=what)
    except units.UnitError:
        raise ArenaError(f"{what} {value!r} is not a size (expected e.g. 4096, '64K', '256M', '1G')") from None
    if nbytes <= 0:
        raise ArenaError(f"{what} must be > 0 bytes, got {value!r}")
    return nbytes


def bucket_of(nbytes: int) -> int:
    """Size class (0..3) the C allocator files a request of nbytes under."""
    return int(_lib().aie_arena_bucket_of(nbytes))


class _Mapping:
    """Owns the C arena; destroyed when neither the Arena nor any view needs it."""

    def __init__(self, handle: int):
        self.handle = handle
        # Bound now: at interpreter exit module globals may already be gone
        # when __del__ runs.
        self._destroy = _lib().aie_arena_destroy

    def __del__(self):
        if self.handle:
            self._destroy(self.handle)
            self.handle = 0


class Block:
    """One allocation: offset from the arena base, size, address, zero-copy views."""

    __slots__ = ("arena", "offset", "nbytes", "address", "_mapping", "__weakref__")

    def __init__(self, arena: "Arena", address: int, nbytes: int):
        self.arena = arena
        self.address = address
        self.offset = address - arena.base_address
        self.nbytes = nbytes
        self._mapping = arena._mapping

    @property
    def view(self) -> memoryview:
        """A writable memoryview of the block (bytes)."""
        raw = (ctypes.c_ubyte * self.nbytes).from_address(self.address)
        raw._keep_mapping = self._mapping  # the view pins the mapping, see module doc
        return memoryview(raw).cast("B")

    def ndarray(self, dtype=np.uint8, shape=None) -> np.ndarray:
        """The block as a numpy array (no copy); shape defaults to as many items as fit."""
        dtype = np.dtype(dtype)
        count = self.nbytes // dtype.itemsize if shape is None else int(np.prod(shape, dtype=np.int64))
        if count * dtype.itemsize > self.nbytes:
            raise ArenaError(f"shape {shape} of {dtype} needs {count * dtype.itemsize} bytes, "
                             f"block has {self.nbytes}")
        arr = np.frombuffer(self.view, dtype=dtype, count=count)
        return arr.reshape(shape) if shape is not None else arr

    def free(self) -> None:
        self.arena.free(self)

    def __repr__(self) -> str:
        return f"Block(offset={self.offset}, nbytes={self.nbytes})"


_live: "weakref.WeakSet[Arena]" = weakref.WeakSet()
_fallbacks: collections.Counter = collections.Counter()
_fallbacks_lock = threading.Lock()


class Arena:
    """One arena reservation. size: bytes or '256M'; page_size: '2M' or '1G'."""

    def __init__(self, size: int | str, hugepages: bool = True, mlock: bool = False, *,
                 page_size: int | str = "2M", prefault: bool = True, name: str = "arena"):
        nbytes = parse_size(size)
        page = parse_size(page_size, "page_size")
        if page not in (2 * MIB, GIB):
            raise ArenaError(f"page_size {page_size!r} not supported (expected '2M' or '1G')")
        opts = _Options(int(bool(hugepages)), page, int(bool(mlock)), int(bool(prefault)))
        handle = ctypes.c_void_p()
        rc = _lib().aie_arena_create(nbytes, ctypes.byref(opts), ctypes.byref(handle))
        if rc != 0:
            raise ArenaError(_last_error(), where=name)
        self.name = name
        self._mapping = _Mapping(handle.value)
        self.base_address = int(_lib().aie_arena_base(handle.value))
        self.size = int(_lib().aie_arena_reserved(handle.value))
        _live.add(self)
        fallback = self.stats(thp=False)["hugepage_fallback"]
        if fallback:
            with _fallbacks_lock:
                _fallbacks[fallback] += 1

    @property
    def handle(self) -> int:
        """The aie_arena* for C code (the runtime passes it to the plan executor)."""
        if self._mapping is None:
            raise ArenaError("arena is closed", where=self.name)
        return self._mapping.handle

    @property
    def closed(self) -> bool:
        return self._mapping is None

    def alloc(self, nbytes: int) -> Block:
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
            raise ArenaError(f"alloc: nbytes must be a non-negative int, got {nbytes!r}", where=self.name)
        address = _lib().aie_arena_alloc(self.handle, int(nbytes))
        if not address:
            message = _last_error()
            if message.startswith("arena exhausted"):
                raise ArenaExhausted(message, where=self.name,
                                     hint="create a larger arena (engine.arena.size in the spec)")
            raise ArenaError(message, where=self.name)
        return Block(self, int(address), int(nbytes))

    def free(self, block: Block) -> None:
        if not isinstance(block, Block) or block.arena is not self:
            raise ArenaError(f"free: {block!r} was not allocated from this arena", where=self.name)
        if _lib().aie_arena_free(self.handle, block.address) != 0:
            raise ArenaError(_last_error(), where=self.name)

    def reset(self) -> None:
        """Free every block at once; earlier Blocks must not be used or freed afterwards."""
        _lib().aie_arena_reset(self.handle)

    def stats(self, thp: bool = True) -> dict:
        """thp=False skips thp_bytes (0): it reads /proc/self/smaps, tens of
        ms in a process with many mappings, which a new plan arena (a
        model whose shapes change every call) must not pay."""
        st = _Stats()
        if _lib().aie_arena_stats_get(self.handle, ctypes.byref(st)) != 0:
            raise ArenaError(_last_error(), where=self.name)
        return {
            "name": self.name,
            "base_address": hex(self.base_address),
            "reserved": st.reserved,
            "page_size": st.page_size,
            "in_use": st.in_use,
            "requested": st.requested,
            "peak_in_use": st.peak_in_use,
            "free": st.free_bytes,
            "largest_free": st.largest_free,
            "live_allocations": st.live_allocations,
            "total_allocations": st.total_allocations,
            "failed_allocations": st.failed_allocations,
            "fragmentation": st.fragmentation,
            "buckets": [{"bucket": label, "free_blocks": st.bucket_free_blocks[i],
                         "free_bytes": st.bucket_free_bytes[i], "live_blocks": st.bucket_live_blocks[i]}
                        for i, label in enumerate(BUCKETS)],
            "backing": BACKINGS[st.backing] if 0 <= st.backing < len(BACKINGS) else "unknown",
            "backing_reason": st.backing_reason.decode(errors="replace"),
            "hugepages_requested": bool(st.hugepages_requested),
            "hugepage_fallback": HUGEPAGE_FALLBACKS[st.hugepage_fallback]
            if 0 <= st.hugepage_fallback < len(HUGEPAGE_FALLBACKS) else "unknown",
            "hugepage_bytes": st.hugepage_bytes,
            "thp_bytes": _thp_bytes(self.base_address, st.reserved) if st.backing == 1 and thp else 0,
            "mlocked": bool(st.mlocked),
            "mlock_reason": st.mlock_reason.decode(errors="replace"),
            "prefaulted": bool(st.prefaulted),
        }

    def close(self) -> None:
        """Stop using the arena; its memory goes when the last view of it does."""
        _live.discard(self)
        self._mapping = None

    def __enter__(self) -> "Arena":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.size} bytes at {hex(self.base_address)}"
        return f"Arena({self.name!r}, {state})"


def _thp_bytes(base: int, size: int) -> int:
    """AnonHugePages of the mapping at base (transparent hugepages actually in use)."""
    try:
        with open("/proc/self/smaps") as f:
            inside, total = False, 0
            for line in f:
                head = line.split(maxsplit=1)[0]
                if "-" in head and not head.endswith(":"):
                    start, end = (int(x, 16) for x in head.split("-"))
                    inside = start < base + size and end > base
                elif inside and head == "AnonHugePages:":
                    total += int(line.split()[1]) * KIB
            return total
    except (OSError, ValueError):
        return 0


def stats_all() -> list[dict]:
    """Stats of every open arena in this process, in creation order of their addresses."""
    return [a.stats() for a in sorted(list(_live), key=lambda a: a.base_address) if not a.closed]


def hugepage_fallbacks() -> dict[str, int]:
    """Arenas of this process that asked for hugepages and got 4 KiB pages, by reason."""
    with _fallbacks_lock:
        return {reason: _fallbacks[reason] for reason in HUGEPAGE_FALLBACKS[1:]}


# ---- plan arenas ------------------------------------------------------------------
PLAN_ARENA_MIN = 2 * MIB  # one 2 MiB hugepage: smaller plan arenas stay numpy buffers (unless mlocked)
_HEADER = 64              # AIE_ARENA_HEADER: the allocator's block header, also its alignment


class ArenaLimitExceeded(ArenaError):
    """A new plan arena would take the process's plan arenas past engine.arena.size."""


@dataclass(frozen=True)
class ArenaPolicy:
    """How a session's plan arenas are backed: engine.arena of engine.yaml.
    hugepages: MAP_HUGETLB first (else 4 KiB pages, THP where allowed);
    mlock: every plan arena locked in RAM, an error when the kernel refuses;
    owner: the model, named in errors."""

    hugepages: bool = True
    mlock: bool = False
    owner: str = ""
    page_size: int = 2 * MIB  # hugepage size: 2 MiB, or 1 GiB where the host reserves those


def _round_up(n: int, unit: int) -> int:
    return (n + unit - 1) // unit * unit


class PlanArenas:
    """The process's plan arenas: what each reserves and how it is backed,
    and the bound on their total (`limit` bytes; None = unbounded). An arena
    is counted until the plan that holds it is collected (an LRU eviction,
    a model unloaded), so the total is what the process really holds."""

    def __init__(self, limit: int | None = None):
        self.limit = limit
        # Re-entrant: a garbage collection during allocate() may run a finalizer (_drop) on this thread.
        self._lock = threading.RLock()
        self._live: dict[int, tuple[int, str]] = {}   # key -> (bytes, "hugepage" | "4k")
        self._next = 0

    def allocate(self, holder, nbytes: int, policy: ArenaPolicy, what: str) -> tuple[int, object, str]:
        """(address of nbytes, 64-byte aligned; the object that keeps them;
        the backing and why, as text): charged to this ledger until `holder`
        is garbage."""
        small = nbytes < PLAN_ARENA_MIN and not policy.mlock
        charge = self.charge_of(nbytes, policy)
        with self._lock:
            used = self.used()
            if self.limit is not None and used + charge > self.limit:
                raise ArenaLimitExceeded(
                    f"{what}: a plan arena of {charge} bytes would bring this process's plan arenas to "
                    f"{used + charge} bytes, over engine.arena.size = {self.limit} bytes "
                    f"({used} bytes held by {len(self._live)} plan arenas)",
                    hint="raise engine.arena.size, or lower max_batch_size, instances or engine.plan_cache_size")
            if small:
                raw = np.zeros(nbytes + 2 * _HEADER, np.uint8)
                address, keep, backing = raw.ctypes.data + (-raw.ctypes.data) % _HEADER, raw, "4k"
                described = "numpy"
            else:
                arena = Arena(nbytes + _HEADER, hugepages=policy.hugepages, mlock=policy.mlock,
                              page_size=policy.page_size, name=what)
                st = arena.stats(thp=False)
                if policy.mlock and not st["mlocked"]:
                    arena.close()
                    raise ArenaError(f"{what}: engine.arena.mlock is on but {st['mlock_reason']}",
                                     hint="raise service.limit_memlock (RLIMIT_MEMLOCK) to cover engine.arena.size, "
                                          "or set engine.arena.mlock: false")
                block = arena.alloc(nbytes)
                address, keep, charge = block.address, (arena, block), st["reserved"]
                backing = "hugepage" if st["hugepage_bytes"] else "4k"
                described = st["backing"] + (f" ({st['backing_reason']})" if st["backing_reason"] else "")
            key = self._next
            self._next += 1
            self._live[key] = (charge, backing)
        weakref.finalize(holder, self._drop, key)
        return address, keep, described

    @staticmethod
    def charge_of(nbytes: int, policy: ArenaPolicy) -> int:
        """Bytes a plan arena of nbytes takes: the allocator maps whole 2 MiB
        units (hugetlb and THP alike); a small numpy-held one its size."""
        if nbytes < PLAN_ARENA_MIN and not policy.mlock:
            return nbytes + 2 * _HEADER
        return _round_up(nbytes + _HEADER, policy.page_size if policy.hugepages else PLAN_ARENA_MIN)

    def check_fits(self, nbytes: int, policy: ArenaPolicy, what: str) -> None:
        """ArenaLimitExceeded when one plan arena of nbytes alone is over the limit."""
        charge = self.charge_of(nbytes, policy)
        if self.limit is not None and charge > self.limit:
            raise ArenaLimitExceeded(f"{what}: its plan arena takes {charge} bytes, more than engine.arena.size "
                                     f"= {self.limit} bytes", hint="raise engine.arena.size")

    def _drop(self, key: int) -> None:
        with self._lock:
            self._live.pop(key, None)

    def used(self) -> int:
        with self._lock:
            return sum(n for n, _ in self._live.values())

    def bytes_by_backing(self) -> dict[str, int]:
        """Bytes of live plan arenas from the hugepage pool and from 4 KiB pages."""
        totals = {"hugepage": 0, "4k": 0}
        with self._lock:
            for n, backing in self._live.values():
                totals[backing] += n
        return totals


PLAN_ARENAS = PlanArenas()


def check_mlock(nbytes: int) -> None:
    """Raise ArenaError, saying what to set, when the kernel would refuse to
    lock nbytes in this process (RLIMIT_MEMLOCK without CAP_IPC_LOCK). Asks
    the kernel itself: mlock2(MLOCK_ONFAULT) of an unpopulated mapping checks
    the limit exactly as a real mlock does but faults no page in."""
    libc = ctypes.CDLL(None, use_errno=True)
    mlock2 = getattr(libc, "mlock2", None)
    if mlock2 is None:  # glibc < 2.27: nothing to ask; the plan arenas' own mlock reports
        return
    mlock2.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    mlock_onfault = 1
    probe = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0))
    try:
        view = ctypes.c_char.from_buffer(probe)
        address = ctypes.addressof(view)
        del view  # the mmap cannot be closed while a ctypes view exports it
        if mlock2(address, nbytes, mlock_onfault) == 0:
            return
        err = ctypes.get_errno()
    finally:
        probe.close()  # munmap also unlocks
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    limit = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft} bytes"
    raise ArenaError(f"engine.arena.mlock: the kernel refuses to lock engine.arena.size = {nbytes} bytes: "
                     f"{os.strerror(err)} (RLIMIT_MEMLOCK is {limit}, no CAP_IPC_LOCK)",
                     hint="set service.limit_memlock >= engine.arena.size (LimitMEMLOCK=; "
                          "`prlimit --memlock` outside systemd), or engine.arena.mlock: false")


__all__ = ["Arena", "Block", "ArenaError", "ArenaExhausted", "ArenaLimitExceeded", "ArenaPolicy", "PlanArenas",
           "PLAN_ARENAS", "stats_all", "hugepage_fallbacks", "check_mlock", "parse_size", "bucket_of", "BUCKETS"]
