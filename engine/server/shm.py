"""Triton's system shared-memory extension: clients on this host register a
POSIX shared-memory object (shm_open's "/key") as a named region, then send
inputs and receive outputs as references into it (the parameters
shared_memory_region, shared_memory_offset, shared_memory_byte_size) instead
of bytes on the socket.

Opening: as glibc's shm_open(key, O_RDWR) does -- open("/dev/shm/<key
without its slash>", O_RDWR | O_NOFOLLOW | O_CLOEXEC) -- which is what
Triton calls (with mode S_IRUSR | S_IWUSR, unused without O_CREAT): the
object's own file mode decides whether the server's user may open it; plus
O_NONBLOCK (a FIFO planted in /dev/shm must not block the event loop) and
a check that it is a regular file. The key is checked first (one leading
"/", no other "/", no "..", at most NAME_MAX bytes), so it names a file in
/dev/shm and nothing else. The region [offset, offset + byte_size) is mapped
shared, read-write (PROT_READ | PROT_WRITE, MAP_SHARED, as Triton), from the
page below offset; Python's mmap keeps a duplicate of the descriptor, which
closes with the mapping.

Lifetime: unregister (or the server's shutdown) closes the mapping. A
request still running on the region holds numpy views on it: the mapping
then closes when the last view goes (mmap refuses to close under exported
buffers, so memory a C thread reads is never unmapped beneath it). A client
that deletes the object (shm_unlink) while it is registered changes nothing
for the server: its mapping keeps the memory alive and the region keeps
working until it is unregistered (the client no longer sees what the server
writes, unless it still has the object mapped itself).

A client that shrinks the object (ftruncate) below a registered region
would make the server's accesses past the new end fault (SIGBUS): each use
checks the object's size first and refuses a region it no longer covers.
A client that shrinks it *during* a run can still crash the server -- the
same trust any process that shares memory with the server holds; hosts
that cannot grant it set limits.max_shm_regions to 0, which turns the
extension off.

Owners: regions live in one namespace per principal (the token's subject;
"" without auth): a client sees, uses and unregisters only its own, so one
tenant can neither read another's tensors through a region name nor
unregister it. The limits (limits.max_shm_regions, limits.max_shm_bytes)
are server-wide: they bound the server's mappings and descriptors.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
from typing import Callable

import numpy as np

from engine.server.config import LimitsConfig
from engine.server.errors import ServeError
from engine.server.models import KSERVE_TO_NUMPY, LoadedModel, element_count

SHM_DIR = "/dev/shm"        # where glibc's shm_open puts "/key" objects
KEY_MAX = 255               # NAME_MAX: the key less its slash is one file name
NAME_MAX = 255              # region names: what a client may make us store and echo
_OPEN_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_MAX_INT = (1 << 63) - 1    # Triton's offsets and sizes are int64 / uint64
_LITTLE_ENDIAN = {k: v.newbyteorder("<") for k, v in KSERVE_TO_NUMPY.items()}  # KServe's byte order


def check_key(key) -> str:
    """The key as shm_open takes it, or ServeError naming what is wrong."""
    if not isinstance(key, str):
        raise ServeError(f'"key" must be a string like "/name", got {type(key).__name__}')
    if not key.startswith("/") or len(key) < 2:
        raise ServeError(f'key {key[:64]!r} must start with "/" followed by a name (shm_open\'s form)')
    if "/" in key[1:] or ".." in key or "\0" in key:
        raise ServeError(f'key {key[:64]!r} must be one "/" and a name without "/", ".." or NUL')
    if len(key.encode("utf-8", "surrogatepass")) - 1 > KEY_MAX:
        raise ServeError(f"key of {len(key)} characters; at most {KEY_MAX} bytes after the slash")
    return key


def _check_name(name) -> str:
    if not isinstance(name, str) or not name or len(name) > NAME_MAX:
        raise ServeError(f"shared memory region name must be a string of 1..{NAME_MAX} characters")
    return name


def _int(value, what: str, minimum: int = 0) -> int:
    if type(value) is not int or not minimum <= value <= _MAX_INT:  # type(): bool is no size
        raise ServeError(f"{what} must be an integer >= {minimum}, got {str(value)[:40]}")
    return value


class Region:
    """One registered region: [offset, offset + byte_size) of the object `key`, mapped."""

    __slots__ = ("name", "key", "offset", "byte_size", "owner", "mapping", "base", "mapped", "closed")

    def __init__(self, name: str, key: str, offset: int, byte_size: int, owner: str):
        self.name, self.key, self.offset, self.byte_size, self.owner = name, key, offset, byte_size, owner
        self.closed = False
        path = os.path.join(SHM_DIR, key[1:])
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError as exc:
            raise ServeError(_open_error(name, key, exc)) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ServeError(f"shared memory region {name!r}: {key!r} is not a shared memory object")
            if offset + byte_size > st.st_size:
                raise ServeError(f"shared memory region {name!r}: offset {offset} + byte_size {byte_size} = "
                                 f"{offset + byte_size} is beyond the {st.st_size}-byte object {key!r}")
            # mmap offsets are whole pages: map from the page below `offset`.
            start = offset - offset % mmap.ALLOCATIONGRANULARITY
            self.base = offset - start
            self.mapped = self.base + byte_size
            self.mapping = mmap.mmap(fd, self.mapped, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                                     offset=start)
        except OSError as exc:
            raise ServeError(f"shared memory region {name!r}: cannot map {key!r}: {exc.strerror}") from None
        finally:
            os.close(fd)  # the mapping holds its own duplicate

    def status(self) -> dict:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}

    def slice(self, offset: int, byte_size: int, what: str) -> int:
        """Where [offset, offset + byte_size) of the region starts in the
        mapping, after checking it lies within the region and the object."""
        if offset + byte_size > self.byte_size:
            raise ServeError(f"{what}: shared_memory_offset {offset} + shared_memory_byte_size {byte_size} = "
                             f"{offset + byte_size} is beyond region {self.name!r} of {self.byte_size} bytes")
        if self.closed:
            raise self._unregistered(what)
        try:
            size = self.mapping.size()  # the object's size now (fstat), not at registration
        except ValueError:  # closed by an unregister on the loop while a codec thread decodes
            raise self._unregistered(what) from None
        if self.offset + self.byte_size > size:
            raise ServeError(f"{what}: the object {self.key!r} of region {self.name!r} shrank to {size} bytes, "
                             f"below the region's end at {self.offset + self.byte_size}; unregister it")
        return self.base + offset

    def _unregistered(self, what: str) -> ServeError:
        return ServeError(f"{what}: shared memory region {self.name!r} was unregistered while the request ran")

    def close(self) -> None:
        self.closed = True
        try:
            self.mapping.close()
        except BufferError:
            pass  # a running request's views hold it: it unmaps when the last one goes


class OutputTarget:
    """Where one requested output goes: checked against its region before
    inference runs; `array(shape, dtype)` is the view the run may write."""

    __slots__ = ("output", "region", "offset", "byte_size", "start", "view")

    def __init__(self, output: str, region: Region, offset: int, byte_size: int, start: int):
        self.output, self.region, self.offset, self.byte_size = output, region, offset, byte_size
        self.start = start    # of the target in the mapping (Region.slice checked it)
        self.view = None      # the array given to the run, once array() made it

    def params(self, nbytes: int) -> dict:
        """The parameters Triton echoes on an output written to a region."""
        p = {"shared_memory_region": self.region.name, "shared_memory_byte_size": nbytes}
        if self.offset:
            p["shared_memory_offset"] = self.offset
        return p

    def check_fits(self, nbytes: int, when: str = "") -> None:
        if nbytes > self.byte_size:
            raise ServeError(f"output {self.output!r} of {nbytes} bytes does not fit shared_memory_byte_size "
                             f"{self.byte_size} in region {self.region.name!r}{when}")

    def array(self, shape, dtype: np.dtype) -> np.ndarray | None:
        """A writable view of the target for an output of this shape, or
        None where its elements would not be aligned (the run then writes
        its own array and write_output copies)."""
        count = element_count(shape)
        self.check_fits(count * dtype.itemsize)
        view = np.frombuffer(self.region.mapping, dtype, count, self.start).reshape(shape)
        self.view = view if view.flags.aligned else None
        return self.view


def output_views(model: LoadedModel, inputs: dict[str, np.ndarray],
                 targets: dict[str, OutputTarget]) -> dict[str, np.ndarray]:
    """Check, before the request is queued, that each output fits its
    region, and give the views the run may write it into (state.infer's
    `out`, for every protocol). An output's shape is known in advance when
    its dimensions are static but for a first dimension that follows the
    inputs' (LoadedModel.follows_batch); the others are checked by
    write_output once they ran."""
    first = next(iter(inputs.values()), None)
    out = {}
    for name, target in targets.items():
        spec = model.output(name)
        shape = list(spec.shape)
        if model.follows_batch and first is not None and first.ndim:
            shape[0] = first.shape[0]
        if -1 in shape:
            continue
        view = target.array(shape, spec.dtype)
        if view is not None:
            out[name] = view
    return out


def _open_error(name: str, key: str, exc: OSError) -> str:
    what = {errno.ENOENT: "no such shared memory object (the client creates it with shm_open first)",
            errno.EACCES: "permission denied (the object's mode does not let the server's user read and write it)",
            errno.ELOOP: "is a symbolic link", errno.EISDIR: "is a directory"}.get(exc.errno, exc.strerror)
    return f"shared memory region {name!r}: cannot open {key!r}: {what}"


class SystemSharedMemory:
    """The registry of regions (one per server, state.shm). `limits` gives
    the current LimitsConfig (a reload may change it)."""

    def __init__(self, limits: Callable[[], LimitsConfig]):
        self._limits = limits
        self._regions: dict[tuple[str, str], Region] = {}   # (owner, name) -> region
        self._mapped = 0

    @property
    def enabled(self) -> bool:
        return self._limits().max_shm_regions > 0

    def register(self, name: str, key: str, offset: int, byte_size: int, *, owner: str = "") -> None:
        limits = self._limits()
        if limits.max_shm_regions == 0:
            raise ServeError("system shared memory is turned off on this server (limits.max_shm_regions: 0)")
        _check_name(name)
        check_key(key)
        offset = _int(offset, '"offset"')
        byte_size = _int(byte_size, '"byte_size"', 1)
        if (owner, name) in self._regions:
            raise ServeError(f"shared memory region {name!r} is already registered; unregister it first")
        if len(self._regions) >= limits.max_shm_regions:
            raise ServeError(f"shared memory region {name!r}: the server holds {len(self._regions)} regions, "
                             f"the most limits.max_shm_regions allows")
        if self._mapped + byte_size > limits.max_shm_bytes:
            raise ServeError(f"shared memory region {name!r}: {byte_size} more bytes would map "
                             f"{self._mapped + byte_size}, over limits.max_shm_bytes {limits.max_shm_bytes}")
        region = Region(name, key, offset, byte_size, owner)
        self._regions[(owner, name)] = region
        self._mapped += region.byte_size

    def unregister(self, name: str | None, *, owner: str = "") -> None:
        """One region (None: every region of `owner`); a name not registered
        is no error (Triton's behaviour: unregistering is idempotent)."""
        keys = [k for k in self._regions if k[0] == owner] if name is None else [(owner, name)]
        for k in keys:
            region = self._regions.pop(k, None)
            if region is not None:
                self._mapped -= region.byte_size
                region.close()

    def status(self, name: str | None, *, owner: str = "") -> list[dict]:
        if name is None:
            return [r.status() for (o, _), r in sorted(self._regions.items()) if o == owner]
        return [self._get(name, owner, "status").status()]

    def _get(self, name, owner: str, what: str) -> Region:
        region = self._regions.get((owner, name)) if isinstance(name, str) else None
        if region is None:
            raise ServeError(f"{what}: shared memory region {str(name)[:NAME_MAX]!r} is not registered")
        return region

    def _reference(self, params: dict, what: str, owner: str) -> tuple[Region, int, int, int] | None:
        """(region, offset, byte_size, start in the mapping) the shared_memory_*
        parameters name, checked; None without them."""
        if "shared_memory_region" not in params:
            if "shared_memory_byte_size" in params or "shared_memory_offset" in params:
                raise ServeError(f"{what}: shared_memory_byte_size/offset given without shared_memory_region")
            return None
        region = self._get(params["shared_memory_region"], owner, what)
        if "shared_memory_byte_size" not in params:
            raise ServeError(f"{what}: shared_memory_region needs shared_memory_byte_size")
        byte_size = _int(params["shared_memory_byte_size"], f"{what}: shared_memory_byte_size")
        offset = _int(params.get("shared_memory_offset", 0), f"{what}: shared_memory_offset")
        return region, offset, byte_size, region.slice(offset, byte_size, what)

    def read_input(self, name: str, params: dict, datatype: str, shape: list[int], *,
                   owner: str = "") -> np.ndarray | None:
        """The input as a view on the region (no copy; a copy only where the
        client's offset leaves its elements unaligned), or None where
        `params` names no region."""
        what = f"input {name!r}"
        ref = self._reference(params, what, owner)
        if ref is None:
            return None
        region, offset, byte_size, start = ref
        dtype = _LITTLE_ENDIAN[datatype]
        need = element_count(shape) * dtype.itemsize
        if byte_size != need:
            raise ServeError(f"{what}: shared_memory_byte_size {byte_size} but shape {list(shape)} of {datatype} "
                             f"needs {need} bytes")
        view = np.frombuffer(region.mapping, dtype, element_count(shape), start).reshape(shape)
        # The kernels read whole elements: an unaligned offset gets a copy.
        return view if view.flags.aligned else view.copy()

    def output_target(self, name: str, params: dict, *, owner: str = "") -> OutputTarget | None:
        ref = self._reference(params, f"output {name!r}", owner)
        if ref is None:
            return None
        return OutputTarget(name, *ref)

    @staticmethod
    def write_output(target: OutputTarget, arr: np.ndarray) -> None:
        """Put one output into its region: nothing to do when the run wrote
        it there (the array is the target's view), else one copy."""
        if arr is target.view:
            return
        start = target.region.slice(target.offset, target.byte_size, f"output {target.output!r}")
        target.check_fits(arr.nbytes, " (its shape became known only when it ran)")
        np.copyto(np.frombuffer(target.region.mapping, arr.dtype, arr.size, start).reshape(arr.shape), arr)

    def close(self) -> None:
        """At shutdown: unregister every region of every owner."""
        for region in self._regions.values():
            region.close()
        self._regions.clear()
        self._mapped = 0
