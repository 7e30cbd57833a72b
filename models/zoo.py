"""The model zoo: build ONNX models for tests, benchmarks and deployment.

    python -m models.zoo --out build/models            # every model
    python -m models.zoo --out build/models digits mlp # some
    python -m models.zoo --list

Generation is deterministic (same code, onnx and numpy versions -> same
bytes) and incremental: each .onnx records a recipe hash (the zoo's sources,
the model name, the onnx/numpy versions) in its metadata_props, and a model
whose file carries the current recipe is not rebuilt. Files are written to a
temporary name and renamed, so a reader never sees half a model, and two
processes building at once both end with a complete file.

Python API (tests and the converter use these):
    NAMES                                   the model names, in build order
    ensure(name, out_dir, force=False) -> Path   build if stale, return the .onnx
    random_inputs(name, batch=1, seed=0, seq=128) -> dict[str, np.ndarray]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

from models import bert_mini, classifiers, detector, digits, recurrent

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "build" / "models"
RECIPE_KEY = "ai-engine.zoo.recipe"


class ZooError(Exception):
    """A zoo request that cannot be served (unknown model, unwritable output)."""


@dataclass(frozen=True)
class Entry:
    build: Callable[[], onnx.ModelProto] | None
    summary: str


# Build order: small first, so `python -m models.zoo` shows progress early.
ZOO: dict[str, Entry] = {
    "digits": Entry(None, "trained MLP digit classifier, image [N,1,28,28] -> probabilities [N,10] (default model)"),
    "mlp": Entry(classifiers.mlp, "MLP 784-512-512-10, input [N,784] -> logits [N,10]"),
    "cnn_bn": Entry(classifiers.cnn_bn, "CNN with Conv+BatchNorm+Relu, input [N,3,32,32] -> logits [N,10]"),
    "detector": Entry(detector.detector, "YOLO-style detector, images [N,3,160,160] -> boxes, scores"),
    "detector_nms": Entry(detector.detector_nms, "the detector at 320x320 with NonMaxSuppression in the graph, "
                          "images [N,3,320,320] -> selected [K,3], det_boxes [K,4], det_scores [K]"),
    "detector_nms_640": Entry(detector.detector_nms_640, "detector_nms at 640x640, images [N,3,640,640] -> "
                              "selected [K,3], det_boxes [K,4], det_scores [K]"),
    "lstm": Entry(recurrent.lstm_model, "LSTM classifier (input 64, hidden 128), x [N,seq,64] -> logits [N,10]"),
    "bert_mini": Entry(bert_mini.bert_mini, "BERT-mini encoder, input_ids/attention_mask int64 [N,S]"),
    "mobilenetv2": Entry(classifiers.mobilenetv2, "MobileNetV2 width 1.0, input [N,3,224,224] -> logits [N,1000]"),
    "resnet18": Entry(classifiers.resnet18, "ResNet-18, input [N,3,224,224] -> logits [N,1000]"),
}
NAMES = tuple(ZOO)


def recipe(name: str) -> str:
    """Hash of everything that decides a model's bytes."""
    h = hashlib.sha256(f"{name}\0onnx {onnx.__version__}\0numpy {np.__version__}\0".encode())
    for src in sorted(Path(__file__).resolve().parent.glob("*.py")):
        h.update(src.name.encode() + b"\0" + src.read_bytes())
    return h.hexdigest()


def outputs_of(name: str, out_dir: Path) -> list[Path]:
    """Every file `ensure(name)` writes; the .onnx first."""
    base = [out_dir / f"{name}.onnx"]
    if name == "digits":
        base += [out_dir / "digits.sample.npy", out_dir / "digits.sample.json"]
    return base


def _recorded_recipe(path: Path) -> str | None:
    """The recipe a generated file was built from; None when missing or unreadable."""
    try:
        if path.suffix == ".json":
            return json.loads(path.read_text()).get("recipe")
        model = onnx.load(str(path), load_external_data=False)
        return next((p.value for p in model.metadata_props if p.key == RECIPE_KEY), None)
    except Exception:  # noqa: BLE001 - missing, truncated or foreign: rebuild it
        return None


def is_up_to_date(name: str, out_dir: Path) -> bool:
    """The .onnx (and a digits sample's .json) carry the current recipe; other outputs exist."""
    want = recipe(name)
    return all(_recorded_recipe(p) == want if p.suffix in (".onnx", ".json") else p.exists()
               for p in outputs_of(name, out_dir))


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _stamp(model: onnx.ModelProto, name: str) -> bytes:
    entry = model.metadata_props.add()
    entry.key, entry.value = RECIPE_KEY, recipe(name)
    return model.SerializeToString()


