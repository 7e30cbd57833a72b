"""Calibration samples: the inputs whose activations set the quantisation
ranges.

A calibration source is a .npy (a model with one input: one batch, samples
along axis 0), a .npz (one array per input name, one batch), or a directory
of such files (each one batch, taken in name order). Every batch is checked
against the model's inputs (names, rank, fixed dimensions) before any model
runs, so a wrong file is named, not discovered as a shape error mid-way.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import ConversionError

SUFFIXES = (".npy", ".npz")


@dataclass
class Calibration:
    source: str
    batches: list[dict[str, np.ndarray]]

    @property
    def samples(self) -> int:
        return sum(next(iter(b.values())).shape[0] for b in self.batches)


def _read(path: Path, inputs: list) -> dict[str, np.ndarray]:
    names = [t.name for t in inputs]
    try:
        with open(path, "rb") as f:
            loaded = np.load(f, allow_pickle=False)
            if isinstance(loaded, np.lib.npyio.NpzFile):
                with loaded:
                    feeds = {k: np.asarray(loaded[k]) for k in loaded.files}
            else:
                if len(names) != 1:
                    raise ConversionError(f"a .npy holds one array, the model has {len(names)} inputs "
                                          f"({', '.join(names)})", where=str(path),
                                          hint="use a .npz with one array per input name")
                feeds = {names[0]: np.asarray(loaded)}
    except ConversionError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ConversionError(f"not a readable .npy/.npz calibration file ({exc})", where=str(path)) from None
    if set(feeds) != set(names):
        raise ConversionError(f"the file holds arrays {sorted(feeds)}, the model's inputs are {sorted(names)}",
                              where=str(path))
    for t in inputs:
        a = feeds[t.name]
        shape = list(t.shape or [])
        if a.ndim != len(shape) or any(isinstance(d, int) and d > 0 and d != n for d, n in zip(shape, a.shape)):
            raise ConversionError(f"input {t.name!r} has shape {list(a.shape)}, the model expects {shape} "
                                  "(-1: any size)", where=str(path), hint="samples go along the first axis")
        if a.ndim == 0 or a.shape[0] == 0:
            raise ConversionError(f"input {t.name!r} holds no samples (shape {list(a.shape)})", where=str(path))
        try:
            feeds[t.name] = np.ascontiguousarray(a.astype(t.dtype, casting="same_kind"))
        except TypeError:
            raise ConversionError(f"input {t.name!r} is {a.dtype}, the model expects {np.dtype(t.dtype)}",
                                  where=str(path)) from None
    sizes = {feeds[n].shape[0] for n in names}
    if len(sizes) > 1:
        raise ConversionError(f"the inputs hold different sample counts {sorted(sizes)}", where=str(path))
    return feeds


def load_calibration(source: str | Path, inputs: list) -> Calibration:
    """inputs: the model's graph inputs (engine.ir values: name, shape, dtype)."""
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file())
        if not files:
            raise ConversionError("the calibration directory holds no .npy/.npz files", where=str(path))
    elif path.is_file():
        if path.suffix not in SUFFIXES:
            raise ConversionError(f"a calibration file is a .npy or .npz, not {path.suffix or 'a file without suffix'}",
                                  where=str(path))
        files = [path]
    else:
        raise ConversionError("no such calibration file or directory", where=str(path))
    return Calibration(str(path), [_read(f, inputs) for f in files])
