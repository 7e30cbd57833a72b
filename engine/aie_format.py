"""The .aie model file: a converted graph plus its weights, loaded by mmap.

Layout (little endian):
    0   8  magic b"AIEMODEL"
    8   4  format version (uint32)
    12  4  reserved (0)
    16  8  metadata offset    24  8  metadata length
    32  8  weights offset     40  8  weights length
    48  4  CRC-32 of metadata followed by weights
    52 12  reserved (0)
    64 ..  metadata (UTF-8 JSON: graph, tensor table, planned memory)
    ..     weights, every tensor 64-byte aligned from a 64-byte aligned start

Weights are used in place from the mapping (zero-copy, shared between
processes mapping the same file). Any structural problem raises
ModelFormatError naming it.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import ModelFormatError
from engine.ir import Graph, Node, TensorInfo

MAGIC = b"AIEMODEL"
FORMAT_VERSION = 1
HEADER = struct.Struct("<8sII QQ QQ I 12s")
assert HEADER.size == 64
ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class _WeightWriter:
    def __init__(self):
        self.chunks: list[bytes] = []
        self.size = 0

    def add(self, arr: np.ndarray) -> dict:
        arr = np.asarray(arr, order="C")
        offset = self.size
        data = arr.tobytes()
        pad = _align(len(data)) - len(data)
        self.chunks.append(data + b"\0" * pad)
        self.size += len(data) + pad
        return {"offset": offset, "shape": list(arr.shape), "dtype": arr.dtype.str}


def _encode_attr(value: Any, w: _WeightWriter) -> Any:
    if isinstance(value, Graph):
        return {"__graph__": _encode_graph(value, w)}
    if isinstance(value, np.ndarray):
        return {"__array__": w.add(value)}
    return value


def _encode_info(t: TensorInfo) -> dict:
    return {"name": t.name, "dtype": t.dtype.str, "shape": None if t.shape is None else list(t.shape)}


def _encode_graph(g: Graph, w: _WeightWriter) -> dict:
    return {
        "name": g.name, "opset": g.opset,
        "inputs": [_encode_info(t) for t in g.inputs], "outputs": [_encode_info(t) for t in g.outputs],
        "initializers": {name: w.add(arr) for name, arr in g.initializers.items()},
        "nodes": [{"op": n.op, "name": n.name, "inputs": n.inputs, "outputs": n.outputs, "domain": n.domain,
                   "attrs": {k: _encode_attr(v, w) for k, v in n.attrs.items()}} for n in g.nodes],
    }


def serialize(graph: Graph, extra: dict | None = None) -> bytes:
    """The complete .aie file as bytes."""
    w = _WeightWriter()
    meta = {"graph": _encode_graph(graph, w), **(extra or {})}
    meta_bytes = json.dumps(meta, separators=(",", ":")).encode()
    weights_offset = _align(HEADER.size + len(meta_bytes))
    weights = b"".join(w.chunks)
    crc = zlib.crc32(weights, zlib.crc32(meta_bytes))
    header = HEADER.pack(MAGIC, FORMAT_VERSION, 0, HEADER.size, len(meta_bytes), weights_offset, len(weights), crc,
                         b"\0" * 12)
    return header + meta_bytes + b"\0" * (weights_offset - HEADER.size - len(meta_bytes)) + weights


def write(path: str | Path, graph: Graph, extra: dict | None = None) -> int:
    """Write atomically (temp file + rename): never a half-written model."""
    data = serialize(graph, extra)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return len(data)


class LoadedModel:
    """A graph whose initializers are views into `buffer` (an mmap or bytes)."""

    def __init__(self, graph: Graph, meta: dict, buffer, weights: np.ndarray):
        self.graph, self.meta, self.buffer, self.weights = graph, meta, buffer, weights

    @property
    def weights_ptr(self) -> int:
        return self.weights.ctypes.data if self.weights.size else 0


def _decode_info(d: dict) -> TensorInfo:
    return TensorInfo(d["name"], np.dtype(d["dtype"]), None if d["shape"] is None else tuple(d["shape"]))


def _tensor(weights: np.ndarray, d: dict, where: str) -> np.ndarray:
    dtype = np.dtype(d["dtype"])
    n = int(np.prod(d["shape"], dtype=np.int64)) * dtype.itemsize
    if d["offset"] < 0 or d["offset"] + n > weights.size:
        raise ModelFormatError(f"tensor at offset {d['offset']} ({n} bytes) lies outside the weights section", where=where)
    return weights[d["offset"]:d["offset"] + n].view(dtype).reshape(d["shape"])


def _decode_graph(d: dict, weights: np.ndarray, where: str) -> Graph:
    def attr(v):
        if isinstance(v, dict) and "__graph__" in v:
            return _decode_graph(v["__graph__"], weights, where)
        if isinstance(v, dict) and "__array__" in v:
            return _tensor(weights, v["__array__"], where)
        return v

    nodes = [Node(n["op"], n["name"], n["inputs"], n["outputs"], {k: attr(v) for k, v in n["attrs"].items()},
                  n.get("domain", "")) for n in d["nodes"]]
    inits = {k: _tensor(weights, v, where) for k, v in d["initializers"].items()}
    return Graph(d["name"], nodes, [_decode_info(t) for t in d["inputs"]], [_decode_info(t) for t in d["outputs"]],
                 inits, d["opset"])


def parse(buffer, where: str) -> LoadedModel:
    size = len(buffer)
    if size < HEADER.size:
        raise ModelFormatError(f"truncated: {size} bytes, shorter than the {HEADER.size}-byte header", where=where)
    magic, version, _, moff, mlen, woff, wlen, crc, _ = HEADER.unpack_from(buffer, 0)
    if magic != MAGIC:
        raise ModelFormatError(f"wrong magic {magic!r}: not an .aie model (expected {MAGIC!r})", where=where)
    if version > FORMAT_VERSION:
        raise ModelFormatError(f"format version {version} is newer than this engine supports ({FORMAT_VERSION})",
                               where=where, hint="upgrade ai-engine or re-convert the model with this version")
    if version < 1:
        raise ModelFormatError(f"invalid format version {version}", where=where)
    if moff + mlen > size or woff + wlen > size or woff % ALIGN:
        raise ModelFormatError(f"truncated: sections need {max(moff + mlen, woff + wlen)} bytes, file has {size}",
                               where=where)
    view = memoryview(buffer)
    actual = zlib.crc32(view[woff:woff + wlen], zlib.crc32(view[moff:moff + mlen]))
    if actual != crc:
        raise ModelFormatError(f"checksum mismatch (stored {crc:08x}, computed {actual:08x}): the file is corrupted",
                               where=where)
    try:
        meta = json.loads(bytes(view[moff:moff + mlen]))
    except ValueError as exc:
        raise ModelFormatError(f"metadata is not valid JSON: {exc}", where=where) from None
    weights = np.frombuffer(buffer, np.uint8, count=wlen, offset=woff) if wlen else np.zeros(0, np.uint8)
    try:
        graph = _decode_graph(meta["graph"], weights, where)
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFormatError(f"metadata is malformed: {type(exc).__name__}: {exc}", where=where) from None
    return LoadedModel(graph, meta, buffer, weights)


def load(path: str | Path) -> LoadedModel:
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise ModelFormatError("truncated: the file is empty", where=str(path))
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise ModelFormatError(f"cannot open: {exc.strerror}", where=str(path)) from None
    return parse(buf, str(path))


def planned_memory(path: str | Path) -> int:
    """Bytes a model needs resident: weights + the largest arena peak among
    the shapes planned at conversion (for hugepage sizing)."""
    model = load(path)
    peaks = [p["arena_bytes"] for p in model.meta.get("planned", [])]
    return int(model.weights.size + max(peaks, default=0))