def _npy_bytes(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def _build_digits(out_dir: Path) -> str:
    trained = digits.train_and_export()
    sample = {
        "_generated": "GENERATED by models/zoo.py (digits); do not edit",
        "recipe": recipe("digits"),
        "model": "digits.onnx",
        "input": "image",
        "output": "probabilities",
        "images": "digits.sample.npy",
        "labels": trained.sample_labels,
        "expected_top1": trained.sample_top1,
        "expected_probability": trained.sample_probability,
        "heldout_accuracy": round(trained.heldout_accuracy, 6),
        "heldout_size": digits.N_HELDOUT,
    }
    _write_atomic(out_dir / "digits.sample.npy", _npy_bytes(trained.sample_images))
    _write_atomic(out_dir / "digits.sample.json", (json.dumps(sample, indent=2) + "\n").encode())
    _write_atomic(out_dir / "digits.onnx", _stamp(trained.model, "digits"))
    return f"held-out accuracy {trained.heldout_accuracy:.2%}"


def ensure(name: str, out_dir: Path | str = DEFAULT_OUT, force: bool = False,
           log: Callable[[str], None] | None = None) -> Path:
    """Build `name` into out_dir unless it is up to date; return its .onnx path."""
    if name not in ZOO:
        raise ZooError(f"unknown model {name!r} (expected one of: {', '.join(NAMES)})")
    out_dir = Path(out_dir)
    target = out_dir / f"{name}.onnx"
    if not force and is_up_to_date(name, out_dir):
        if log:
            log(f"zoo: {name:<12} up to date    {target}")
        return target
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ZooError(f"cannot create output directory {out_dir}: {exc.strerror}") from None
    start = time.perf_counter()
    if log:
        log(f"zoo: {name:<12} building ...")
    try:
        if name == "digits":
            note = _build_digits(out_dir)
        else:
            _write_atomic(target, _stamp(ZOO[name].build(), name))
            note = ""
    except OSError as exc:
        raise ZooError(f"cannot write {target}: {exc.strerror}") from None
    if log:
        size = target.stat().st_size / 1e6
        log(f"zoo: {name:<12} built in {time.perf_counter() - start:.1f} s ({size:.1f} MB) {target}"
            + (f"; {note}" if note else ""))
    return target


def random_inputs(name: str, batch: int = 1, seed: int = 0, seq: int = 128) -> dict[str, np.ndarray]:
    """Seeded inputs of the right names, shapes, dtypes and value ranges for a model."""
    rng = np.random.default_rng(seed)
    if name == "bert_mini":
        ids = rng.integers(0, bert_mini.VOCAB, (batch, seq), dtype=np.int64)
        # Padding at the end of every row but the first, like a batch of varied sentences.
        lengths = np.concatenate([[seq], rng.integers(1, seq + 1, batch - 1)])
        mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
        return {"input_ids": ids, "attention_mask": mask}
    shapes = {"digits": ("image", (1, 28, 28)), "mlp": ("input", (784,)), "cnn_bn": ("input", (3, 32, 32)),
              "detector": ("images", (3, detector.SIZE, detector.SIZE)),
              "detector_nms": ("images", (3, detector.NMS_SIZE, detector.NMS_SIZE)),
              "detector_nms_640": ("images", (3, 640, 640)),
              "mobilenetv2": ("input", (3, 224, 224)), "resnet18": ("input", (3, 224, 224)),
              "lstm": ("x", (seq, recurrent.INPUT))}
    if name not in shapes:
        raise ZooError(f"unknown model {name!r} (expected one of: {', '.join(NAMES)})")
    input_name, shape = shapes[name]
    if name == "digits":
        return {input_name: rng.uniform(0.0, 1.0, (batch, *shape)).astype(np.float32)}
    return {input_name: rng.standard_normal((batch, *shape)).astype(np.float32)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.zoo", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"models to build (default: all of {', '.join(NAMES)})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default: {DEFAULT_OUT})")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    if args.list:
        for name, entry in ZOO.items():
            print(f"{name:<12} {entry.summary}")
        return 0
    unknown = [n for n in args.names if n not in ZOO]
    if unknown:
        print(f"models.zoo: error: unknown model {', '.join(map(repr, unknown))} "
              f"(expected one of: {', '.join(NAMES)})", file=sys.stderr)
        return 2
    try:
        for name in args.names or NAMES:
            ensure(name, args.out, force=args.force, log=lambda line: print(line, flush=True))
    except ZooError as exc:
        print(f"models.zoo: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
